// Scalar reference quantizers. See tensor/dtype.h for the byte layouts.
//
// Block scales of the kvserve KV formats (decoding is always x = scale * element):
//   FP8_E4M3_E8M0_32 and FP4_E2M1_E8M0_32 (MX-style): the scale is the smallest power of two
//     s = 2^k (k in [-127, 127]) with amax / s <= kMax, where amax is the block's largest |x|
//     and kMax the format's largest element (448 for E4M3, 6 for E2M1). The scale byte is
//     k + 127. An all-zero block gets s = 1 (byte 127). Elements are x / s (exact: a power of
//     two) rounded to nearest even by F32ToE4M3 / F32ToE2M1.
//     Example: amax = 10 in FP4: 10/2 = 5 <= 6 but 10/1 = 10 > 6, so s = 2 (byte 128); x = 3.1
//     becomes 1.55 -> E2M1 1.5, decoded 3.0.
//   FP4_E2M1_E4M3_16 (NVFP4-like): s = E4M3(amax / 6) rounded to nearest even. Rounding down
//     can leave amax / s slightly above 6; such elements saturate to 6. When amax / 6 is below
//     the smallest E4M3 subnormal (rounds to 0) but amax > 0, s is that subnormal (2^-9) so
//     small blocks are not flushed to zero; amax / 6 above 448 saturates s to 448. An all-zero
//     block stores scale 0 and zero elements.
//   A block holding a NaN or an infinity gets a NaN scale (E8M0 0xFF, E4M3 0x7F): the whole
//     block decodes to NaN rather than to silently wrong numbers.
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "core/check.h"
#include "tensor/quant_internal.h"

namespace kvserve::tensor {
namespace {

constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;
constexpr uint8_t kE8M0Nan = 0xFF;
constexpr uint8_t kE4M3Nan = 0x7F;

uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float FromBits(uint32_t u) {
  return std::bit_cast<float>(u);
}

// Largest |x| of a block, or nullopt when the block holds a NaN or an infinity.
std::optional<float> BlockAmax(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) return std::nullopt;
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
}

// The E8M0 byte of the smallest power of two s with amax / s <= max_elem (see file comment).
uint8_t PowerOfTwoScale(float amax, float max_elem) {
  if (amax == 0.0f) return 127;
  int exp = 0;
  std::frexp(amax / max_elem, &exp);  // amax/max_elem in [2^(exp-1), 2^exp)
  int k = std::clamp(exp, -127, 127);
  // Division may have rounded; settle k exactly with exact power-of-two scalings.
  while (k < 127 && std::ldexp(amax, -k) > max_elem) ++k;
  while (k > -127 && std::ldexp(amax, -(k - 1)) <= max_elem) --k;
  return static_cast<uint8_t>(k + 127);
}

// ---- Q8_0 / Q4_0: ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref ----

// roundf(v) as int8, as ggml stores it (|v| is at most 127 plus rounding for finite input).
// NaN maps to 0 and the clamp keeps the cast defined; neither changes a finite-input result.
uint8_t Q8Code(float v) {
  if (std::isnan(v)) return 0;
  const float r = std::clamp(std::round(v), -128.0f, 127.0f);
  return static_cast<uint8_t>(static_cast<int8_t>(r));
}

void QuantizeQ8_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16(d);
    std::memcpy(y, &dh, 2);
    for (int j = 0; j < 32; ++j) y[2 + j] = Q8Code(x[j] * id);
  }
}

void DequantizeQ8_0(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 34) {
    uint16_t dh;
    std::memcpy(&dh, y, 2);
    const float d = F16ToF32(dh);
    for (int j = 0; j < 32; ++j) x[j] = d * static_cast<float>(static_cast<int8_t>(y[2 + j]));
  }
}

// (int8_t)(v * id + 8.5f) capped at 15, as ggml does; for finite inputs t is in [0, 16.5]
// so truncation equals ggml's cast. NaN maps to 0 instead of undefined behaviour.
uint8_t Q4Nibble(float v, float id) {
  const float t = v * id + 8.5f;
  if (t >= 15.0f) return 15;
  if (t > 0.0f) return static_cast<uint8_t>(static_cast<int>(t));
  return 0;
}

void QuantizeQ4_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 18) {
    float amax = 0.0f;
    float max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16(d);
    std::memcpy(y, &dh, 2);
    for (int j = 0; j < 16; ++j) {
      y[2 + j] = static_cast<uint8_t>(Q4Nibble(x[j], id) | (Q4Nibble(x[16 + j], id) << 4));
    }
  }
}

