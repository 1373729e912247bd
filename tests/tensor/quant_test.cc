#include "tensor/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kvserve::tensor {
namespace {

std::vector<uint8_t> Quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(RowBytes(t, static_cast<int64_t>(x.size())), 0xAA);
  QuantizeRow(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> Dequantize(DType t, const std::vector<uint8_t>& y, int64_t n) {
  std::vector<float> out(n);
  DequantizeRow(t, y.data(), out.data(), n);
  return out;
}

// Expected bytes: `head` followed by `fill` up to `size` bytes.
std::vector<uint8_t> Bytes(std::vector<uint8_t> head, size_t size, uint8_t fill) {
  head.resize(size, fill);
  return head;
}

// ---- scalar conversions ----

// The vectorised F16 row (QuantizeRow) equals F32ToF16 value by value: a sweep of bit patterns
// (both signs, every exponent) plus each boundary of the conversion and its neighbours.
TEST(Scalar, F16RowEqualsScalarConversion) {
  std::vector<uint32_t> bits;
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 4099) bits.push_back(static_cast<uint32_t>(x));
  for (uint32_t edge :
       {0x00000000u, 0x00000001u, 0x33000000u, 0x33800000u, 0x387FE000u, 0x38800000u, 0x477FEFFFu,
        0x477FF000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu}) {
    for (uint32_t d : {0u, 1u, 0x1000u, 0x0FFFu}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        bits.push_back((edge + d) | sign);
        bits.push_back((edge - d) | sign);
      }
    }
  }
  std::vector<float> x;
  for (uint32_t b : bits) x.push_back(std::bit_cast<float>(b));
  const std::vector<uint8_t> row = Quantize(DType::kF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t got = static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8));
    ASSERT_EQ(got, F32ToF16(x[i])) << std::hex << "bits 0x" << bits[i];
  }
}

TEST(Scalar, F16HandPicked) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);             // tie with the next (odd) step: rounds to inf
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3C00);      // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * 0x1p-11f), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(F32ToF16(0x1.8p-25f), 0x0001);
  EXPECT_EQ(F32ToF16(3 * 0x1p-25f), 0x0002);  // 1.5 units -> 2
  EXPECT_EQ(F32ToF16(0x1p-14f), 0x0400);      // smallest normal
  EXPECT_EQ(F32ToF16(0x1.ff8p-15f), 0x03FF);  // largest subnormal
  EXPECT_EQ(F32ToF16(0x1.ffcp-15f), 0x0400);  // tie rounds up into the normals
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = F32ToF16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(F16ToF32(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0xFC00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
}

TEST(Scalar, F16ExhaustiveDecodeEncodeIdentity) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << h;
    } else {
      ASSERT_EQ(F32ToF16(f), h) << "code " << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// Differential check against the compiler's correctly rounded float -> _Float16.
TEST(Scalar, F16MatchesCompilerConversion) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    if (i % 2) u = (u & 0x83FFFFFF) | (static_cast<uint32_t>(100 + i % 50) << 23);  // near range
    const float f = std::bit_cast<float>(u);
    if (std::isnan(f)) continue;
    const auto ref = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(F32ToF16(f), ref) << "f = " << f;
  }
}
#endif

TEST(Scalar, BF16) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(1.0f + 0x1p-8f), 0x3F80);      // tie -> even
  EXPECT_EQ(F32ToBF16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(F32ToBF16(1.0f + 0x1.2p-8f), 0x3F81);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must stay NaN.
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::bit_cast<float>(0x7F800001u)))));
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0) continue;  // NaN
    ASSERT_EQ(F32ToBF16(BF16ToF32(static_cast<uint16_t>(b))), b);
  }
}

