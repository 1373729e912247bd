// Conversion between f32 and every DType (tensor/dtype.h), one row at a time.
// Scalar reference code: exact, portable, used by writers, tests and KV stores. Hot loops that
// need speed live in kernels/.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::tensor {

// Writes RowBytes(t, n) bytes to dst. note: n is a multiple of BlockElems(t).
// The GGUF block formats follow ggml's reference quantizers operation by operation
// (quantize_row_*_ref; for IQ4_NL / IQ4_XS the quantize_iq4_* path llama.cpp's quantize takes
// without an imatrix), so files hold the bytes llama.cpp's quantize would write for the same
// f32 weights. FP8/FP4 round to nearest even after scaling by the block scale documented in
// quant.cc. Cost: the K formats search scales per sub-block (~20 trials of 16-32 values).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);

// Reads RowBytes(t, n) bytes from src and writes n floats to dst. For the GGUF block formats
// the values are bit-identical to ggml's dequantize_row_* (tensor/quant_ints.h).
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

// Scalar conversions, exposed for kernels and tests.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);    // round to nearest even
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);   // round to nearest even
float E4M3ToF32(uint8_t v);    // FP8 E4M3 (OCP: bias 7, max 448, no infinities, S.1111.111 = NaN)
uint8_t F32ToE4M3(float f);    // round to nearest even, saturating at +-448
float E2M1ToF32(uint8_t nibble);  // FP4 E2M1: values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives
uint8_t F32ToE2M1(float f);       // round to nearest even, saturating at +-6
float E8M0ToF32(uint8_t e);       // 2^(e - 127); 255 = NaN
// The E8M0 scale byte of an MX-style block (quant.cc): the smallest power of two s = 2^k with
// amax / s <= max_elem (448 for E4M3 elements, 6 for E2M1); 127 for an all-zero block.
uint8_t PowerOfTwoScaleByte(float amax, float max_elem);

}  // namespace kvserve::tensor
