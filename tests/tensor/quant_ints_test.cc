// The ggml block formats of tensor/quant_ints.h: dequantization against an independent naive
// reading of each block layout (written here from ggml's block structs, sharing no code with
// tensor/), quantize -> dequantize round trips, and edge cases (zeros, constants, tiny and large
// values). tests/tensor/ggml_reference_test.cc compares with llama.cpp's own ggml besides.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/quant.h"
#include "tensor/quant_ints.h"

namespace kvserve::tensor {
namespace {

constexpr DType kNewTypes[] = {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                               DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                               DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

constexpr int8_t kNl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

float Half(const uint8_t* p) {
  return F16ToF32(static_cast<uint16_t>(p[0] | p[1] << 8));
}

// ---- naive readers: one block of `t` at b -> out, following ggml's dequantize_row_* loops ----

void NaiveQ2K(const uint8_t* b, float* y) {
  const float d = Half(b + 80), min = Half(b + 82);
  const uint8_t* q = b + 16;
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
  }
}

void NaiveQ3K(const uint8_t* b, float* y) {
  const float d_all = Half(b + 108);
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    scales[j] = static_cast<int8_t>(low | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        }
      }
    }
  }
}

void ScaleMin(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void NaiveQ45K(const uint8_t* b, bool five, float* y) {
  const float d = Half(b), min = Half(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (five ? 48 : 16);
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
    int sc, m;
    ScaleMin(is, b + 4, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    ScaleMin(is + 1, b + 4, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
    }
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void NaiveQ6K(const uint8_t* b, float* y) {
  const float d = Half(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

void NaiveQ32(DType t, const uint8_t* b, float* y) {
  const float d = Half(b);
  uint32_t qh = 0;
  if (t == DType::kQ5_0) std::memcpy(&qh, b + 2, 4);
  if (t == DType::kQ5_1) std::memcpy(&qh, b + 4, 4);
  const int qs_at = t == DType::kQ4_1 ? 4 : t == DType::kQ5_0 ? 6 : t == DType::kQ5_1 ? 8 : 2;
  for (int j = 0; j < 16; ++j) {
    const uint8_t byte = b[qs_at + j];
    int x0 = byte & 0x0F, x1 = byte >> 4;
    if (t == DType::kQ5_0 || t == DType::kQ5_1) {
      x0 |= ((qh >> j) << 4) & 0x10;
      x1 |= (qh >> (j + 12)) & 0x10;
    }
    switch (t) {
      case DType::kQ4_1:
      case DType::kQ5_1:
        y[j] = static_cast<float>(x0) * d + Half(b + 2);
        y[j + 16] = static_cast<float>(x1) * d + Half(b + 2);
        break;
      case DType::kQ5_0:
        y[j] = static_cast<float>(x0 - 16) * d;
        y[j + 16] = static_cast<float>(x1 - 16) * d;
        break;
      default:  // IQ4_NL
        y[j] = d * static_cast<float>(kNl[x0]);
        y[j + 16] = d * static_cast<float>(kNl[x1]);
    }
  }
}

void NaiveIq4Xs(const uint8_t* b, float* y) {
  const float d = Half(b);
  const int scales_h = b[2] | b[3] << 8;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kNl[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kNl[qs[j] >> 4]);
    }
  }
}

// MXFP4 from its definition: E2M1 element times the E8M0 scale 2^(e - 127), computed in double
// (exact: every product is a power of two times 0..6) and rounded to f32 once.
void NaiveMxfp4(const uint8_t* b, float* y) {
  constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double scale = std::ldexp(1.0, b[0] - 127);
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? b[1 + j] & 0xF : b[1 + j - 16] >> 4;
    const double v = kE2M1[nibble & 7] * scale;
    y[j] = static_cast<float>(nibble & 8 && v != 0 ? -v : v);  // ggml: code 8 is +0
  }
}

void NaiveBlock(DType t, const uint8_t* b, float* y) {
  switch (t) {
    case DType::kQ2_K: return NaiveQ2K(b, y);
    case DType::kQ3_K: return NaiveQ3K(b, y);
    case DType::kQ4_K: return NaiveQ45K(b, false, y);
    case DType::kQ5_K: return NaiveQ45K(b, true, y);
    case DType::kQ6_K: return NaiveQ6K(b, y);
    case DType::kIQ4_XS: return NaiveIq4Xs(b, y);
    case DType::kMXFP4: return NaiveMxfp4(b, y);
    default: return NaiveQ32(t, b, y);
  }
}

bool SameBits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

TEST(QuantInts, DequantizeMatchesNaiveLayoutReading) {
  std::mt19937 rng(11);
  for (DType t : kNewTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t n = 4 * BlockElems(t);
    for (int iter = 0; iter < 200; ++iter) {
      std::vector<uint8_t> bytes(static_cast<size_t>(RowBytes(t, n)));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      std::vector<float> got(n), want(n);
      DequantizeRow(t, bytes.data(), got.data(), n);
      for (int64_t k = 0; k < 4; ++k) {
        NaiveBlock(t, bytes.data() + k * BlockBytes(t), want.data() + k * BlockElems(t));
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(SameBits(got[i], want[i])) << i;
    }
  }
}

// Relative RMS error of a quantize -> dequantize round trip on Gaussian rows, per format:
// about what ggml's formats reach (2.6 to 6.6 bits per weight).
TEST(QuantInts, RoundTripErrorPerFormat) {
  const std::pair<DType, double> kBounds[] = {
      {DType::kQ4_1, 0.11}, {DType::kQ5_0, 0.06}, {DType::kQ5_1, 0.055}, {DType::kQ2_K, 0.40},
      {DType::kQ3_K, 0.20}, {DType::kQ4_K, 0.10}, {DType::kQ5_K, 0.05},  {DType::kQ6_K, 0.025},
      {DType::kIQ4_NL, 0.10}, {DType::kIQ4_XS, 0.10}, {DType::kMXFP4, 0.13}};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kN = 4096;
  std::vector<float> x(kN), y(kN);
  for (auto [t, bound] : kBounds) {
    for (float sigma : {1e-3f, 1.0f, 300.0f}) {
      for (auto& v : x) v = sigma * normal(rng);
      std::vector<uint8_t> q(static_cast<size_t>(RowBytes(t, kN)));
      QuantizeRow(t, x.data(), q.data(), kN);
      DequantizeRow(t, q.data(), y.data(), kN);
      double err = 0, ref = 0;
      for (int64_t i = 0; i < kN; ++i) {
        err += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
        ref += double{x[i]} * x[i];
      }
      EXPECT_LT(std::sqrt(err / ref), bound) << DTypeName(t) << " sigma " << sigma;
    }
  }
}

// All-zero rows give zero values and finite (zero) scales; constant rows come back close;
// large values (1e4, inside f16 scale range) and small ones (1e-3) keep finite, NaN-free scales
// and relative accuracy; tiny ones (1e-6, whose scales fall into f16's subnormals and lose
// precision, as in ggml) still give finite values.
TEST(QuantInts, EdgeCasesKeepScalesFinite) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : kNewTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const int64_t n = 2 * BlockElems(t);
    std::vector<std::vector<float>> rows = {std::vector<float>(n, 0.0f),
                                            std::vector<float>(n, -0.5f)};
    for (float scale : {1e4f, 1e-3f, 1e-6f}) {
      std::vector<float> x(n);
      for (auto& v : x) v = scale * normal(rng);
      rows.push_back(x);
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::vector<float>& x = rows[r];
      std::vector<uint8_t> q(static_cast<size_t>(RowBytes(t, n)));
      QuantizeRow(t, x.data(), q.data(), n);
      QuantBlockInts b;
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      for (int64_t k = 0; k < 2; ++k) {
        DecodeBlockInts(t, q.data() + k * BlockBytes(t), &b);
        ASSERT_TRUE(std::isfinite(b.d) && std::isfinite(b.dmin)) << "row " << r;
      }
      std::vector<float> y(n);
      DequantizeRow(t, q.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "row " << r << " value " << i;
        if (r == 0) {
          ASSERT_EQ(y[i], 0.0f) << i;
        }
        if (r == 4) continue;  // 1e-6: finite is all f16 scales allow
        // No format is off by more than half its range on any value.
        ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * amax + 1e-30f) << "row " << r << " value " << i;
      }
    }
  }
}

TEST(QuantInts, LayoutsMatchBlockSizes) {
  for (DType t : kNewTypes) {
    const QuantLayout l = GetQuantLayout(t);
    EXPECT_EQ(l.num_subs * l.sub_len, BlockElems(t)) << DTypeName(t);
  }
  EXPECT_TRUE(GetQuantLayout(DType::kQ4_K).has_min);
  EXPECT_FALSE(GetQuantLayout(DType::kQ6_K).has_min);
  EXPECT_EQ(GetQuantLayout(DType::kQ3_K).sub_len, 16);
}

}  // namespace
}  // namespace kvserve::tensor