void DequantizeQ4_0(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 18) {
    uint16_t dh;
    std::memcpy(&dh, y, 2);
    const float d = F16ToF32(dh);
    for (int j = 0; j < 16; ++j) {
      x[j] = d * static_cast<float>((y[2 + j] & 0x0F) - 8);
      x[16 + j] = d * static_cast<float>((y[2 + j] >> 4) - 8);
    }
  }
}

// ---- kvserve KV formats ----

void QuantizeFp8E8M0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 33) {
    const std::optional<float> amax = BlockAmax(x, 32);
    y[0] = amax ? PowerOfTwoScale(*amax, kE4M3Max) : kE8M0Nan;
    const int k = static_cast<int>(y[0]) - 127;
    for (int j = 0; j < 32; ++j) y[1 + j] = amax ? F32ToE4M3(std::ldexp(x[j], -k)) : 0;
  }
}

void DequantizeFp8E8M0(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 33) {
    const float s = E8M0ToF32(y[0]);
    for (int j = 0; j < 32; ++j) x[j] = s * E4M3ToF32(y[1 + j]);
  }
}

// Packs `elems` FP4 codes of x / s (s != 0): element 2i in the low nibble of byte i, 2i+1
// in the high nibble.
void PackFp4(const float* x, float s, int64_t elems, uint8_t* out) {
  for (int64_t i = 0; i < elems / 2; ++i) {
    const uint8_t lo = F32ToE2M1(x[2 * i] / s);
    const uint8_t hi = F32ToE2M1(x[2 * i + 1] / s);
    out[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void UnpackFp4(const uint8_t* in, float s, int64_t elems, float* x) {
  for (int64_t i = 0; i < elems / 2; ++i) {
    x[2 * i] = s * E2M1ToF32(in[i] & 0x0F);
    x[2 * i + 1] = s * E2M1ToF32(in[i] >> 4);
  }
}

void QuantizeFp4E8M0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 17) {
    const std::optional<float> amax = BlockAmax(x, 32);
    if (!amax) {
      y[0] = kE8M0Nan;
      std::memset(y + 1, 0, 16);
      continue;
    }
    y[0] = PowerOfTwoScale(*amax, kE2M1Max);
    PackFp4(x, E8M0ToF32(y[0]), 32, y + 1);
  }
}

void DequantizeFp4E8M0(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 17) UnpackFp4(y + 1, E8M0ToF32(y[0]), 32, x);
}

void QuantizeFp4E4M3(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 16; ++b, x += 16, y += 9) {
    const std::optional<float> amax = BlockAmax(x, 16);
    std::memset(y, 0, 9);
    if (!amax) {
      y[0] = kE4M3Nan;
      continue;
    }
    if (*amax == 0.0f) continue;
    uint8_t scale = F32ToE4M3(*amax / kE2M1Max);
    if (scale == 0) scale = 1;  // smallest subnormal 2^-9 rather than flushing the block
    y[0] = scale;
    PackFp4(x, E4M3ToF32(scale), 16, y + 1);
  }
}

void DequantizeFp4E4M3(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 16; ++b, x += 16, y += 9) UnpackFp4(y + 1, E4M3ToF32(y[0]), 16, x);
}

}  // namespace

// ---- scalar conversions ----

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7F800000u | (mant << 13));  // inf / NaN (payload kept)
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
  }
  if (abs >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds to infinity
  if (abs < 0x38800000) {
    // Below 2^-14: half subnormal. Adding 0.5f puts the value's 2^-24 units in the low
    // mantissa bits of the sum, rounded to nearest even by the FPU.
    const float sum = FromBits(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (Bits(sum) - Bits(0.5f)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  const uint32_t mant_odd = (abs >> 13) & 1;
  abs += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFF + mant_odd;
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float BF16ToF32(uint16_t b) {
  return FromBits(static_cast<uint32_t>(b) << 16);
}

uint16_t F32ToBF16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x0040);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

float E4M3ToF32(uint8_t v) {
  const bool neg = (v & 0x80) != 0;
  const int exp = (v >> 3) & 0xF;
  const int mant = v & 0x7;
  float r;
  if (exp == 0xF && mant == 0x7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant * 2^-9
  } else {
    r = std::ldexp(static_cast<float>(8 + mant), exp - 10);  // (1 + mant/8) * 2^(exp-7)
  }
  return neg ? -r : r;
}

uint8_t F32ToE4M3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | kE4M3Nan;
  const float a = std::fabs(f);
  if (a >= kE4M3Max) return sign | 0x7E;  // saturate (also +-inf)
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of 2^-9; code == multiple of 2^-9 (<= 8)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9))));
  }
  int e2 = 0;
  std::frexp(a, &e2);    // a in [2^(e2-1), 2^e2)
  const int e = e2 - 1;  // unbiased exponent, -6..8
  // q in [8, 16]: 8 + mantissa; q == 16 carries into the next exponent, which the code
  // arithmetic below handles (exp field + 1, mantissa 0). a < 448 keeps q <= 14 at e = 8.
  const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - e)));
  return static_cast<uint8_t>(sign | (((e + 7) << 3) + (q - 8)));
}

