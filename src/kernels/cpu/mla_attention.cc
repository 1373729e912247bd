// MLA attention: the latent rows as a one-head K/V view for PagedAttention, and the decode
// path that reads them in place (the per-target code is in mla_attention-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/mla_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/mla_attention-inl.h"

#if HWY_ONCE
#include "core/check.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/mla_attention_internal.h"
#include "tensor/quant.h"

namespace kvserve::kernels {

HWY_EXPORT(MlaDecodeWorker);
HWY_EXPORT(MlaDecodeTarget);

namespace {

AttentionShape LatentHeadShape(const MlaShape& shape) {
  AttentionShape s;
  s.num_heads = shape.num_heads;
  s.num_kv_heads = 1;
  s.head_dim = shape.latent_dim();
  s.value_dim = shape.kv_lora_rank;
  s.scale = shape.scale;
  return s;
}

}  // namespace

bool MlaDecodePath(const MlaShape& shape, const tensor::PagedLatentView& latent,
                   std::span<const AttentionSequence> seqs, int threads) {
  if (latent.latent_dtype != tensor::DType::kF16 || latent.block_size % 16 != 0 ||
      shape.latent_dim() % 16 != 0 || shape.kv_lora_rank % 16 != 0 || seqs.empty()) {
    return false;
  }
  bool short_contexts = true;
  for (const AttentionSequence& s : seqs) {
    if (s.num_tokens != 1) return false;
    short_contexts = short_contexts && s.start_pos < AttentionScratch::kPartition;
  }
  if (!short_contexts && static_cast<int64_t>(seqs.size()) < kMlaDecodeMinSeqsPerThread * threads) {
    return false;
  }
  return HWY_DYNAMIC_DISPATCH(MlaDecodeTarget)();
}

MlaScratch::MlaScratch(const MlaShape& shape, int32_t max_context_tokens, int num_threads)
    : attention_shape_(LatentHeadShape(shape)),
      attention_(attention_shape_, max_context_tokens, num_threads),
      states_per_thread_(2 * int64_t{shape.num_heads} * (shape.latent_dim() + 32)),
      states_(static_cast<size_t>(states_per_thread_) * num_threads) {
  view_.layers.resize(1);
}

void WriteLatentRows(const tensor::PagedLatentView& latent, int layer,
                     std::span<const AttentionSequence> seqs, const float* rows, ThreadPool& pool) {
  CHECK_EQ(latent.compress_ratio, 1);
  const int64_t elems = latent.latent_elems;
  pool.ParallelFor(seqs.size(), [&](size_t begin, size_t end, int) {
    for (size_t s = begin; s < end; ++s) {
      const AttentionSequence& seq = seqs[s];
      for (int32_t i = 0; i < seq.num_tokens; ++i) {
        const int32_t pos = seq.start_pos + i;
        std::byte* dst = latent.LatentRow(layer, seq.block_table[pos / latent.block_size],
                                          pos % latent.block_size);
        tensor::QuantizeRow(latent.latent_dtype, rows + (seq.first_row + i) * elems, dst, elems);
      }
    }
  });
}

void MlaAttention(const MlaShape& shape, const tensor::PagedLatentView& latent, int layer,
                  std::span<const AttentionSequence> seqs, const float* q, float* out,
                  ThreadPool& pool, MlaScratch& scratch) {
  const int dim = shape.latent_dim();
  CHECK_EQ(latent.latent_elems, dim);
  CHECK_EQ(latent.compress_ratio, 1);
  const AttentionShape& a = scratch.attention_shape_;
  CHECK(a.num_heads == shape.num_heads && a.head_dim == dim && a.scale == shape.scale &&
        a.value_dim == shape.kv_lora_rank)
      << "MlaScratch built for another shape";
  CHECK_GE(scratch.attention_.num_threads(), pool.num_threads());
  const tensor::PagedLatentLayer& l = latent.layers.at(layer);
  const size_t row_bytes = static_cast<size_t>(tensor::RowBytes(latent.latent_dtype, dim));
  CHECK_EQ(l.latent_stride_bytes, row_bytes) << "latent rows must be stored back to back";
  if (MlaDecodePath(shape, latent, seqs, pool.num_threads())) {
    int64_t row = 0;
    for (const AttentionSequence& s : seqs) {
      CHECK_EQ(s.first_row, row++) << "sequences must be contiguous and in row order";
      CHECK_LT(s.start_pos, scratch.attention_.max_context_tokens())
          << "attention scratch too small";
    }
    internal::MlaCall call{&shape, &latent, layer, row_bytes, seqs, q, out,
                           scratch.states_.data(), scratch.states_per_thread_};
    pool.ParallelFor(static_cast<size_t>(pool.num_threads()), [c = &call](size_t, size_t, int t) {
      HWY_DYNAMIC_DISPATCH(MlaDecodeWorker)(c, t);
    });
    return;
  }
  // The latent rows of a block, slot after slot, are exactly a one-head K (and V) block.
  tensor::PagedKvView& v = scratch.view_;
  v.block_size = latent.block_size;
  v.dtype = latent.latent_dtype;
  v.row_elems = dim;
  v.segment_elems = tensor::KvSegmentElems(v.dtype, 1, dim);
  v.segment_bytes = row_bytes;
  v.layers[0] = {l.latent_base, l.latent_base, l.block_stride_bytes};
  PagedAttention(a, v, 0, seqs, q, out, pool, scratch.attention_);
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
