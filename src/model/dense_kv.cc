#include "model/dense_kv.h"

#include "core/check.h"

namespace kvserve::model {

SimpleKvArena::SimpleKvArena(int num_layers, int row_elems, tensor::DType dtype, int block_size,
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
  view_.block_size = block_size;
  view_.dtype = dtype;
  view_.row_elems = row_elems;
  view_.layers.resize(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    tensor::PagedKvLayer& layer = view_.layers[l];
    layer.k_base = storage_.data() + half * (2 * l);
    layer.v_base = storage_.data() + half * (2 * l + 1);
    layer.block_stride_bytes = block_stride;
    layer.token_stride_bytes = token_stride;
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
