#include "model/dense_kv.h"

#include "core/check.h"

namespace kvserve::model {

SimpleKvArena::SimpleKvArena(int num_layers, int num_kv_heads, int head_dim, tensor::DType dtype,
                             int block_size, int32_t num_blocks)
    : num_blocks_(num_blocks) {
  CHECK_GT(num_layers, 0);
  CHECK_GT(block_size, 0);
  CHECK_GT(num_blocks, 0);
  const int row_elems = num_kv_heads * head_dim;
  CHECK(tensor::IsValidRowLength(dtype, row_elems)) << "row of " << row_elems << " values";
  view_ = tensor::MakePagedKvView(num_layers, num_kv_heads, head_dim, dtype, block_size);
  const size_t block_stride = static_cast<size_t>(tensor::RowBytes(dtype, row_elems)) * block_size;
  const size_t half = block_stride * num_blocks;  // one of K or V of one layer
  storage_.assign(half * 2 * num_layers, std::byte{0});
  for (int l = 0; l < num_layers; ++l) {
    tensor::PagedKvLayer& layer = view_.layers[l];
    layer.k_base = storage_.data() + half * (2 * l);
    layer.v_base = storage_.data() + half * (2 * l + 1);
    layer.block_stride_bytes = block_stride;
  }
}

std::vector<int32_t> ContiguousBlockTable(int32_t first_block, int32_t num_blocks) {
  std::vector<int32_t> table(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) table[i] = first_block + i;
  return table;
}

int32_t BlocksForTokens(int64_t num_tokens, int block_size) {
  return static_cast<int32_t>((num_tokens + block_size - 1) / block_size);
}

}  // namespace kvserve::model
