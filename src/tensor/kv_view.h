// PagedKvView: where the attention kernels find K/V, as plain pointers and strides.
//
// The KV manager (kv/) owns the arenas and fills these views; model/ passes them to kernels/.
// Nothing here allocates or does math, so kv/ may include it.
//
// A sequence's token at position p lives in block `block_table[p / block_size]`, slot
// `p % block_size`. A token's K (and V) row holds all KV heads, `row_elems` values
// (kv_heads * head_dim) stored as `dtype` (tensor/dtype.h; quantized formats scale blocks of
// BlockElems values along the row). The row is split into segments of `segment_elems` values
// (KvSegmentElems: one head, or the fewest whole heads that hold whole quantization blocks),
// and a block stores its K rows head-major:
//   K of (block b, slot s, segment g) starts at
//     k_base + b * block_stride_bytes + (g * block_size + s) * segment_bytes
// and V at the same offset from v_base. So one head's keys of one block are one contiguous
// run of block_size * segment_bytes bytes: attention streams them instead of picking a
// 64-value slice out of every token's row. A segment holds exactly the bytes of that part of
// the row quantized whole (blocks never straddle a segment), so the stored values are the
// same as for a token-major row.
//
// Example: 12 kv heads x 64 dims, f16, block_size 16: segment 64 values = 128 B; head 5 of
// slot 3 starts at (5 * 16 + 3) * 128 bytes into the block's K rows. Position 37 with
// block_table {4, 9, 2}: block 2, slot 5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace kvserve::tensor {

// The segment size of a K/V row of num_kv_heads x head_dim values in `dtype`: the smallest
// number of whole heads whose values are whole quantization blocks and divide the heads.
// Examples: 12 x 64 in any dtype: 64 (one head); 4 x 8 in q8_0 (32-value blocks): 32 (the
// whole row); 4 x 8 in f16: 8. note: num_kv_heads * head_dim is a multiple of BlockElems.
inline int KvSegmentElems(DType dtype, int num_kv_heads, int head_dim) {
  const int64_t block = BlockElems(dtype);
  for (int heads = 1; heads < num_kv_heads; ++heads) {
    if (num_kv_heads % heads == 0 && (int64_t{heads} * head_dim) % block == 0) {
      return heads * head_dim;
    }
  }
  return num_kv_heads * head_dim;
}

struct PagedKvLayer {
  std::byte* k_base = nullptr;
  std::byte* v_base = nullptr;  // may equal k_base (shared K/V) or k_base + an offset
  size_t block_stride_bytes = 0;
};

struct PagedKvView {
  int block_size = 16;
  DType dtype = DType::kF32;
  int row_elems = 0;       // kv_heads * head_dim
  int segment_elems = 0;   // KvSegmentElems(dtype, kv_heads, head_dim); divides row_elems
  size_t segment_bytes = 0;         // RowBytes(dtype, segment_elems)
  std::vector<PagedKvLayer> layers;  // one per model layer

  int num_segments() const { return row_elems / segment_elems; }
  std::byte* KSegment(int layer, int32_t block, int slot, int segment) const {
    const PagedKvLayer& l = layers[layer];
    return l.k_base + static_cast<size_t>(block) * l.block_stride_bytes +
           (static_cast<size_t>(segment) * block_size + slot) * segment_bytes;
  }
  std::byte* VSegment(int layer, int32_t block, int slot, int segment) const {
    const PagedKvLayer& l = layers[layer];
    return l.v_base + static_cast<size_t>(block) * l.block_stride_bytes +
           (static_cast<size_t>(segment) * block_size + slot) * segment_bytes;
  }
};

// The view of `num_layers` layers with no pointers yet: block geometry and segments.
inline PagedKvView MakePagedKvView(int num_layers, int num_kv_heads, int head_dim, DType dtype,
                                   int block_size) {
  PagedKvView view;
  view.block_size = block_size;
  view.dtype = dtype;
  view.row_elems = num_kv_heads * head_dim;
  view.segment_elems = KvSegmentElems(dtype, num_kv_heads, head_dim);
  view.segment_bytes = static_cast<size_t>(RowBytes(dtype, view.segment_elems));
  view.layers.resize(num_layers);
  return view;
}

// PagedLatentView: compressed latent KV (one entry per compress_ratio tokens), as plain
// pointers and strides. A token at position p belongs to entry p / compress_ratio; that
// entry lives in block `block_table[p / block_size]`, entry slot `(p % block_size) /
// compress_ratio`. The latent row of (block b, entry e) starts at
//   latent_base + b * block_stride_bytes + e * latent_stride_bytes
// and its indexer key row (when index_elems > 0) at the same b/e offsets from index_base.
// Layers that read another layer's entries get that layer's pointers.
//
// Example: block_size 16, compress_ratio 2, position 37, block_table {4, 9, 2}: block 2,
// entry (37 % 16) / 2 = 2.
struct PagedLatentLayer {
  std::byte* latent_base = nullptr;
  std::byte* index_base = nullptr;  // null when index_elems == 0
  size_t block_stride_bytes = 0;
  size_t latent_stride_bytes = 0;
  size_t index_stride_bytes = 0;
};

struct PagedLatentView {
  int block_size = 16;
  int compress_ratio = 1;
  DType latent_dtype = DType::kF32;
  int latent_elems = 0;
  DType index_dtype = DType::kF32;
  int index_elems = 0;                    // 0: no indexer key
  std::vector<PagedLatentLayer> layers;   // one per model layer (unset for other groups)

  std::byte* LatentRow(int layer, int32_t block, int entry) const {
    const PagedLatentLayer& l = layers[layer];
    return l.latent_base + static_cast<size_t>(block) * l.block_stride_bytes +
           static_cast<size_t>(entry) * l.latent_stride_bytes;
  }
  std::byte* IndexRow(int layer, int32_t block, int entry) const {
    const PagedLatentLayer& l = layers[layer];
    return l.index_base + static_cast<size_t>(block) * l.block_stride_bytes +
           static_cast<size_t>(entry) * l.index_stride_bytes;
  }
};

}  // namespace kvserve::tensor
