// Hybrid window + compressed-latent attention (DeepSeek-V4.1 style) on CPU, reading the
// sliding window through tensor::PagedKvView and the compressed entries through
// tensor::PagedLatentView, as stored (after quantization).
//
// One MQA KV head of head_dim values; K = V = the stored row (window) or latent (entry).
// For a query at position p of a layer whose source compresses `ratio` tokens per entry:
//   window set  W(p) = positions [max(0, p - window + 1), p]
//   entries     E(p) = complete entries only: entry i covers tokens [ratio * i, ratio * i + ratio)
//                      and is visible iff ratio * i + ratio - 1 <= p, i.e. i < (p + 1) / ratio.
//                      (Tokens of the incomplete last group are covered by the window, since
//                      ratio <= window.) Worked example: ratio 2, p = 6: entries 0, 1, 2
//                      (tokens 0-5); token 6 is only in the window.
//   selected    S(p) = the indexer's top_k of E(p) (all of E(p) when |E(p)| <= top_k)
//   out[h] = sum_j softmax_j(scale * q[h] . row_j) row_j over the list L(p) = W(p) in position
//            order, then S(p) in entry order (one softmax).
// Numerics: the chunk step of attention.h (kernels/cpu/attention.h) over L(p) cut into
// chunks of 16 list entries (chunk c = entries [16c, 16c + 16), the last one partial), in
// order, with one state and no partitions: 16-lane FMA dot products summed by halving,
// AttentionExp, out = acc * (1 / L summed by halving). head_dim is a multiple of 16.
// Indexer: score_i = sum_h relu(q_idx[h] . k_idx[i]) * w[h], in double, h and the dot in index
// order; ranking by score descending, ties by the lower entry index. Candidate stage (when
// |E(p)| > candidate_blocks * candidate_block_size): entries are grouped in blocks of
// candidate_block_size (block b = entries [b * cbs, (b + 1) * cbs)), a block's score is the max
// of its entries' scores, the candidate_blocks best blocks (ties: lower block) are kept, and the
// top_k is taken among their entries.
//
// Work: one query row at a time; its window rows and selected entries are converted to f32
// once and read by all heads (MQA), four heads at a time sharing each row load.
// Determinism: each token is computed by one thread in a fixed order; nothing depends on the
// batch, chunking, thread count or SIMD target (DESIGN.md section 5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels {

struct HybridAttentionShape {
  int num_heads = 0;
  int head_dim = 0;  // = window row elems = latent elems
  float scale = 1.0f;
  int window = 0;
  int ratio = 0;  // 0: the layer reads no compressed entries
  int index_heads = 0;
  int index_dim = 0;
  int top_k = 0;
  int candidate_blocks = 2048;
  int candidate_block_size = 8;
};

// One sequence's slice of the ragged batch (rows [first_row, first_row + num_tokens)).
struct HybridSequence {
  int64_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  std::span<const int32_t> window_table;  // sliding group's block table
  std::span<const int32_t> latent_table;  // the latent group's (empty when ratio == 0)
};

// Per-thread buffers, sized for a shape, a context length and a thread count. Not shared
// between concurrent calls.
class HybridAttentionScratch {
 public:
  HybridAttentionScratch(const HybridAttentionShape& max_shape, int32_t max_context_tokens,
                         int num_threads);
  struct Thread {
    std::vector<float> rows;           // (window + top_k rounded up to 16, head_dim): K/V rows
    std::vector<float> states;         // (num_heads, head_dim + 32): softmax states
    std::vector<double> entry_scores;  // (max entries)
    std::vector<int32_t> order;        // (max entries)
    std::vector<int32_t> selected;     // (top_k)
    std::vector<float> key;            // (index_dim)
  };
  Thread& thread(int t) { return threads_.at(t); }
  int state_floats() const { return state_floats_; }
  int num_threads() const { return static_cast<int>(threads_.size()); }
  int32_t max_context_tokens() const { return max_context_tokens_; }

 private:
  int32_t max_context_tokens_;
  int state_floats_;
  std::vector<Thread> threads_;
};

// The indexer's choice for one query: writes the selected entry indices of E(p) (num_visible
// = (p + 1) / ratio entries) in increasing order to `selected` and returns how many.
// q_idx: (index_heads, index_dim); w: (index_heads). Entry i is read from `slot` of `latent`
// through `table` (block i * ratio / block_size, entry slot (i * ratio % block_size) / ratio).
int SelectEntries(const HybridAttentionShape& shape, const tensor::PagedLatentView& latent,
                  int slot, std::span<const int32_t> table, int32_t num_visible, const float* q_idx,
                  const float* w, HybridAttentionScratch::Thread& t, int32_t* selected);

// out[row, h, :] as in the header comment, for every row of every sequence.
// q, out: (rows, num_heads * head_dim); q_idx: (rows, index_heads * index_dim);
// idx_w: (rows, index_heads) (both unused when ratio == 0). latent may be null when ratio == 0.
// note: window view row_elems == head_dim; positions < scratch.max_context_tokens() (CHECKed).
void HybridAttention(const HybridAttentionShape& shape, const tensor::PagedKvView& window,
                     int window_slot, const tensor::PagedLatentView* latent, int latent_slot,
                     std::span<const HybridSequence> seqs, const float* q, const float* q_idx,
                     const float* idx_w, float* out, ThreadPool& pool,
                     HybridAttentionScratch& scratch);

// The latent row (index_row false) or indexer key row of entry i of `table` in `slot`
// (block i * ratio / block_size, entry slot (i * ratio % block_size) / ratio).
// Example: ratio 2, block 16, i = 11: token 22 -> block table[1], entry slot (22 % 16) / 2 = 3.
inline const std::byte* LatentEntry(const tensor::PagedLatentView& v, int slot,
                                    std::span<const int32_t> table, int32_t i, bool index_row) {
  const int64_t token = static_cast<int64_t>(i) * v.compress_ratio;
  const int32_t block = table[token / v.block_size];
  const int entry = static_cast<int>((token % v.block_size) / v.compress_ratio);
  return index_row ? v.IndexRow(slot, block, entry) : v.LatentRow(slot, block, entry);
}

// Quantizes rows (rows, head_dim) into window slots for every sequence's new positions.
void WriteWindowRows(const tensor::PagedKvView& window, int slot,
                     std::span<const HybridSequence> seqs, const float* rows);

}  // namespace kvserve::kernels
