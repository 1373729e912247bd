// The numerics contract of kernels/cpu/attention.h as plain scalar code, one query at a time:
// the reference the SIMD kernel must match bit for bit. K/V are read with the scalar reference
// converter (tensor::DequantizeRow), segment by segment.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/attention.h"

namespace kvserve::kernels::testing {

// Attention output (head_dim floats) of query head `head` of the token at `pos`, whose query
// vector is q (head_dim floats), over the keys its window sees in `layer` of `kv`, read
// through `block_table`.
std::vector<float> ReferenceAttention(const AttentionShape& shape, const tensor::PagedKvView& kv,
                                      int layer, std::span<const int32_t> block_table,
                                      int32_t pos, int head, const float* q);

// n floats uniform in [-1, 1).
std::vector<float> RandomFloats(std::mt19937& rng, size_t n);

inline bool SameBits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Sequences of a test batch: their block tables, and the AttentionSequences over them.
struct ScatteredBatch {
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSequence> seqs;  // rows back to back from 0
  int64_t rows = 0;
};

// One sequence per (start, count) of `spec`, its blocks drawn from a shuffle of all the
// blocks the batch needs (block_size positions each), so tables are out of order. For every
// position p < start, fill(table, p) writes the cached row the kernel will read there.
ScatteredBatch MakeScatteredBatch(
    std::mt19937& rng, int block_size, std::span<const std::pair<int32_t, int32_t>> spec,
    const std::function<void(std::span<const int32_t> table, int32_t pos)>& fill);

}  // namespace kvserve::kernels::testing
