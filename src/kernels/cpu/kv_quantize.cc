#include "kernels/cpu/kv_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

#if defined(__x86_64__) && !defined(__clang__)
#define KVSERVE_QUANTIZE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVSERVE_QUANTIZE_CLONES
#endif

constexpr float kRoundEven = 8388608.0f;  // 2^23: (v + 2^23) - 2^23 rounds 0 <= v < 2^22 to even

inline uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// ggml's Q8_0 code of v = x * id: roundf (half away from zero) clamped to [-128, 127], NaN 0,
// with a NaN test on the bits and 0/1 integers instead of branches, so that GCC vectorizes
// it. |c| <= 128, so the truncation and c - t are exact. Example: -2.5 -> t -2, -0.5 -> -3.
inline int32_t Q8Code(float v) {
  const uint32_t bits = Bits(v);
  const float n = FromBits((bits & 0x7FFFFFFFu) > 0x7F800000u ? 0u : bits);
  const float c = std::min(std::max(n, -128.0f), 127.0f);
  const int32_t t = static_cast<int32_t>(c);
  const float frac = c - static_cast<float>(t);
  const int32_t up = frac >= 0.5f;
  const int32_t down = frac <= -0.5f;
  return std::min(t + up - down, 127);
}

// max(|x_j|) over the non-NaN x_j (std::max(amax, |x|) from 0: a NaN never wins), by the bits:
// non-negative floats order as their bit patterns.
inline float BlockAmax(const float* x, int n) {
  uint32_t amax = 0;
  for (int j = 0; j < n; ++j) {
    const uint32_t a = Bits(x[j]) & 0x7FFFFFFFu;
    amax = std::max(amax, a > 0x7F800000u ? 0u : a);
  }
  return FromBits(amax);
}

KVSERVE_QUANTIZE_CLONES void Q8_0Row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 34) {
    const float d = BlockAmax(x, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = tensor::F32ToF16(d);
    std::memcpy(y, &dh, 2);
    int8_t q[32];
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Q8Code(x[j] * id));
    std::memcpy(y + 2, q, 32);
  }
}

// True when all n values are finite (no NaN or infinity).
inline bool AllFinite(const float* x, int n) {
  uint32_t special = 0;
  for (int j = 0; j < n; ++j) special |= (Bits(x[j]) & 0x7F800000u) == 0x7F800000u;
  return special == 0;
}

// 2^e as a float for e in [-127, 127] (2^-127 is the subnormal 0x00400000).
inline float PowerOfTwo(int e) {
  return e == -127 ? FromBits(0x00400000u) : FromBits(static_cast<uint32_t>(e + 127) << 23);
}

// tensor::F32ToE4M3 of a finite f. Normal range: the exponent from the bits, the value scaled
// into [8, 16) by replacing its exponent (exact) and rounded to even; below 2^-6 the subnormal
// grid of 2^-9 (a * 512 is exact). Example: 1.0 -> e 0, q 8 -> (7 << 3) + 0 = 0x38.
inline uint8_t ToE4M3(float f) {
  const uint32_t u = Bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const float a = FromBits(u & 0x7FFFFFFFu);
  const int32_t e = static_cast<int32_t>((u >> 23) & 0xFFu) - 127;
  const float scaled = FromBits((u & 0x007FFFFFu) | (130u << 23));  // [8, 16)
  const int32_t q = static_cast<int32_t>((scaled + kRoundEven) - kRoundEven);
  const int32_t normal = ((e + 7) << 3) + (q - 8);
  const int32_t sub = static_cast<int32_t>((a * 512.0f + kRoundEven) - kRoundEven);
  const int32_t code = a >= 448.0f ? 0x7E : a < 0.015625f ? sub : normal;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(code));
}

KVSERVE_QUANTIZE_CLONES void Fp8Row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 33) {
    if (!AllFinite(x, 32)) {
      y[0] = 0xFF;
      std::memset(y + 1, 0, 32);
      continue;
    }
    y[0] = tensor::PowerOfTwoScaleByte(BlockAmax(x, 32), 448.0f);
    const float inv_scale = PowerOfTwo(127 - static_cast<int>(y[0]));  // ldexp(x, -k) exactly
    for (int j = 0; j < 32; ++j) y[1 + j] = ToE4M3(x[j] * inv_scale);
  }
}

// tensor::F32ToE2M1 of a finite f: the number of midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5 that
// |f| passes, a tie counting only at the odd ones (ties go to the even code).
inline uint8_t ToE2M1(float f) {
  const uint32_t sign = (Bits(f) >> 28) & 0x8u;
  const float a = std::fabs(f);
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(sign | code);
}

// Packs n codes of x / s: element 2i in the low nibble of byte i, 2i + 1 in the high one.
inline void PackE2M1(const float* x, float s, int n, uint8_t* out) {
  uint8_t codes[32];
  for (int j = 0; j < n; ++j) codes[j] = ToE2M1(x[j] / s);
  for (int i = 0; i < n / 2; ++i) {
    out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

KVSERVE_QUANTIZE_CLONES void Fp4E4M3Row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 16; ++b, x += 16, y += 9) {
    std::memset(y, 0, 9);
    if (!AllFinite(x, 16)) {
      y[0] = 0x7F;
      continue;
    }
    const float amax = BlockAmax(x, 16);
    if (amax == 0.0f) continue;
    uint8_t scale = tensor::F32ToE4M3(amax / 6.0f);
    if (scale == 0) scale = 1;  // the smallest subnormal rather than flushing the block
    y[0] = scale;
    PackE2M1(x, tensor::E4M3ToF32(scale), 16, y + 1);
  }
}

KVSERVE_QUANTIZE_CLONES void Fp4E8M0Row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 17) {
    if (!AllFinite(x, 32)) {
      y[0] = 0xFF;
      std::memset(y + 1, 0, 16);
      continue;
    }
    y[0] = tensor::PowerOfTwoScaleByte(BlockAmax(x, 32), 6.0f);
    PackE2M1(x, tensor::E8M0ToF32(y[0]), 32, y + 1);
  }
}

}  // namespace

void QuantizeKvRow(tensor::DType t, const float* src, void* dst, int64_t n) {
  DCHECK(tensor::IsValidRowLength(t, n));
  auto* y = static_cast<uint8_t*>(dst);
  switch (t) {
    case tensor::DType::kQ8_0: return Q8_0Row(src, y, n);
    case tensor::DType::kFP8_E4M3_E8M0_32: return Fp8Row(src, y, n);
    case tensor::DType::kFP4_E2M1_E4M3_16: return Fp4E4M3Row(src, y, n);
    case tensor::DType::kFP4_E2M1_E8M0_32: return Fp4E8M0Row(src, y, n);
    default: return tensor::QuantizeRow(t, src, dst, n);
  }
}

}  // namespace kvserve::kernels
