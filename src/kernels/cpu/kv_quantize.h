// Fast quantization of K/V rows for the KV write path (WriteKv, StoreKvRow).
//
// QuantizeKvRow writes exactly the bytes of tensor::QuantizeRow (same block scales, same
// rounding, NaN / infinity handling included), only faster: the per-element work of Q8_0,
// FP8 E4M3 and FP4 E2M1 is written as branch-free float and bit arithmetic that the compiler
// vectorizes (compiled for AVX-512, AVX2 and baseline x86-64; every step is exact or one
// IEEE operation, so all three give the same bytes). Block scales are computed per block as
// in tensor/quant.cc. tests/kernels/kv_quantize_test.cc checks byte equality for every dtype
// on random, extreme and non-finite rows. Thread safety: stateless.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::kernels {

// Writes RowBytes(t, n) bytes to dst, equal to tensor::QuantizeRow(t, src, dst, n).
// note: n is a multiple of BlockElems(t) (DCHECKed).
void QuantizeKvRow(tensor::DType t, const float* src, void* dst, int64_t n);

}  // namespace kvserve::kernels
