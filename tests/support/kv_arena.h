// Test and benchmark support: a fixed KV arena for running a model without the KV manager.
//
// SimpleKvArena owns, for every layer, one K and one V buffer of num_blocks blocks of
// block_size token rows of num_kv_heads x head_dim values, laid out head-major like the KV
// manager's arenas (tensor/kv_view.h). Never grows. views() describes it as the paged groups of
// a model::KvViews: `num_groups` views of the same storage (each model layer is in one group, so
// they never collide). Not thread-safe; the views stay valid while the arena lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "tensor/kv_view.h"

namespace kvserve::testing {

class SimpleKvArena {
 public:
  SimpleKvArena(int num_layers, int num_kv_heads, int head_dim, tensor::DType dtype,
                int block_size, int32_t num_blocks, int num_groups = 1)
      : num_blocks_(num_blocks) {
    CHECK_GT(num_layers, 0);
    CHECK_GT(block_size, 0);
    CHECK_GT(num_blocks, 0);
    const int row_elems = num_kv_heads * head_dim;
    CHECK(tensor::IsValidRowLength(dtype, row_elems)) << "row of " << row_elems << " values";
    tensor::PagedKvView view =
        tensor::MakePagedKvView(num_layers, num_kv_heads, head_dim, dtype, block_size);
    const size_t block_stride =
        static_cast<size_t>(tensor::RowBytes(dtype, row_elems)) * block_size;
    const size_t half = block_stride * num_blocks;  // one of K or V of one layer
    storage_.assign(half * 2 * num_layers, std::byte{0});
    for (int l = 0; l < num_layers; ++l) {
      tensor::PagedKvLayer& layer = view.layers[l];
      layer.k_base = storage_.data() + half * (2 * l);
      layer.v_base = storage_.data() + half * (2 * l + 1);
      layer.block_stride_bytes = block_stride;
    }
    views_.paged.assign(num_groups, view);
    views_.latent.resize(num_groups);
  }

  const tensor::PagedKvView& view() const { return views_.paged[0]; }
  const model::KvViews& views() const { return views_; }
  int32_t num_blocks() const { return num_blocks_; }
  size_t size_bytes() const { return storage_.size(); }

 private:
  int32_t num_blocks_;
  std::vector<std::byte> storage_;  // (layer, {K, V}, block, segment, slot, segment bytes)
  model::KvViews views_;
};

// Blocks [first_block, first_block + num_blocks) in order: a block table for a sequence that
// owns that contiguous range.
inline std::vector<int32_t> ContiguousBlockTable(int32_t first_block, int32_t num_blocks) {
  std::vector<int32_t> table(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) table[i] = first_block + i;
  return table;
}

// Blocks needed for `num_tokens` tokens: ceil(num_tokens / block_size).
inline int32_t BlocksForTokens(int64_t num_tokens, int block_size) {
  return static_cast<int32_t>((num_tokens + block_size - 1) / block_size);
}

}  // namespace kvserve::testing
