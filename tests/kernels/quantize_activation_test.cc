// QuantizeActivationRow against the scheme of matmul.h written with std::round: the fast
// rounding must give the same codes, ties and clamping included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_portable.h"

namespace kvserve::kernels {
namespace {

TEST(QuantizeActivationTest, MatchesStdRoundIncludingTies) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(64);
    for (float& v : x) v = normal(rng);
    // Values that land exactly on ties after scaling: amax 127 makes the scale 1.
    if (trial % 2 == 0) {
      x[0] = 127.0f;
      for (int i = 1; i < 32; ++i) x[i] = static_cast<float>(static_cast<int>(rng() % 253) - 126) + 0.5f;
    }
    std::vector<int8_t> q(64);
    std::vector<float> d(2);
    QuantizeActivationRow(x.data(), 64, q.data(), d.data());
    for (int b = 0; b < 2; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
      const float scale = amax / 127.0f;
      ASSERT_EQ(d[b], scale);
      const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      for (int i = 0; i < 32; ++i) {
        const float want = std::clamp(std::round(x[32 * b + i] * inv), -127.0f, 127.0f);
        ASSERT_EQ(q[32 * b + i], static_cast<int8_t>(want)) << "trial " << trial << " value " << i;
      }
    }
  }
}

// The dispatched (SIMD) quantization equals the portable one on special values: NaN, +-inf,
// huge and subnormal magnitudes, signed zeros, exact ties, an all-zero block. 20 blocks: the
// SIMD rows quantize 16 blocks at a time, then the rest one by one.
TEST(QuantizeActivationTest, SimdEqualsPortableOnSpecialValues) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, 3e38f,
                            -3e38f,        1e-40f,         -1e-40f,  0.0f,      -0.0f,
                            0.5f,          -0.5f,          1.5f,     -2.5f,     126.5f};
  constexpr int kCols = 640, kBlocks = kCols / 32;
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> x(kCols);
    for (float& v : x) v = normal(rng) * (trial % 3 == 0 ? 1e-30f : 1.0f);
    if (trial % 5 == 1) {
      const int zero_block = static_cast<int>(rng() % kBlocks);
      std::fill(x.begin() + 32 * zero_block, x.begin() + 32 * (zero_block + 1), 0.0f);
    }
    for (int i = 0; i < 1 + trial % 12; ++i)
      x[rng() % x.size()] = specials[rng() % std::size(specials)];
    if (trial % 2 == 0) x[32] = 127.0f;  // scale 1 in block 1: the +-0.5 specials are ties
    std::vector<int8_t> q(kCols), want_q(kCols);
    std::vector<float> d(kBlocks), want_d(kBlocks);
    QuantizeActivationRow(x.data(), kCols, q.data(), d.data());
    internal::QuantizeActivationRowPortable(x.data(), kCols, want_q.data(), want_d.data());
    ASSERT_EQ(q, want_q) << "trial " << trial;
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(std::memcmp(&d[b], &want_d[b], 4), 0) << "trial " << trial << " block " << b;
    }
  }
}

// The same for the Q8_K activations of the K formats (codes, scales and code sums), ties of the
// largest magnitude included (the first one sets the sign).
TEST(QuantizeActivationTest, Q8KSimdEqualsPortableOnSpecialValues) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, 3e38f,
                            -3e38f,        1e-40f,         -1e-40f,  0.0f,      -0.0f,
                            0.5f,          -0.5f,          1.5f,     -2.5f,     126.5f};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> x(512);
    for (float& v : x) v = normal(rng) * (trial % 3 == 0 ? 1e-30f : 1.0f);
    if (trial % 5 == 1) std::fill(x.begin(), x.begin() + 256, 0.0f);
    if (trial % 7 == 2) std::fill(x.begin() + 256, x.end(), std::nanf(""));
    for (int i = 0; i < trial % 6; ++i) x[rng() % x.size()] = specials[rng() % std::size(specials)];
    if (trial % 4 == 3) {  // a tie of the largest magnitude with opposite signs
      x[300] = -9.0f;
      x[301] = 9.0f;
    }
    if (trial % 2 == 0) x[256] = 127.0f;  // iscale -1: the +-0.5 specials are ties
    std::vector<int8_t> q(512), want_q(512);
    std::vector<float> d(2), want_d(2);
    std::vector<int16_t> sums(32), want_sums(32);
    QuantizeActivationRowQ8K(x.data(), 512, q.data(), d.data(), sums.data());
    internal::QuantizeActivationRowQ8KPortable(x.data(), 512, want_q.data(), want_d.data(),
                                               want_sums.data());
    ASSERT_EQ(q, want_q) << "trial " << trial;
    ASSERT_EQ(sums, want_sums) << "trial " << trial;
    for (int b = 0; b < 2; ++b) {
      ASSERT_EQ(std::memcmp(&d[b], &want_d[b], 4), 0) << "trial " << trial << " block " << b;
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
