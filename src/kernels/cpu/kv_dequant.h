// Fast dequantization of KV rows for the attention kernels.
//
// DequantizeKvRow computes exactly tensor::DequantizeRow (every conversion is exact or the same
// single f32 multiply), so attention reads K/V "as stored" with the same bits, only faster:
// branch-free F16 widening the compiler vectorizes, a 256-entry table for FP8 E4M3, and no
// per-call validation. tests/kernels/kv_dequant_test.cc checks bit equality for every dtype.
// Thread safety: stateless (the FP8 table is built once, thread-safely, on first use).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::kernels {

// Reads RowBytes(t, n) bytes from src and writes n floats to dst, bit-identical to
// tensor::DequantizeRow(t, src, dst, n). note: n is a multiple of BlockElems(t) (DCHECKed).
void DequantizeKvRow(tensor::DType t, const void* src, float* dst, int64_t n);

}  // namespace kvserve::kernels
