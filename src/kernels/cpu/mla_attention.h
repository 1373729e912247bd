// Multi-head latent attention (DeepSeek-V2/V3 MLA) decode with the up-projections absorbed:
// the cache holds, per token and layer, one latent row [c (kv_lora_rank) | k_pe (rope_dim)]
// (tensor::PagedLatentView, compress_ratio 1, read as stored), and every query head attends
// to those rows directly, so nothing is decompressed per cached token.
//
// The model prepares, per row and head h, the absorbed query
//   q[h] = [W_UK[h]^T q_nope[h] (kv_lora_rank) | rope(q_pe[h]) (rope_dim)]
// and after this kernel multiplies out[h] (kv_lora_rank) by W_UV[h] (model/deepseek2.h).
// For a query at position p:
//   s_j    = scale * q[h] . row_j                        (j in [0, p], all latent_dim values)
//   out[h] = sum_j softmax_j(s) * row_j[0 : kv_lora_rank] (the latent c_j is also the value)
//
// Numerics (fixed per query, DESIGN.md section 5): rows are visited in chunks of 16 aligned to
// absolute positions ([16c, 16c + 16) clipped to [0, p]), in increasing order; a dot product
// sums 16 lanes (lane l takes columns l, l + 16, ... in order) then a fixed halving tree; per
// chunk m' = max(m, max_j s_j), a = exp(m - m'), sum = sum * a + (sum_j exp(s_j - m') in
// order), acc = acc * a + sum_j p_j row_j in order; out = acc / sum. Nothing depends on the
// other queries of the batch, the chunking of the prompt, the work split or the thread count.
// Parallelism: work items are (sequence, tile of up to 16 query rows, group of heads); a tile
// dequantizes each cached chunk once for all its queries and heads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels {

struct MlaShape {
  int num_heads = 0;
  int kv_lora_rank = 0;  // latent values that are also the value
  int rope_dim = 0;      // decoupled rope key values after them
  float scale = 1.0f;
  int latent_dim() const { return kv_lora_rank + rope_dim; }
};

// Per-thread buffers, sized once for a shape and a thread count. Not shared between concurrent
// calls. Per thread: rows (16, latent_dim), scores (16), acc (16 queries x heads x
// kv_lora_rank), max and sum (16 x heads).
class MlaScratch {
 public:
  static constexpr int kQueryTile = 16;
  static constexpr int kKeyChunk = 16;
  MlaScratch(const MlaShape& shape, int32_t max_context_tokens, int num_threads);

  struct Thread {
    std::vector<float> rows, scores, acc, max, sum;
  };
  struct Item {
    int32_t seq = 0, first = 0, count = 0, head = 0, heads = 0;
  };
  Thread& thread(int t) { return threads_.at(t); }
  int num_threads() const { return static_cast<int>(threads_.size()); }
  int32_t max_context_tokens() const { return max_context_tokens_; }
  std::vector<Item>& items() { return items_; }

 private:
  int32_t max_context_tokens_;
  std::vector<Thread> threads_;
  std::vector<Item> items_;
};

// Quantizes this step's latent rows (rows, latent.latent_elems) into entry slots of `layer`
// (compress_ratio 1: the entry of position p is block_table[p / block_size], slot
// p % block_size).
void WriteLatentRows(const tensor::PagedLatentView& latent, int layer,
                     std::span<const AttentionSequence> seqs, const float* rows, ThreadPool& pool);

// out[row, h, :] (kv_lora_rank values) as in the header comment for every row of every
// sequence. q: (rows, num_heads, latent_dim); out: (rows, num_heads, kv_lora_rank).
// note: latent.latent_elems == latent_dim, compress_ratio 1, positions < max_context_tokens,
// pool.num_threads() <= scratch.num_threads() (CHECKed).
void MlaAttention(const MlaShape& shape, const tensor::PagedLatentView& latent, int layer,
                  std::span<const AttentionSequence> seqs, const float* q, float* out,
                  ThreadPool& pool, MlaScratch& scratch);

// The 16-lane dot product of the scheme above. note: n % 16 == 0.
float LaneDot(const float* a, const float* b, int64_t n);

}  // namespace kvserve::kernels
