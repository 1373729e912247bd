// Multi-head latent attention (DeepSeek-V2/V3 MLA) with the up-projections absorbed: the
// cache holds, per token and layer, one latent row [c (kv_lora_rank) | k_pe (rope_dim)]
// (tensor::PagedLatentView, compress_ratio 1, read as stored), and every query head attends
// to those rows directly, so nothing is decompressed per cached token.
//
// The model prepares, per row and head h, the absorbed query
//   q[h] = [W_UK[h]^T q_nope[h] (kv_lora_rank) | rope(q_pe[h]) (rope_dim)]
// and after this kernel multiplies out[h][0 : kv_lora_rank] by W_UV[h] (model/deepseek2.h).
// For a query at position p:
//   s_j    = scale * q[h] . row_j                        (j in [0, p], all latent_dim values)
//   out[h] = sum_j softmax_j(s) * row_j[0 : kv_lora_rank] (the latent c_j is also the value)
//
// This is multi-query attention with one kv head of latent_dim values whose key and value
// are the same cached row, so it runs on PagedAttention (kernels/cpu/attention.h) over a
// PagedKvView that points K and V at the latent rows: the same numbers, work items,
// flash-decoding splits and SIMD code as every other model's attention. Each 16-row chunk
// of a sequence's latent is converted once and read by all query heads (and all rows of a
// prefill tile). The value is the row's first kv_lora_rank values (AttentionShape::value_dim):
// the attention over k_pe, which the model would ignore, is not computed.
// Numerics: attention.h's contract (no window, no softcap, no sinks) for the kv head of
// latent_dim values: a query's result depends only on its position and the cached rows, never
// on the batch, the chunking, the thread count or the SIMD target.
//
// Decode rows (MlaDecodePath): a step whose sequences all decode one token, over F16 rows in
// blocks of a multiple of 16 positions, with latent_dim and kv_lora_rank multiples of 16, on
// AVX-512, runs a kernel of its own (mla_attention-inl.h) instead: one work item per
// sequence (claimed dynamically, all its heads), each 16-row chunk read in place from the
// cache (no f32 copy) by 4 query heads at a time, the next chunks requested ahead (also
// across sequences), the same operations per query as PagedAttention's, so the same bits.
// Steps with fewer than kMlaDecodeMinSeqsPerThread sequences per thread and a context past
// one 256-position partition stay on PagedAttention, which splits partitions over threads.
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

// Working memory of MlaAttention, sized once for a shape, a context length and a thread count
// (an AttentionScratch for the one latent kv head, and the K/V view over the latent rows).
// Owned by the caller; not shared between concurrent calls.
class MlaScratch {
 public:
  MlaScratch(const MlaShape& shape, int32_t max_context_tokens, int num_threads);

 private:
  friend void MlaAttention(const MlaShape&, const tensor::PagedLatentView&, int,
                           std::span<const AttentionSequence>, const float*, float*, ThreadPool&,
                           MlaScratch&);
  AttentionShape attention_shape_;
  AttentionScratch attention_;
  tensor::PagedKvView view_;  // one layer: K = V = the latent rows of the layer of a call
  int64_t states_per_thread_;  // the decode path's softmax states: 2 x heads x (latent_dim + 32)
  std::vector<float> states_;
};

// Decode steps with fewer sequences than this per thread (and a context past one partition)
// run on PagedAttention, which splits each sequence's partitions over the threads.
inline constexpr int kMlaDecodeMinSeqsPerThread = 4;

// Whether MlaAttention runs this step of `threads` threads on the decode path (above; on the
// current SIMD target). For tests and benchmarks; the result is the same bits either way.
bool MlaDecodePath(const MlaShape& shape, const tensor::PagedLatentView& latent,
                   std::span<const AttentionSequence> seqs, int threads);

// Quantizes this step's latent rows (rows, latent.latent_elems) into entry slots of `layer`
// (compress_ratio 1: the entry of position p is block_table[p / block_size], slot
// p % block_size).
void WriteLatentRows(const tensor::PagedLatentView& latent, int layer,
                     std::span<const AttentionSequence> seqs, const float* rows, ThreadPool& pool);

// out[row, h, 0 : kv_lora_rank] as in the header comment for every row of every sequence;
// out[row, h, kv_lora_rank :] is left as it was.
// q, out: (rows, num_heads, latent_dim); they must not alias.
// note: latent.latent_elems == latent_dim, compress_ratio 1, rows stored back to back
// (latent_stride_bytes == RowBytes), positions < max_context_tokens, pool.num_threads() <=
// the scratch's threads, the scratch built for this shape (CHECKed).
void MlaAttention(const MlaShape& shape, const tensor::PagedLatentView& latent, int layer,
                  std::span<const AttentionSequence> seqs, const float* q, float* out,
                  ThreadPool& pool, MlaScratch& scratch);

}  // namespace kvserve::kernels
