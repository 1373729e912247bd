// Test and benchmark support: a fixed KV arena for running a model without the KV manager.
//
// SimpleKvArena owns, for every layer, one K and one V buffer of num_blocks blocks of
// block_size token rows, each row RowBytes(dtype, row_elems) bytes (padded to 4). Never grows.
// views() describes it as the one paged group of a model::KvViews. Not thread-safe; the views
// stay valid while the arena lives.
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
  SimpleKvArena(int num_layers, int row_elems, tensor::DType dtype, int block_size,
                int32_t num_blocks)
      : num_blocks_(num_blocks) {
    CHECK_GT(num_layers, 0);
    CHECK_GT(block_size, 0);
    CHECK_GT(num_blocks, 0);
    CHECK(tensor::IsValidRowLength(dtype, row_elems)) << "row of " << row_elems << " values";
    // Rows are padded to 4 bytes so that F32 rows stay aligned for direct reads.
    const size_t row_bytes = static_cast<size_t>(tensor::RowBytes(dtype, row_elems));
    const size_t token_stride = (row_bytes + 3) / 4 * 4;
    const size_t block_stride = token_stride * block_size;
    const size_t half = block_stride * num_blocks;  // one of K or V of one layer
    storage_.assign(half * 2 * num_layers, std::byte{0});
    tensor::PagedKvView view;
    view.block_size = block_size;
    view.dtype = dtype;
    view.row_elems = row_elems;
    view.layers.resize(num_layers);
    for (int l = 0; l < num_layers; ++l) {
      tensor::PagedKvLayer& layer = view.layers[l];
      layer.k_base = storage_.data() + half * (2 * l);
      layer.v_base = storage_.data() + half * (2 * l + 1);
      layer.block_stride_bytes = block_stride;
      layer.token_stride_bytes = token_stride;
    }
    views_.paged = {view};
    views_.latent.resize(1);
  }

  const tensor::PagedKvView& view() const { return views_.paged[0]; }
  const model::KvViews& views() const { return views_; }
  int32_t num_blocks() const { return num_blocks_; }
  size_t size_bytes() const { return storage_.size(); }

 private:
  int32_t num_blocks_;
  std::vector<std::byte> storage_;  // (layer, {K, V}, block, slot, row bytes)
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