float E2M1ToF32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 0x7];
  return (nibble & 0x8) ? -v : v;
}

uint8_t F32ToE2M1(float f) {
  if (std::isnan(f)) return 0;  // E2M1 has no NaN
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fabs(f);
  // kMidpoints[c] lies between codes c and c + 1; a tie goes to the even code (0, 2, 4, 6).
  static constexpr float kMidpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code = 0;
  while (code < 7 && (a > kMidpoints[code] || (a == kMidpoints[code] && code % 2 == 1))) {
    ++code;
  }
  return sign | code;
}

uint8_t PowerOfTwoScaleByte(float amax, float max_elem) { return PowerOfTwoScale(amax, max_elem); }

float E8M0ToF32(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

// ---- rows ----

namespace {

// F32ToF16 of n values; the KV cache writes every new K/V row through it. On x86 with F16C
// the hardware conversion does 8 at a time: round to nearest even like F32ToF16, overflow to
// inf at 65520, and NaN quieted with the top payload bits kept (0x7E00 | mantissa >> 13), the
// same bits (tests/tensor/quant_test.cc sweeps the bit patterns).
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void F16RowF16C(const float* src, uint8_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}
#endif

void F16RowFromF32(const float* src, uint8_t* dst, int64_t n) {
#if defined(__x86_64__)
  static const bool f16c = __builtin_cpu_supports("f16c");
  if (f16c) return F16RowF16C(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  CHECK(IsValidRowLength(t, n)) << "QuantizeRow: " << n << " values for " << DTypeName(t);
  auto* y = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::kF32: std::memcpy(y, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: return F16RowFromF32(src, y, n);
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBF16(src[i]);
        std::memcpy(y + 2 * i, &h, 2);
      }
      return;
    case DType::kQ8_0: return QuantizeQ8_0(src, y, n);
    case DType::kQ4_0: return QuantizeQ4_0(src, y, n);
    case DType::kFP8_E4M3_E8M0_32: return QuantizeFp8E8M0(src, y, n);
    case DType::kFP4_E2M1_E4M3_16: return QuantizeFp4E4M3(src, y, n);
    case DType::kFP4_E2M1_E8M0_32: return QuantizeFp4E8M0(src, y, n);
    case DType::kQ4_1: return internal::QuantizeQ4_1(src, y, n);
    case DType::kQ5_0: return internal::QuantizeQ5_0(src, y, n);
    case DType::kQ5_1: return internal::QuantizeQ5_1(src, y, n);
    case DType::kQ2_K: return internal::QuantizeQ2K(src, y, n);
    case DType::kQ3_K: return internal::QuantizeQ3K(src, y, n);
    case DType::kQ4_K: return internal::QuantizeQ4K(src, y, n);
    case DType::kQ5_K: return internal::QuantizeQ5K(src, y, n);
    case DType::kQ6_K: return internal::QuantizeQ6K(src, y, n);
    case DType::kIQ4_NL: return internal::QuantizeIq4Nl(src, y, n);
    case DType::kIQ4_XS: return internal::QuantizeIq4Xs(src, y, n);
    case DType::kMXFP4: return internal::QuantizeMxfp4(src, y, n);
  }
  CHECK(false) << "unknown DType";
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  CHECK(IsValidRowLength(t, n)) << "DequantizeRow: " << n << " values for " << DTypeName(t);
  const auto* y = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: std::memcpy(dst, y, static_cast<size_t>(n) * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, y + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, y + 2 * i, 2);
        dst[i] = BF16ToF32(h);
      }
      return;
    case DType::kQ8_0: return DequantizeQ8_0(y, dst, n);
    case DType::kQ4_0: return DequantizeQ4_0(y, dst, n);
    case DType::kFP8_E4M3_E8M0_32: return DequantizeFp8E8M0(y, dst, n);
    case DType::kFP4_E2M1_E4M3_16: return DequantizeFp4E4M3(y, dst, n);
    case DType::kFP4_E2M1_E8M0_32: return DequantizeFp4E8M0(y, dst, n);
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kMXFP4: return internal::DequantizeInts(t, y, dst, n);
  }
  CHECK(false) << "unknown DType";
}

}  // namespace kvserve::tensor