TEST(Scalar, E4M3) {
  EXPECT_EQ(F32ToE4M3(1.0f), 0x38);
  EXPECT_EQ(F32ToE4M3(448.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3(1000.0f), 0x7E);  // saturates
  EXPECT_EQ(F32ToE4M3(-448.0f), 0xFE);
  EXPECT_EQ(F32ToE4M3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(F32ToE4M3(240.0f), 0x77);
  EXPECT_EQ(F32ToE4M3(1.0625f), 0x38);   // tie -> even
  EXPECT_EQ(F32ToE4M3(1.1875f), 0x3A);   // tie -> even (up)
  EXPECT_EQ(F32ToE4M3(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(F32ToE4M3(0x1p-10f), 0x00);  // tie -> zero
  EXPECT_EQ(F32ToE4M3(0x1.8p-10f), 0x01);
  EXPECT_EQ(F32ToE4M3(0x1.fp-7f), 0x08);  // subnormal rounding up to 2^-6
  EXPECT_EQ(F32ToE4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToE4M3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_EQ(E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToF32(0x01), 0x1p-9f);
  EXPECT_EQ(E4M3ToF32(0x08), 0x1p-6f);
  EXPECT_TRUE(std::isnan(E4M3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(E4M3ToF32(0xFF)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    ASSERT_EQ(F32ToE4M3(E4M3ToF32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Scalar, E4M3RoundsToNearestAgainstBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(mag(rng));
    const float got = E4M3ToF32(F32ToE4M3(x));
    float best_err = std::numeric_limits<float>::infinity();
    for (int c = 0; c < 0x7F; ++c) best_err = std::min(best_err, std::fabs(E4M3ToF32(c) - x));
    ASSERT_EQ(std::fabs(got - x), best_err) << x;
  }
}

TEST(Scalar, E2M1) {
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    const float v = E2M1ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(v, (c & 8) ? -values[c & 7] : values[c & 7]);
    EXPECT_EQ(F32ToE2M1(v), c) << "code " << c;
  }
  EXPECT_EQ(F32ToE2M1(0.25f), 0);  // ties go to the even code
  EXPECT_EQ(F32ToE2M1(0.75f), 2);
  EXPECT_EQ(F32ToE2M1(1.25f), 2);
  EXPECT_EQ(F32ToE2M1(1.75f), 4);
  EXPECT_EQ(F32ToE2M1(2.5f), 4);
  EXPECT_EQ(F32ToE2M1(3.5f), 6);
  EXPECT_EQ(F32ToE2M1(5.0f), 6);
  EXPECT_EQ(F32ToE2M1(5.01f), 7);
  EXPECT_EQ(F32ToE2M1(100.0f), 7);  // saturates
  EXPECT_EQ(F32ToE2M1(-100.0f), 15);
  EXPECT_EQ(F32ToE2M1(-0.26f), 9);
}

TEST(Scalar, E8M0) {
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
  EXPECT_EQ(E8M0ToF32(130), 8.0f);
  EXPECT_EQ(E8M0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8M0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
}

// ---- hand-computed blocks ----

TEST(Blocks, F32F16BF16) {
  const std::vector<float> x = {1.0f, -2.0f};
  EXPECT_EQ(Quantize(DType::kF32, x), (std::vector<uint8_t>{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0}));
  EXPECT_EQ(Quantize(DType::kF16, x), (std::vector<uint8_t>{0x00, 0x3C, 0x00, 0xC0}));
  EXPECT_EQ(Quantize(DType::kBF16, x), (std::vector<uint8_t>{0x80, 0x3F, 0x00, 0xC0}));
  EXPECT_EQ(Dequantize(DType::kF16, {0x00, 0x3C, 0x00, 0xC0}, 2), x);
  EXPECT_EQ(Dequantize(DType::kBF16, {0x80, 0x3F, 0x00, 0xC0}, 2), x);
}

TEST(Blocks, Q8_0) {
  // amax 127 -> d = 1 (f16 0x3C00); q = roundf(x): halves round away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = 127;
  x[1] = -127;
  x[2] = 0.5f;
  x[3] = -0.5f;
  x[4] = 1.49f;
  x[5] = 2.5f;
  EXPECT_EQ(Quantize(DType::kQ8_0, x),
            Bytes({0x00, 0x3C, 0x7F, 0x81, 0x01, 0xFF, 0x01, 0x03}, 34, 0));
  const std::vector<float> back = Dequantize(DType::kQ8_0, Quantize(DType::kQ8_0, x), 32);
  EXPECT_EQ(back[5], 3.0f);
  EXPECT_EQ(back[1], -127.0f);
  // All-zero block: d = 0, every q = 0.
  EXPECT_EQ(Quantize(DType::kQ8_0, std::vector<float>(32, 0.0f)), Bytes({}, 34, 0));
}

TEST(Blocks, Q4_0) {
  // Largest magnitude -8 -> d = -8 / -8 = 1, q = min(15, (int8)(x + 8.5)).
  std::vector<float> x(32, 0.0f);
  x[0] = -8;
  x[16] = 7;  // 0, 15 -> 0xF0
  x[1] = 0.5f;
  x[17] = -0.5f;  // 9, 8  -> 0x89
  x[2] = 1.4f;
  x[18] = -3;  // 9, 5  -> 0x59
  EXPECT_EQ(Quantize(DType::kQ4_0, x), Bytes({0x00, 0x3C, 0xF0, 0x89, 0x59}, 18, 0x88));
  // Largest magnitude +8 -> d = -1 (f16 0xBC00); x = 8 -> 0; x = -7 -> 15.
  std::vector<float> y(32, 0.0f);
  y[0] = 8;
  y[16] = -7;
  EXPECT_EQ(Quantize(DType::kQ4_0, y), Bytes({0x00, 0xBC, 0xF0}, 18, 0x88));
  const std::vector<float> back = Dequantize(DType::kQ4_0, Quantize(DType::kQ4_0, y), 32);
  EXPECT_EQ(back[0], 8.0f);
  EXPECT_EQ(back[16], -7.0f);
  EXPECT_EQ(back[5], 0.0f);
}

TEST(Blocks, Fp8E4M3E8M0) {
  // amax 100: 100/0.25 = 400 <= 448 but 100/0.125 = 800 > 448, so s = 2^-2 (byte 125 = 0x7D).
  // 100 -> 400 = 1.5625 * 2^8, a tie between 384 and 416 -> 384 (0x7C); 1 -> 4 (0x48);
  // -0.5 -> -2 (0xC0).
  std::vector<float> x(32, 0.0f);
  x[0] = 100;
  x[1] = 1;
  x[2] = -0.5f;
  const std::vector<uint8_t> q = Quantize(DType::kFP8_E4M3_E8M0_32, x);
  EXPECT_EQ(q, Bytes({0x7D, 0x7C, 0x48, 0xC0}, 33, 0));
  const std::vector<float> back = Dequantize(DType::kFP8_E4M3_E8M0_32, q, 32);
  EXPECT_EQ(back[0], 96.0f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -0.5f);
  // All zero: scale 1 (byte 127).
  EXPECT_EQ(Quantize(DType::kFP8_E4M3_E8M0_32, std::vector<float>(32, 0.0f)), Bytes({0x7F}, 33, 0));
  // amax exactly 448 keeps s = 1.
  std::vector<float> y(32, 0.0f);
  y[7] = -448;
  EXPECT_EQ(Quantize(DType::kFP8_E4M3_E8M0_32, y)[0], 0x7F);
  y[7] = -448.5f;
  EXPECT_EQ(Quantize(DType::kFP8_E4M3_E8M0_32, y)[0], 0x80);
}

TEST(Blocks, Fp4E2M1E8M0) {
  // amax 10: s = 2 (byte 128). 10/2 = 5 ties 4|6 -> 4 (code 6); 3.1/2 = 1.55 -> 1.5 (code 3);
  // -1/2 = -0.5 (code 9); 0.2/2 = 0.1 -> 0.
  std::vector<float> x(32, 0.0f);
  x[0] = 10;
  x[1] = 3.1f;
  x[2] = -1;
  x[3] = 0.2f;
  const std::vector<uint8_t> q = Quantize(DType::kFP4_E2M1_E8M0_32, x);
  EXPECT_EQ(q, Bytes({0x80, 0x36, 0x09}, 17, 0));
  const std::vector<float> back = Dequantize(DType::kFP4_E2M1_E8M0_32, q, 32);
  EXPECT_EQ(back[0], 8.0f);
  EXPECT_EQ(back[1], 3.0f);
  EXPECT_EQ(back[2], -1.0f);
  EXPECT_EQ(back[3], 0.0f);
  EXPECT_EQ(Quantize(DType::kFP4_E2M1_E8M0_32, std::vector<float>(32, 0.0f)), Bytes({0x7F}, 17, 0));
}

TEST(Blocks, Fp4E2M1E4M3) {
  // amax 12: s = E4M3(12/6 = 2) = 0x40. 12/2 = 6 (7); -3/2 = -1.5 (0xB); 0.5/2 = 0.25 ties
  // 0|0.5 -> 0; 5/2 = 2.5 ties 2|3 -> 2 (code 4).
  std::vector<float> x(16, 0.0f);
  x[0] = 12;
  x[1] = -3;
  x[2] = 0.5f;
  x[3] = 5;
  const std::vector<uint8_t> q = Quantize(DType::kFP4_E2M1_E4M3_16, x);
  EXPECT_EQ(q, Bytes({0x40, 0xB7, 0x40}, 9, 0));
  const std::vector<float> back = Dequantize(DType::kFP4_E2M1_E4M3_16, q, 16);
  EXPECT_EQ(back[0], 12.0f);
  EXPECT_EQ(back[1], -3.0f);
  EXPECT_EQ(back[3], 4.0f);
  // amax 12.6: 12.6/6 = 2.1 rounds down to s = 2 (0x40); 12.6/2 = 6.3 saturates to 6.
  x[0] = 12.6f;
  EXPECT_EQ(Quantize(DType::kFP4_E2M1_E4M3_16, x)[0], 0x40);
  EXPECT_EQ(Quantize(DType::kFP4_E2M1_E4M3_16, x)[1] & 0x0F, 0x07);
  // All zero: scale 0, elements 0.
  EXPECT_EQ(Quantize(DType::kFP4_E2M1_E4M3_16, std::vector<float>(16, 0.0f)), Bytes({}, 9, 0));
  // Tiny block: the scale does not flush to zero.
  std::vector<float> tiny(16, 0.0f);
  tiny[0] = 6e-4f;  // 6e-4 / 6 = 1e-4 < 2^-10 rounds to scale 0; 6e-4 / 2^-9 = 0.3 -> 0.5
  const std::vector<uint8_t> qt = Quantize(DType::kFP4_E2M1_E4M3_16, tiny);
  EXPECT_EQ(qt[0], 0x01);
  EXPECT_GT(Dequantize(DType::kFP4_E2M1_E4M3_16, qt, 16)[0], 0.0f);
}

TEST(Blocks, NonFiniteInputPoisonsTheBlock) {
  std::vector<float> x(32, 1.0f);
  x[3] = std::numeric_limits<float>::infinity();
  for (DType t : {DType::kFP8_E4M3_E8M0_32, DType::kFP4_E2M1_E8M0_32, DType::kFP4_E2M1_E4M3_16}) {
    const std::vector<float> back = Dequantize(t, Quantize(t, x), 32);
    EXPECT_TRUE(std::isnan(back[0])) << DTypeName(t);
  }
}

// ---- round-trip error bounds on random data ----

// Half the gap between neighbouring E2M1 values around |v| (v in element units, <= 6).
float E2M1HalfStep(float a) {
  return a < 2.0f ? 0.25f : a < 4.0f ? 0.5f : 1.0f;
}

std::vector<float> RandomRow(std::mt19937& rng, int n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-20.0f, 20.0f);
  std::vector<float> x(n);
  for (int b = 0; b < n / 32; ++b) {
    const float scale = std::exp2(log_scale(rng));  // each block its own magnitude
    for (int j = 0; j < 32; ++j) x[b * 32 + j] = normal(rng) * scale;
  }
  return x;
}

TEST(RoundTrip, ErrorBounds) {
  std::mt19937 rng(42);
  constexpr int kN = 512;
  for (int iter = 0; iter < 50; ++iter) {
    const std::vector<float> x = RandomRow(rng, kN);
    for (DType t : {DType::kFP8_E4M3_E8M0_32, DType::kFP4_E2M1_E8M0_32, DType::kFP4_E2M1_E4M3_16,
                    DType::kQ8_0, DType::kQ4_0}) {
      const std::vector<uint8_t> q = Quantize(t, x);
      const std::vector<float> y = Dequantize(t, q, kN);
      const int64_t be = BlockElems(t);
      for (int64_t b = 0; b < kN / be; ++b) {
        const uint8_t* blk = q.data() + b * BlockBytes(t);
        // Q8_0 / Q4_0: the exact scale d the quantizer derived and the f16 one it stored.
        float amax = 0.0f;
        for (int64_t j = b * be; j < (b + 1) * be; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = t == DType::kQ8_0 ? amax / 127.0f : amax / 8.0f;
        const float d16 = std::fabs(F16ToF32(static_cast<uint16_t>(blk[0] | (blk[1] << 8))));
        const float d_err = std::fabs(d - d16);
        // A scale beyond f16's range stores inf (as in ggml): such blocks are out of contract.
        if ((t == DType::kQ8_0 || t == DType::kQ4_0) && std::isinf(d16)) continue;
        for (int64_t j = b * be; j < (b + 1) * be; ++j) {
          const float err = std::fabs(y[j] - x[j]);
          float bound = 0;
          switch (t) {
            case DType::kFP8_E4M3_E8M0_32: {
              const float s = E8M0ToF32(blk[0]);
              bound = std::max(std::fabs(x[j]) * 0x1p-4f, s * 0x1p-10f);
              break;
            }
            case DType::kFP4_E2M1_E8M0_32:
            case DType::kFP4_E2M1_E4M3_16: {
              const float s = t == DType::kFP4_E2M1_E8M0_32 ? E8M0ToF32(blk[0]) : E4M3ToF32(blk[0]);
              const float a = std::fabs(x[j]) / s;
              bound = s * (E2M1HalfStep(std::min(a, 6.0f)) + std::max(0.0f, a - 6.0f)) * 1.0001f;
              break;
            }
            // |x - d16 q| <= |x - d q| + |d - d16| |q|, with |x/d - q| <= 1/2 (Q8_0) or 1
            // (Q4_0, whose top code is clipped) and |q| <= 127 or 8.
            case DType::kQ8_0: bound = (0.5f * d + 127 * d_err) * 1.001f; break;
            case DType::kQ4_0: bound = (d + 8 * d_err) * 1.001f; break;
            default: break;
          }
          ASSERT_LE(err, bound) << DTypeName(t) << " iter " << iter << " j " << j << " x " << x[j];
        }
      }
    }
  }
}

TEST(RoundTrip, PowerOfTwoScaleIsSmallest) {
  std::mt19937 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    const std::vector<float> x = RandomRow(rng, 32);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (auto [t, max_elem] :
         {std::pair{DType::kFP8_E4M3_E8M0_32, 448.0f}, std::pair{DType::kFP4_E2M1_E8M0_32, 6.0f}}) {
      const float s = E8M0ToF32(Quantize(t, x)[0]);
      EXPECT_LE(amax / s, max_elem);
      EXPECT_GT(amax / (s / 2), max_elem);
    }
  }
}

TEST(RoundTrip, ExactValuesSurvive) {
  // Values already on the grid come back bit-exact.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = E4M3ToF32(static_cast<uint8_t>(j * 3 + 20)) * 0.25f;
  EXPECT_EQ(Dequantize(DType::kFP8_E4M3_E8M0_32, Quantize(DType::kFP8_E4M3_E8M0_32, x), 32), x);
  for (int j = 0; j < 32; ++j) x[j] = E2M1ToF32(static_cast<uint8_t>(j % 16)) * 4.0f;
  EXPECT_EQ(Dequantize(DType::kFP4_E2M1_E8M0_32, Quantize(DType::kFP4_E2M1_E8M0_32, x), 32), x);
  EXPECT_EQ(Dequantize(DType::kFP4_E2M1_E4M3_16, Quantize(DType::kFP4_E2M1_E4M3_16, x), 32), x);
}

}  // namespace
}  // namespace kvserve::tensor
