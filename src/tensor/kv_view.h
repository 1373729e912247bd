// PagedKvView: where the attention kernels find K/V, as plain pointers and strides.
//
// The KV manager (kv/) owns the arenas and fills these views; model/ passes them to kernels/.
// Nothing here allocates or does math, so kv/ may include it.
//
// A sequence's token at position p lives in block `block_table[p / block_size]`, slot
// `p % block_size`. Within a layer, the K row of (block b, slot s) starts at
//   k_base + b * block_stride_bytes + s * token_stride_bytes
// and the V row at the same offset from v_base. A row holds all KV heads of one token,
// `row_elems` values (kv_heads * head_dim), stored as one row of `dtype` (tensor/dtype.h):
// quantized formats scale blocks along that row.
//
// Example: block_size 16, token at position 37 with block_table {4, 9, 2}: block 2, slot 5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace kvserve::tensor {

struct PagedKvLayer {
  std::byte* k_base = nullptr;
  std::byte* v_base = nullptr;  // may equal k_base + an offset inside the same page
  size_t block_stride_bytes = 0;
  size_t token_stride_bytes = 0;
};

struct PagedKvView {
  int block_size = 16;
  DType dtype = DType::kF32;
  int row_elems = 0;                  // kv_heads * head_dim
  std::vector<PagedKvLayer> layers;   // one per model layer

  std::byte* KRow(int layer, int32_t block, int slot) const {
    const PagedKvLayer& l = layers[layer];
    return l.k_base + static_cast<size_t>(block) * l.block_stride_bytes +
           static_cast<size_t>(slot) * l.token_stride_bytes;
  }
  std::byte* VRow(int layer, int32_t block, int slot) const {
    const PagedKvLayer& l = layers[layer];
    return l.v_base + static_cast<size_t>(block) * l.block_stride_bytes +
           static_cast<size_t>(slot) * l.token_stride_bytes;
  }
};

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
