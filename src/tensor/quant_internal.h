// Helpers and per-format entry points shared by the quantizers of tensor/ (quant.cc,
// quant_legacy.cc, quant_k.cc, quant_iq4.cc, quant_mxfp4.cc, quant_ints.cc). Internal to the
// tensor module.
//
// The quantizers port ggml's reference algorithms operation by operation (the same f32
// expressions in the same order; the module builds with -ffp-contract=off), so a file written
// here holds the bytes llama.cpp's quantize writes for the same f32 input without an imatrix.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace kvserve::tensor::internal {

inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

inline void StoreF16(uint8_t* p, float f) {
  const uint16_t h = F32ToF16(f);
  std::memcpy(p, &h, 2);
}

// ggml's nearest_int: round half to even for |v| <= 2^22 via the 1.5 * 2^23 trick. Outside
// that range (and for NaN) the result is the same arbitrary but defined integer ggml computes.
inline int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  const int32_t bits = std::bit_cast<int32_t>(shifted);
  return (bits & 0x007FFFFF) - 0x00400000;
}

// C's (int)v (truncation toward zero) where it is defined; 0 for NaN and a clamp to +-2^30
// outside int range, where C leaves the cast undefined and no finite-input path goes.
inline int TruncToInt(float v) {
  if (!(v == v)) return 0;
  if (v >= 1073741824.0f) return 1 << 30;
  if (v <= -1073741824.0f) return -(1 << 30);
  return static_cast<int>(v);
}

// The 32-value formats (quant_legacy.cc): x (n values) -> y (RowBytes bytes).
void QuantizeQ4_1(const float* x, uint8_t* y, int64_t n);
void QuantizeQ5_0(const float* x, uint8_t* y, int64_t n);
void QuantizeQ5_1(const float* x, uint8_t* y, int64_t n);

// The K formats (quant_k.cc).
void QuantizeQ2K(const float* x, uint8_t* y, int64_t n);
void QuantizeQ3K(const float* x, uint8_t* y, int64_t n);
void QuantizeQ4K(const float* x, uint8_t* y, int64_t n);
void QuantizeQ5K(const float* x, uint8_t* y, int64_t n);
void QuantizeQ6K(const float* x, uint8_t* y, int64_t n);

// The non-linear formats (quant_iq4.cc).
void QuantizeIq4Nl(const float* x, uint8_t* y, int64_t n);
void QuantizeIq4Xs(const float* x, uint8_t* y, int64_t n);

// MXFP4 (quant_mxfp4.cc).
void QuantizeMxfp4(const float* x, uint8_t* y, int64_t n);

// Dequantizes any IsIntegerQuant type other than Q8_0 / Q4_0 through its integer form
// (quant_ints.h).
void DequantizeInts(DType t, const uint8_t* y, float* x, int64_t n);

}  // namespace kvserve::tensor::internal
