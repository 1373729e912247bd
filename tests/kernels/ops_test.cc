// The per-token ops of kernels/cpu/ops.h whose SIMD and scalar forms must agree bit for bit.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention_exp.h"
#include "support/simd_targets.h"

namespace kvserve::kernels {
namespace {

// The scalar definition of ops.h: g / (1 + AttentionExp(min(-g, 88))) * u.
float SiluMulDefinition(float g, float u) {
  return g / (1.0f + AttentionExp(std::min(-g, 88.0f))) * u;
}

// An op's output `got` for (gate, up) on SIMD target `target` has the bits of its scalar
// definition's `want` (any NaN for a NaN).
void ExpectDefinitionBits(float got, float want, int64_t target, float gate, float up) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << hwy::TargetName(target) << " gate " << gate << " up " << up;
  } else {
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
        << hwy::TargetName(target) << " gate " << gate << " up " << up << ": " << got << " vs "
        << want;
  }
}

// SiluMul gives the definition's bits on every SIMD target this CPU runs, for every value,
// including the clamp at 88, the zero below -87, infinities and NaN, at every tail length.
TEST(OpsTest, SiluMulMatchesItsScalarDefinition) {
  std::vector<float> gate, up;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f), narrow(-6.0f, 6.0f);
  for (int i = 0; i < 4000; ++i) {
    gate.push_back(i % 2 == 0 ? narrow(rng) : wide(rng));
    up.push_back(narrow(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float g : {0.0f, -0.0f, 87.0f, -87.0f, 87.5f, 88.0f, -88.0f, 89.0f, -89.0f, 1e-40f, -1e-40f,
                  inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f}) {
    gate.push_back(g);
    up.push_back(1.5f);
  }
  const kvserve::testing::SimdTargetReset reset_targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (size_t n : {gate.size(), size_t{1}, size_t{15}, size_t{17}}) {
      std::vector<float> out(gate.begin(), gate.begin() + n);
      SiluMul(out.data(), up.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        ExpectDefinitionBits(out[i], SiluMulDefinition(gate[i], up[i]), target, gate[i], up[i]);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The scalar definition of ops.h's SwigluOaiMul (gate and up with their biases added, if any).
float SwigluOaiDefinition(float gate, float up) {
  const float g = std::min(gate, kSwigluOaiLimit);
  const float u = std::clamp(up, -kSwigluOaiLimit, kSwigluOaiLimit);
  return g / (1.0f + AttentionExp(std::min(kSwigluOaiAlpha * (0.0f - g), 88.0f))) * (u + 1.0f);
}

// SwigluOaiMul gives the definition's bits on every SIMD target, with and without biases, at
// the clamps (7, -7, the exp's 88), for infinities and NaN, at every tail length.
TEST(OpsTest, SwigluOaiMulMatchesItsScalarDefinition) {
  std::vector<float> gate, up, bg, bu;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f), narrow(-9.0f, 9.0f);
  for (int i = 0; i < 4000; ++i) {
    gate.push_back(i % 2 == 0 ? narrow(rng) : wide(rng));
    up.push_back(narrow(rng));
    bg.push_back(narrow(rng) * 0.1f);
    bu.push_back(narrow(rng) * 0.1f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float g : {0.0f, -0.0f, 7.0f, -7.0f, 7.5f, -51.7f, -52.0f, -60.0f, 1e-40f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f}) {
    for (float u : {-8.0f, 8.0f, inf, std::numeric_limits<float>::quiet_NaN()}) {
      gate.push_back(g);
      up.push_back(u);
      bg.push_back(0.0f);
      bu.push_back(0.0f);
    }
  }
  const kvserve::testing::SimdTargetReset reset_targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (bool biased : {false, true}) {
      for (size_t n : {gate.size(), size_t{1}, size_t{15}, size_t{17}}) {
        std::vector<float> out(gate.begin(), gate.begin() + n);
        SwigluOaiMul(out.data(), up.data(), static_cast<int64_t>(n), biased ? bg.data() : nullptr,
                     biased ? bu.data() : nullptr);
        for (size_t i = 0; i < n; ++i) {
          const float want = biased ? SwigluOaiDefinition(gate[i] + bg[i], up[i] + bu[i])
                                    : SwigluOaiDefinition(gate[i], up[i]);
          ExpectDefinitionBits(out[i], want, target, gate[i], up[i]);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The clamped SwiGLU stays close to the exact function (ggml's, with exp in double).
TEST(OpsTest, SwigluOaiMulIsCloseToExact) {
  for (float g = -30.0f; g <= 10.0f; g += 0.037f) {
    float out = g;
    const float up = 0.5f;
    SwigluOaiMul(&out, &up, 1);
    const double gc = std::min(g, 7.0f);
    const double exact = gc / (1.0 + std::exp(-1.702 * gc)) * 1.5;
    EXPECT_NEAR(out, exact, 1e-6 * std::max(1.0, std::fabs(exact))) << g;
  }
}

// AddScaledRow and AddInPlace give the scalar definition's bits on every SIMD target, with and
// without a bias, first term or accumulated, at every tail length.
TEST(OpsTest, AddScaledRowAndAddInPlaceMatchTheirScalarDefinitions) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const kvserve::testing::SimdTargetReset reset_targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (int64_t n : {1, 15, 16, 17, 33, 720}) {
      std::vector<float> x(n), bias(n), y0(n);
      for (int64_t i = 0; i < n; ++i) x[i] = normal(rng), bias[i] = normal(rng), y0[i] = normal(rng);
      const float w = 0.37f;
      for (int form = 0; form < 4; ++form) {
        const bool biased = form & 1, accumulate = form & 2;
        std::vector<float> got = y0;
        AddScaledRow(got.data(), x.data(), biased ? bias.data() : nullptr, w, n, accumulate);
        for (int64_t i = 0; i < n; ++i) {
          const float v = (biased ? x[i] + bias[i] : x[i]) * w;
          const float want = accumulate ? y0[i] + v : v;
          EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
              << hwy::TargetName(target) << " n " << n << " form " << form << " i " << i;
        }
      }
      std::vector<float> sum = y0;
      AddInPlace(sum.data(), x.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::bit_cast<uint32_t>(sum[i]), std::bit_cast<uint32_t>(y0[i] + x[i]));
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The scalar definition of ops.h's RmsNorm: eight double chains, the tree, two float multiplies.
void RmsNormDefinition(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double lane[8] = {};
  for (int64_t i = 0; i < n; ++i) lane[i % 8] += static_cast<double>(x[i]) * x[i];
  const double sum_sq =
      ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

// RmsNorm (the AVX-512 loop where the CPU has it) gives the definition's bits at every length
// and tail, on wide and tiny magnitudes, with an infinity or a NaN in the row, in place too.
TEST(OpsTest, RmsNormMatchesItsScalarDefinition) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 64, 100, 768, 2050}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x(n), w(n), want(n), got(n);
      const float magnitude = trial == 1 ? 1e-20f : (trial == 2 ? 1e18f : 3.0f);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng) * magnitude;
        w[i] = 1.0f + 0.1f * normal(rng);
      }
      if (trial == 3) x[rng() % n] = std::numeric_limits<float>::infinity();
      if (trial == 4) x[rng() % n] = std::numeric_limits<float>::quiet_NaN();
      RmsNormDefinition(x.data(), w.data(), want.data(), n, 1e-5f);
      RmsNorm(x.data(), w.data(), got.data(), n, 1e-5f);
      if (trial == 5) {  // in place
        got = x;
        RmsNorm(got.data(), w.data(), got.data(), n, 1e-5f);
      }
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << "n " << n << " trial " << trial << " i " << i;
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << "n " << n << " trial " << trial << " i " << i;
        }
      }
    }
  }
}

// SiLU stays close to the exact function (AttentionExp is within 2 ulp of exp).
TEST(OpsTest, SiluMulIsCloseToExact) {
  for (float g = -30.0f; g <= 30.0f; g += 0.037f) {
    float out = g;
    const float up = 1.0f;
    SiluMul(&out, &up, 1);
    const double exact = g / (1.0 + std::exp(-static_cast<double>(g)));
    EXPECT_NEAR(out, exact, 1e-6 * std::max(1.0, std::fabs(exact))) << g;
  }
}

}  // namespace
}  // namespace kvserve::kernels
