// Fast dequantization of KV rows for the attention kernels.
//
// DequantizeKvRow computes exactly tensor::DequantizeRow (every conversion is exact or the same
// single f32 multiply), so attention reads K/V "as stored" with the same bits, only faster:
// branch-free F16 widening the compiler vectorizes, a 256-entry table for FP8 E4M3, and no
// per-call validation. tests/kernels/kv_dequant_test.cc checks bit equality for every dtype.
// Thread safety: stateless (the FP8 table is built once, thread-safely, on first use).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/kv_view.h"

namespace kvserve::kernels {

// Reads RowBytes(t, n) bytes from src and writes n floats to dst, bit-identical to
// tensor::DequantizeRow(t, src, dst, n). note: n is a multiple of BlockElems(t) (DCHECKed).
void DequantizeKvRow(tensor::DType t, const void* src, float* dst, int64_t n);

// Values [first, first + count) of each stored row rows[i] (i < n) into dst + i * dst_stride,
// bit-identical to those values of DequantizeKvRow over the whole row. Quantized blocks may
// straddle the slice: whole blocks are dequantized into `staging` (count + 2 * 32 floats) and
// the slice copied. Example: head_dim 8, Q8_0 (32 values in 34 B), first 40: block 1 (values
// 32..63) is dequantized from byte 34, and the slice is staging[8..16).
void DequantizeKvSlices(tensor::DType t, const std::byte* const* rows, int n, int64_t first,
                        int64_t count, float* dst, int64_t dst_stride, float* staging);

enum class KvPart { kKey, kValue };

// Quantizes one token's K or V row (kv.row_elems floats) into (block, slot) of `layer`,
// segment by segment: the stored values are those of tensor::QuantizeRow over the whole row,
// laid out head-major (tensor/kv_view.h).
void StoreKvRow(const tensor::PagedKvView& kv, int layer, KvPart part, int32_t block, int slot,
                const float* row);
// Reads one token's K or V row back: row_elems floats, bit-identical to
// tensor::DequantizeRow of the row StoreKvRow was given, quantized.
void LoadKvRow(const tensor::PagedKvView& kv, int layer, KvPart part, int32_t block, int slot,
               float* row);

}  // namespace kvserve::kernels
