#include "kernels/cpu/mla_attention.h"

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
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

MlaScratch::MlaScratch(const MlaShape& shape, int32_t max_context_tokens, int num_threads)
    : attention_shape_(LatentHeadShape(shape)),
      attention_(attention_shape_, max_context_tokens, num_threads) {
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
  CHECK(a.num_heads == shape.num_heads && a.head_dim == dim && a.scale == shape.scale)
      << "MlaScratch built for another shape";
  const tensor::PagedLatentLayer& l = latent.layers.at(layer);
  const size_t row_bytes = static_cast<size_t>(tensor::RowBytes(latent.latent_dtype, dim));
  CHECK_EQ(l.latent_stride_bytes, row_bytes) << "latent rows must be stored back to back";
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
