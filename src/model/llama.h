// LlamaModel: the GGUF `llama` architecture on CPU over a ragged batch, K/V read through block
// tables (tensor::PagedKvView).
//
//   x = token_embd[token]
//   per layer: x += Wo · Attention(RoPE(Wq · n), RoPE(Wk · n), Wv · n), n = RMSNorm(x) * attn_norm
//              x += Wdown · (silu(Wgate · n) * (Wup · n)),           n = RMSNorm(x) * ffn_norm
//   logits = Woutput · (RMSNorm(x) * output_norm)   (Woutput = token_embd when tied)
//
// Owns: the mapped GGUF file (weights are used in place from it, never copied) and every scratch
// activation, preallocated at Load for max_batch_tokens; Forward allocates nothing.
// Determinism: every op is per token or per (token, head) in a fixed order, and the matmul gives
// each output element the same value whatever the batch, so a sequence's logits are
// bit-identical alone or batched, however its prompt is chunked, for any thread count.
// Thread safety: Forward may run on one thread at a time (it uses the scratch buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/config.h"
#include "tensor/kv_view.h"

namespace kvserve::model {

struct LoadOptions {
  int64_t max_batch_tokens = 512;             // most tokens in one Forward
  std::optional<int32_t> max_context_tokens;  // longest sequence; default context_length
  int max_threads = 0;                        // largest ThreadPool used; 0 = DefaultThreadCount()
};

// One sequence's part of a step.
struct SequenceInput {
  std::span<const int32_t> tokens;       // this step's tokens, at least one
  int32_t start_pos = 0;                 // position of tokens[0]
  std::span<const int32_t> block_table;  // covers positions [0, start_pos + tokens.size())
  bool want_logits = false;              // logits of its last token
};

// A ragged batch: every sequence's tokens are processed in one Forward, concatenated in order.
struct ForwardBatch {
  std::vector<SequenceInput> sequences;

  int64_t NumTokens() const;
  int64_t NumLogitRows() const;  // sequences with want_logits
};

class LlamaModel {
 public:
  // Reads the config (a clear Status when metadata is missing or inconsistent) and binds the
  // weights in place.
  static Result<std::unique_ptr<LlamaModel>> Load(std::shared_ptr<const gguf::GgufFile> file,
                                                  const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }

  // Runs one step. For every sequence, writes its tokens' K/V into the cache through its block
  // table (as kv.dtype stores them) and reads K/V of [0, its last position] back from the cache.
  // logits: (batch.NumLogitRows(), vocab_size), rows in sequence order.
  // note: batch.NumTokens() <= max_batch_tokens, positions < max_context_tokens, tokens in
  // [0, vocab_size), kv has num_layers layers of row_elems num_kv_heads * head_dim, and
  // pool.num_threads() <= max_threads (all CHECKed).
  void Forward(const ForwardBatch& batch, const tensor::PagedKvView& kv, ThreadPool& pool,
               float* logits);

 private:
  struct LayerWeights {
    const float* attn_norm = nullptr;            // (dim)
    kernels::WeightMatrix wq, wk, wv, wo;        // (dim, dim), (kv_row, dim) x2, (dim, dim)
    const float* ffn_norm = nullptr;             // (dim)
    kernels::WeightMatrix w_gate, w_up, w_down;  // (ffn, dim) x2, (dim, ffn)
  };

  LlamaModel(std::shared_ptr<const gguf::GgufFile> file, ModelConfig config, LoadOptions options);
  void BindWeights();
  void AllocateScratch();
  void BuildSequences(const ForwardBatch& batch, const tensor::PagedKvView& kv);
  void Embed(ThreadPool& pool);
  void AttentionBlock(int layer, const tensor::PagedKvView& kv, ThreadPool& pool);
  void FeedForwardBlock(int layer, ThreadPool& pool);
  void Logits(const ForwardBatch& batch, ThreadPool& pool, float* logits);
  void NormRows(const float* weight, const float* in, float* out, int64_t rows, ThreadPool& pool);

  std::shared_ptr<const gguf::GgufFile> file_;
  ModelConfig config_;
  LoadOptions options_;
  kernels::AttentionShape attention_shape_;
  kernels::RopeParams rope_;

  // Weights, pointing into file_'s mapping.
  kernels::WeightMatrix token_embd_;    // (vocab, dim)
  kernels::WeightMatrix output_;        // (vocab, dim): token_embd_ when tied
  const float* output_norm_ = nullptr;  // (dim)
  std::vector<LayerWeights> layers_;

  // Per-step bookkeeping (capacity reserved at Load).
  std::vector<kernels::AttentionSequence> seqs_;  // one per sequence of the batch
  std::vector<int32_t> tokens_;                   // (tokens): the batch's tokens, concatenated
  std::vector<int32_t> positions_;                // (tokens)
  int64_t num_tokens_ = 0;

  // Scratch activations, T = max_batch_tokens.
  std::vector<float> x_;     // (T, dim): residual stream
  std::vector<float> xb_;    // (T, dim): normed input of a block
  std::vector<float> q_;     // (T, dim)
  std::vector<float> k_;     // (T, kv_row)
  std::vector<float> v_;     // (T, kv_row)
  std::vector<float> att_;   // (T, dim): attention output before Wo
  std::vector<float> proj_;  // (T, dim): output of Wo / Wdown
  std::vector<float> gate_;  // (T, ffn)
  std::vector<float> up_;    // (T, ffn)
  std::vector<float> last_;  // (T, dim): normed last rows of sequences wanting logits
  std::unique_ptr<kernels::AttentionScratch> attention_scratch_;
  kernels::MatMulScratch matmul_scratch_;  // T tokens, max(dim, ffn) columns
};

}  // namespace kvserve::model
