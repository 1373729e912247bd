// SimpleKvArena: a fixed KV cache for tests, benchmarks and the CLI until the KV manager (kv/)
// hands out views of its own arenas.
//
// Owns, for every layer, one K and one V buffer of num_blocks blocks of block_size token rows
// of num_kv_heads x head_dim values, laid out head-major like the KV manager's arenas
// (tensor/kv_view.h). Never grows. view() describes it as a tensor::PagedKvView. Not
// thread-safe; the view stays valid while the arena lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/kv_view.h"

namespace kvserve::model {

class SimpleKvArena {
 public:
  SimpleKvArena(int num_layers, int num_kv_heads, int head_dim, tensor::DType dtype,
                int block_size, int32_t num_blocks);

  const tensor::PagedKvView& view() const { return view_; }
  int32_t num_blocks() const { return num_blocks_; }
  size_t size_bytes() const { return storage_.size(); }

 private:
  int32_t num_blocks_;
  std::vector<std::byte> storage_;  // (layer, {K, V}, block, segment, slot, segment bytes)
  tensor::PagedKvView view_;
};

// Blocks [first_block, first_block + num_blocks) in order: a block table for a sequence that
// owns that contiguous range.
std::vector<int32_t> ContiguousBlockTable(int32_t first_block, int32_t num_blocks);

// Blocks needed for `num_tokens` tokens: ceil(num_tokens / block_size).
int32_t BlocksForTokens(int64_t num_tokens, int block_size);

}  // namespace kvserve::model
