// Paged attention on CPU: causal (optionally sliding-window) GQA/MQA attention over a ragged
// batch, reading K/V through block tables as stored in the cache (tensor::PagedKvView).
//
// Order of a layer's step (so a token sees its own K/V as stored, after quantization):
//   1. the model computes this step's K/V rows (roped K) for every token,
//   2. WriteKv quantizes them into their cache slots,
//   3. PagedAttention reads every needed K/V row back from the cache, dequantized.
//
// Numerics (fixed per query, DESIGN.md section 5): keys are visited in chunks of 16 aligned to
// absolute positions (chunk c = positions [16c, 16c + 16), clipped to the query's visible range),
// in increasing order. Per chunk, scores s_j = scale * dot(q, k_j) (16 lanes: lane l sums
// columns l, l + 16, ... in order, then a fixed halving tree), m' = max(m, max_j s_j),
// a = exp(m - m'), p_j = exp(s_j - m'), sum = sum * a + (sum_j p_j in order),
// acc[d] = acc[d] * a + p_j * v_j[d] for j in order; at the end out = acc / sum.
// Each query's arithmetic depends only on its position, its window and the cached K/V, never on
// the other tokens of the batch, on how a prompt was chunked, on the work split or on the
// thread count. Example: a query at position 37 (no window) runs chunks [0,16), [16,32),
// [32,38); whether it is alone or in a tile with positions 32..47 changes nothing.
//
// Parallelism: work items are (sequence, group of kv heads, tile of up to 32 consecutive query
// rows); the tile reuses each dequantized K/V chunk for all its queries and all query heads of
// its kv heads. An item takes as many kv heads as leaves about 4 items per thread: all of them
// for a batch of decodes (each stored K/V row is then read as one contiguous slice), one for a
// lone decode (so both threads work). Threads claim items dynamically (the most expensive
// first), which balances causal prefill.
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
  // Logit soft-capping (Gemma 2): s = softcap * tanh(s / softcap) on each scaled score, before
  // the softmax; nullopt = none.
  std::optional<float> softcap;
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

// Working memory of PagedAttention, sized once for a shape, a context length and a thread
// count; fits every KV dtype (blocks of at most 32 values). Owns, per thread t:
//   keys:   (kKeyChunk, kv_heads, padded_head_dim) f32, one chunk of K rows of the item's kv
//           heads, dequantized
//   values: (kKeyChunk, kv_heads, head_dim) f32, the same chunk of V rows
//   staging: (kv_heads * head_dim + 2 * 32) f32, whole quantized blocks around a slice
//   rows:   (kKeyChunk, kv_heads * head_dim) f32, unpadded K slices (only when head_dim is not
//           a multiple of 16)
//   queries: (kQueryTile, num_heads, padded_head_dim) f32, the item's query rows, zero-padded
//   acc:    (kQueryTile, num_heads, head_dim) f32, unnormalized outputs
//   max, sum: (kQueryTile, num_heads) f32, online-softmax running max and denominator
// plus the step's list of work items. padded_head_dim = head_dim rounded up to 16; the padding
// stays zero. Owned by the caller; not shared between concurrent calls.
class AttentionScratch {
 public:
  static constexpr int kQueryTile = 32;  // query rows of one sequence per work item
  static constexpr int kKeyChunk = 16;   // keys per online-softmax step, at positions 16c..16c+15

  struct Thread {
    float* keys;
    float* values;
    float* staging;
    float* rows;  // unpadded key slices when head_dim is not a multiple of 16
    float* queries;
    float* acc;
    float* max;
    float* sum;
  };
  // One work item: rows [first, first + count) of seqs[seq], kv heads [kv_head, + kv_heads).
  struct Item {
    int32_t seq = 0;
    int32_t first = 0;
    int32_t count = 0;
    int32_t kv_head = 0;
    int32_t kv_heads = 1;
  };

  AttentionScratch(const AttentionShape& shape, int32_t max_context_tokens, int num_threads);

  int32_t max_context_tokens() const { return max_context_tokens_; }
  int num_threads() const { return num_threads_; }
  int padded_head_dim() const { return padded_head_dim_; }
  Thread ForThread(int t);
  std::vector<Item>& items() { return items_; }

 private:
  int32_t max_context_tokens_;
  int num_threads_;
  int padded_head_dim_;
  int64_t floats_per_thread_;
  static constexpr int kBuffers = 8;
  int64_t offsets_[kBuffers];
  std::vector<float> buffer_;  // num_threads x floats_per_thread_, zero-initialized
  std::vector<Item> items_;    // capacity grows to the largest step, then stays
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
