// Paged attention on CPU: causal (optionally sliding-window) GQA/MQA attention over a ragged
// batch, reading K/V through block tables as stored in the cache (tensor::PagedKvView).
//
// Order of a layer's step (so a token sees its own K/V as stored, after quantization):
//   1. the model computes this step's K/V rows (roped K) for every token,
//   2. WriteKv quantizes them into their cache slots,
//   3. PagedAttention reads every needed K/V row back from the cache, dequantized.
//
// Determinism: each (token, kv head) is computed by one thread, positions in increasing order,
// softmax in f32 with max subtraction; nothing depends on the other tokens of the batch, on how
// a prompt was chunked or on the thread count (DESIGN.md section 5).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels {

struct AttentionShape {
  int num_heads = 0;  // query heads
  int num_kv_heads =
      0;  // divides num_heads; query head h reads kv head h / (num_heads / num_kv_heads)
  int head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  // Sliding window: a query at position p sees [max(0, p - window + 1), p]; nullopt = all of [0,
  // p].
  std::optional<int32_t> window;
};

// One sequence's slice of a ragged batch. Its tokens are rows [first_row, first_row + num_tokens)
// of the batch's Q/K/V/output buffers, at positions [start_pos, start_pos + num_tokens).
// block_table covers positions [0, start_pos + num_tokens): entry i holds positions
// [i * block_size, (i + 1) * block_size).
struct AttentionSequence {
  int64_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  std::span<const int32_t> block_table;
};

// Per-thread buffers of PagedAttention, sized once for a shape, a context length and a thread
// count; fits every KV dtype (blocks of at most 32 values). Owned by the caller; not shared
// between concurrent calls.
class AttentionScratch {
 public:
  AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens, int num_threads);

  int32_t max_context_tokens() const { return max_context_tokens_; }
  int num_threads() const { return num_threads_; }
  // Thread t's buffers.
  float* Scores(int t) { return scores_.data() + t * scores_per_thread_; }  // (group, max_context)
  float* Row(int t) { return row_.data() + t * row_per_thread_; }           // (head_dim + 2 blocks)
  float* Acc(int t) { return acc_.data() + t * acc_per_thread_; }           // (group, head_dim)

 private:
  int32_t max_context_tokens_;
  int num_threads_;
  int64_t scores_per_thread_;
  int64_t row_per_thread_;
  int64_t acc_per_thread_;
  std::vector<float> scores_;
  std::vector<float> row_;
  std::vector<float> acc_;
};

// Quantizes this step's K and V rows into their cache slots of `layer`.
// k, v: (total rows, kv.row_elems). Every sequence's block table must cover its new positions.
void WriteKv(const tensor::PagedKvView& kv, int layer, std::span<const AttentionSequence> seqs,
             const float* k, const float* v, ThreadPool& pool);

// out[row, h, :] = sum_j softmax_j(scale * q[row, h, :] . K[j, kvh, :]) V[j, kvh, :] over the
// row's visible positions j, K/V read from the cache of `layer`.
// q, out: (total rows, num_heads * head_dim); they must not alias.
// note: kv.row_elems == num_kv_heads * head_dim, and scratch was built for this shape with at
// least pool.num_threads() threads and a max context >= every position + 1 (CHECKed).
void PagedAttention(const AttentionShape& shape, const tensor::PagedKvView& kv, int layer,
                    std::span<const AttentionSequence> seqs, const float* q, float* out,
                    ThreadPool& pool, AttentionScratch& scratch);

}  // namespace kvserve::kernels
