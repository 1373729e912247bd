// sampling/scan.h against plain loops: every length from 0 to 70 (the vector body and its
// tail), NaN, infinities, -0 / +0 and ties.
#include "sampling/scan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kvserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int32_t NaiveArgmax(const std::vector<float>& v) {
  int32_t best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i]) || v[i] == -kInf) continue;
    if (best < 0 || v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best < 0 ? 0 : best;
}

float NaiveMaxFinite(const std::vector<float>& v) {
  float best = -kInf;
  for (float x : v) {
    if (std::isfinite(x) && x > best) best = x;
  }
  return best;
}

// Small integers (so ties are common) with some specials mixed in.
std::vector<float> Logits(std::mt19937& rng, size_t n, int specials) {
  std::uniform_int_distribution<int> value(-4, 4), kind(0, 15);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<float>(value(rng));
    if (x == 0.0f && kind(rng) < 8) x = -0.0f;
    if (specials > 0) {
      switch (kind(rng)) {
        case 0: x = kNaN; break;
        case 1: x = kInf; break;
        case 2: x = -kInf; break;
        default: break;
      }
    }
  }
  return v;
}

TEST(ScanTest, ArgmaxAndMaxFiniteMatchPlainLoops) {
  std::mt19937 rng(7);
  for (int specials = 0; specials < 2; ++specials) {
    for (size_t n = 0; n <= 70; ++n) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> v = Logits(rng, n, specials);
        EXPECT_EQ(Argmax(v), NaiveArgmax(v)) << "n " << n;
        const float got = MaxFinite(v), want = NaiveMaxFinite(v);
        EXPECT_TRUE(got == want) << "n " << n << " got " << got << " want " << want;
      }
    }
  }
}

TEST(ScanTest, EdgeCases) {
  EXPECT_EQ(Argmax(std::vector<float>{}), 0);
  EXPECT_EQ(MaxFinite(std::vector<float>{}), -kInf);
  std::vector<float> all_bad(40, kNaN);
  all_bad[17] = -kInf;
  all_bad[33] = kInf;
  EXPECT_EQ(MaxFinite(all_bad), -kInf);
  EXPECT_EQ(Argmax(all_bad), 33);  // +inf is the largest logit
  all_bad[33] = kNaN;
  EXPECT_EQ(Argmax(all_bad), 0);
  std::vector<float> zeros(50, -0.0f);
  zeros[20] = 0.0f;
  EXPECT_EQ(Argmax(zeros), 0);  // -0 == +0: the lowest id
  std::vector<float> late(33, 1.0f);
  late[32] = 2.0f;  // the maximum in the tail after two vectors
  EXPECT_EQ(Argmax(late), 32);
  EXPECT_EQ(MaxFinite(late), 2.0f);
}

}  // namespace
}  // namespace kvserve::sampling
