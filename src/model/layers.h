// The building blocks every forward pass is made of, written once: weight binding, the batch
// flattened into token rows, RMSNorm over rows, embedding, the dense attention block over a
// paged KV group, the gated FFN block and the logits. An architecture (model/llama.cc,
// model/v41.cc, ...) is a list of these blocks, top to bottom.
//
// Determinism (DESIGN.md section 5): every block works row by row (or per (row, head)) in a
// fixed order, and the matmul gives each output element the same value whatever the batch, so
// a token's result never depends on the other rows or the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
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
  Activations(int64_t max_tokens, int64_t dim, int64_t ffn_dim);
  std::vector<float> x;     // (T, dim): residual stream
  std::vector<float> xb;    // (T, dim): normed input of a block
  std::vector<float> proj;  // (T, dim): output of a block, before the residual add
  std::vector<float> gate;  // (T, ffn)
  std::vector<float> up;    // (T, ffn)
  std::vector<float> last;  // (T, dim): rows that want logits, gathered and normed
};

// ---- blocks ----

// out[t] = RMSNorm(in[t]) * weight for t < rows; in and out are (rows, dim) and may alias.
void NormRows(const float* weight, const float* in, float* out, int64_t rows, int64_t dim,
              float eps, ThreadPool& pool);

// x[t] = table[rows.tokens[t]] for every row. x: (T, table.cols).
void Embed(const kernels::WeightMatrix& table, const TokenRows& rows, float* x, ThreadPool& pool);

// The attention block of a llama-style layer over one paged KV group (full or sliding):
//   n = RMSNorm(x) * norm;  q = Wq n, k = Wk n, v = Wv n, q and k roped at their positions
//   K/V stored in the cache, then read back as stored;  x += Wo Attention(q, K, V)
struct AttentionWeights {
  const float* norm = nullptr;       // (dim)
  kernels::WeightMatrix q, k, v, o;  // (heads*hd, dim), (kv_heads*hd, dim) x2, (dim, heads*hd)
};
AttentionWeights BindAttention(const gguf::GgufFile& file, int layer);

// Buffers of AttentionBlock, T = max_batch_tokens.
struct AttentionBuffers {
  AttentionBuffers(int64_t max_tokens, int64_t q_row, int64_t kv_row);
  std::vector<float> q;    // (T, heads * head_dim)
  std::vector<float> k;    // (T, kv_heads * head_dim)
  std::vector<float> v;    // (T, kv_heads * head_dim)
  std::vector<float> att;  // (T, heads * head_dim): attention output before Wo
};

struct AttentionLayer {
  const AttentionWeights* weights = nullptr;
  const kernels::AttentionShape* shape = nullptr;
  const kernels::RopeParams* rope = nullptr;
  float eps = 1e-5f;
  const tensor::PagedKvView* kv = nullptr;  // the layer's group
  int kv_layer = 0;                         // the layer's index in that view
};
void AttentionBlock(const AttentionLayer& layer, const TokenRows& rows,
                    std::span<const kernels::AttentionSequence> seqs, Activations& act,
                    AttentionBuffers& buf, kernels::AttentionScratch& attention_scratch,
                    kernels::MatMulScratch& matmul_scratch, ThreadPool& pool);

// The gated (SwiGLU) FFN block: n = RMSNorm(x) * norm; x += Wdown (silu(Wgate n) * (Wup n)).
struct FfnWeights {
  const float* norm = nullptr;           // (dim)
  kernels::WeightMatrix gate, up, down;  // (ffn, dim) x2, (dim, ffn)
};
FfnWeights BindFfn(const gguf::GgufFile& file, int layer);
void GatedFfnBlock(const FfnWeights& w, float eps, int64_t num_tokens, Activations& act,
                   kernels::MatMulScratch& scratch, ThreadPool& pool);

// logits = Woutput (RMSNorm(x) * norm) for the last num_logits rows of every sequence, in
// sequence then position order. logits: (batch.NumLogitRows(), output.rows); untouched when
// no sequence wants any.
void Logits(const Batch& batch, const TokenRows& rows, const float* norm, float eps,
            const kernels::WeightMatrix& output, Activations& act, kernels::MatMulScratch& scratch,
            ThreadPool& pool, float* logits);

}  // namespace kvserve::model
