// QuantizeActivationRow against the scheme of matmul.h written with std::round: the fast
// rounding must give the same codes, ties and clamping included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"

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

}  // namespace
}  // namespace kvserve::kernels
