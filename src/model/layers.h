// The building blocks every forward pass is made of, written once: weight binding, the batch
// flattened into token rows, RMSNorm over rows, embedding, the dense attention block over a
// paged KV group, the gated FFN block and the logits. An architecture (model/dense.cc,
// model/v41.cc) is a list of these blocks, top to bottom; what an architecture adds (a bias, a
// q/k norm, a fused projection, a post-norm, GELU, soft-capping, a scaled embedding) is an
// optional part of a block here, so the next architecture reuses it.
//
// Determinism (DESIGN.md section 5): every block works row by row (or per (row, head)) in a
// fixed order, and the matmul gives each output element the same value whatever the batch, so
// a token's result never depends on the other rows or the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/config.h"
#include "model/model.h"

namespace kvserve::model {

// ---- weights ----

// The 2-D tensor `name` as a matmul operand: rows = ne[1] output features, cols = ne[0].
// note: the config reader checked it exists with a dtype the matmul takes (CHECKed here).
kernels::WeightMatrix BindMatrix(const gguf::GgufFile& file, const std::string& name);
// The F32 vector `name` (norm weights). note: checked by the config reader (CHECKed here).
const float* BindVector(const gguf::GgufFile& file, const std::string& name);

// ---- the batch as token rows ----

// Row r of every activation buffer is one token of one sequence, sequences in batch order.
struct TokenRows {
  std::vector<int32_t> tokens;     // (T)
  std::vector<int32_t> positions;  // (T)
  std::vector<int64_t> first_row;  // (sequences): the row of each sequence's first token
  int64_t num_tokens = 0;
};

// What every model CHECKs of a batch.
struct BatchLimits {
  int64_t vocab_size = 0;
  int64_t max_batch_tokens = 0;
  int32_t max_context_tokens = 0;
  int num_groups = 1;   // block tables per sequence
  int block_size = 16;  // tokens per KV block (the same in every group)
};

// Fills `rows` from `batch` (no allocation once rows' capacity is max_batch_tokens) and CHECKs
// its preconditions: at least one token per sequence, tokens in the vocabulary, positions
// below max_context_tokens, at most max_batch_tokens rows, num_groups block tables per sequence
// each covering the step's positions.
void FlattenBatch(const Batch& batch, const BatchLimits& limits, TokenRows& rows);

// Each sequence's slice of the batch in KV group `group`, for the paged attention kernels.
void AttentionSequencesOf(const Batch& batch, const TokenRows& rows, int group,
                          std::vector<kernels::AttentionSequence>& out);

// ---- activations ----

// The residual stream and the buffers of the dense blocks, T = max_batch_tokens.
struct Activations {
  Activations(int64_t max_tokens, int64_t dim, int64_t ffn_dim, bool fused_gate_up = false);
  std::vector<float> x;        // (T, dim): residual stream
  std::vector<float> xb;       // (T, dim): normed input of a block
  std::vector<float> proj;     // (T, dim): output of a block, before the residual add
  std::vector<float> gate;     // (T, ffn)
  std::vector<float> up;       // (T, ffn)
  std::vector<float> gate_up;  // (T, 2 * ffn): a fused gate|up projection (else empty)
  std::vector<float> last;     // (T, dim): rows that want logits, gathered and normed
};

// ---- blocks ----

// out[t] = RMSNorm(in[t]) * weight for t < rows; in and out are (rows, dim) and may alias.
void NormRows(const float* weight, const float* in, float* out, int64_t rows, int64_t dim,
              float eps, ThreadPool& pool);

// x[t] = table[rows.tokens[t]] * scale for every row. x: (T, table.cols).
void Embed(const kernels::WeightMatrix& table, const TokenRows& rows, float* x, ThreadPool& pool,
           float scale = 1.0f);

// The attention block of a dense layer over one paged KV group (full or sliding), every step
// optional but the projections:
//   n = RMSNorm(x) * norm
//   q, k, v = Wq n + bq, Wk n + bk, Wv n + bv     (or one fused Wqkv n split q | k | v)
//   q, k = RMSNorm per head * q_norm, k_norm        (qwen3, gemma3)
//   q, k roped at their positions; K/V stored in the cache, then read back as stored
//   a = Attention(q, K, V)   (scale, window and soft-cap from the layer's AttentionShape)
//   o = Wo a + bo;  o = RMSNorm(o) * post_norm      (gemma)
//   x += o
// Shapes: q (heads * head_dim), k and v (kv_heads * head_dim), x (dim).
struct AttentionWeights {
  const float* norm = nullptr;       // (dim)
  kernels::WeightMatrix q, k, v;     // (q_row, dim), (kv_row, dim) x2; unset when fused
  kernels::WeightMatrix qkv;         // (q_row + 2 kv_row, dim) when fused, else unset
  const float* q_bias = nullptr;     // (q_row), or null
  const float* k_bias = nullptr;     // (kv_row), or null
  const float* v_bias = nullptr;     // (kv_row), or null
  const float* q_norm = nullptr;     // (head_dim), or null
  const float* k_norm = nullptr;     // (head_dim), or null
  kernels::WeightMatrix o;           // (dim, q_row)
  const float* o_bias = nullptr;     // (dim), or null
  const float* post_norm = nullptr;  // (dim), or null
};
// Layer `layer`'s attention tensors as the config says they are (ReadModelConfig checked them).
AttentionWeights BindAttention(const gguf::GgufFile& file, int layer, const ModelConfig& config);

// Buffers of AttentionBlock, T = max_batch_tokens.
struct AttentionBuffers {
  AttentionBuffers(int64_t max_tokens, int64_t q_row, int64_t kv_row, bool fused_qkv = false);
  std::vector<float> q;    // (T, heads * head_dim)
  std::vector<float> k;    // (T, kv_heads * head_dim)
  std::vector<float> v;    // (T, kv_heads * head_dim)
  std::vector<float> qkv;  // (T, q_row + 2 kv_row) when fused, else empty
  std::vector<float> att;  // (T, heads * head_dim): attention output before Wo
};

struct AttentionLayer {
  const AttentionWeights* weights = nullptr;
  const kernels::AttentionShape* shape = nullptr;  // the layer's window and soft-cap
  const kernels::RopeParams* rope = nullptr;       // the layer's rotary embedding
  float eps = 1e-5f;
  const tensor::PagedKvView* kv = nullptr;  // the layer's group
  int kv_layer = 0;                         // the layer's index in that view
  // The step's rotary angles by RopeAnglesRows for `rope` (T, rope_dim); required.
  const float* rope_angles = nullptr;
};
// The residual: x (rows, dim) += proj (rows, dim), element by element (the same bits however
// the rows are split); batches of more than 16 rows over the pool, fewer inline.
void AddResidualRows(float* x, const float* proj, int64_t rows, int64_t dim, ThreadPool& pool);

// table[t * rope_dim ..] = kernels::RopeAngles(rope, rows.positions[t]) for every row t.
void RopeAnglesRows(const kernels::RopeParams& rope, const TokenRows& rows, float* table,
                    ThreadPool& pool);

void AttentionBlock(const AttentionLayer& layer, const TokenRows& rows,
                    std::span<const kernels::AttentionSequence> seqs, Activations& act,
                    AttentionBuffers& buf, kernels::AttentionScratch& attention_scratch,
                    kernels::MatMulScratch& matmul_scratch, ThreadPool& pool);

// The gated FFN block:
//   n = RMSNorm(x) * norm
//   g, u = Wgate n, Wup n                (or one fused Wup n split gate | up: phi3)
//   f = Wdown (act(g) * u)               (act: SiLU, or GELU-tanh as llama.cpp computes it)
//   f = RMSNorm(f) * post_norm           (gemma)
//   x += f
struct FfnWeights {
  const float* norm = nullptr;           // (dim)
  kernels::WeightMatrix gate, up, down;  // (ffn, dim) x2, (dim, ffn); fused: up (2 ffn, dim)
  const float* post_norm = nullptr;      // (dim), or null
  FfnActivation activation = FfnActivation::kSilu;
  bool fused_gate_up = false;
};
// Layer `layer`'s plain SwiGLU tensors (ffn_norm, ffn_gate, ffn_up, ffn_down).
FfnWeights BindFfn(const gguf::GgufFile& file, int layer);
// Layer `layer`'s FFN tensors as the config says they are.
FfnWeights BindFfn(const gguf::GgufFile& file, int layer, const ModelConfig& config);
void GatedFfnBlock(const FfnWeights& w, float eps, int64_t num_tokens, Activations& act,
                   kernels::MatMulScratch& scratch, ThreadPool& pool);

// logits = Woutput (RMSNorm(x) * norm) for the last num_logits rows of every sequence, in
// sequence then position order, then soft-capped when `softcap` is set (cap * tanh(logit /
// cap)). logits: (batch.NumLogitRows(), output.rows); untouched when no sequence wants any.
void Logits(const Batch& batch, const TokenRows& rows, const float* norm, float eps,
            const kernels::WeightMatrix& output, Activations& act, kernels::MatMulScratch& scratch,
            ThreadPool& pool, float* logits, std::optional<float> softcap = std::nullopt);

}  // namespace kvserve::model
