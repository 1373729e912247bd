// The numerics contract of kernels/cpu/attention.h as plain scalar code, one query at a time:
// the reference the SIMD kernel must match bit for bit. K/V are read with the scalar reference
// converter (tensor::DequantizeRow), segment by segment.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"

namespace kvserve::kernels::testing {

// Attention output (head_dim floats) of query head `head` of the token at `pos`, whose query
// vector is q (head_dim floats), over the keys its window sees in `layer` of `kv`, read
// through `block_table`.
std::vector<float> ReferenceAttention(const AttentionShape& shape, const tensor::PagedKvView& kv,
                                      int layer, std::span<const int32_t> block_table,
                                      int32_t pos, int head, const float* q);

}  // namespace kvserve::kernels::testing
