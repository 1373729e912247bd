// sampling/scan.h against plain loops: every length from 0 to 70 (the vector body and its
// tail), NaN, infinities, -0 / +0 and ties.
#include "sampling/scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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

// Ids near the range's ends and at the uint16 extremes (0xFFFF / 0xFFFE are the sampler's
// markers), every length from 0 to 100 (three 32-id blocks and each tail).
TEST(ScanTest, IndicesInRangeMatchesPlainLoop) {
  std::mt19937 rng(11);
  const uint16_t pool[] = {0, 1, 2, 99, 100, 101, 150, 199, 200, 201, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF};
  const std::pair<uint16_t, uint16_t> ranges[] = {
      {100, 200}, {0, 0}, {0, 0xFFFF}, {0xFFFE, 0xFFFF}, {150, 150}, {0x7FFF, 0x8000}};
  for (auto [first, last] : ranges) {
    for (size_t n = 0; n <= 100; ++n) {
      std::vector<uint16_t> ids(n);
      for (uint16_t& id : ids) id = pool[rng() % std::size(pool)];
      std::vector<int32_t> want = {-7};  // appended after what is there
      std::vector<int32_t> got = {-7};
      for (size_t i = 0; i < n; ++i) {
        if (ids[i] >= first && ids[i] <= last) want.push_back(static_cast<int32_t>(i));
      }
      IndicesInRange(ids, first, last, got);
      EXPECT_EQ(got, want) << "n " << n << " range " << first << ".." << last;
    }
  }
}

// The group maxima (lengths around the 1,024-value chunks and 64-value runs: the vector body,
// its tail and the scalar runs), the quotients bit for bit, the floor they give for every k,
// and IndicesAtLeast against a plain loop; with NaN, infinities and ties.
TEST(ScanTest, GroupMaximaFloorAndIndicesAtLeastMatchPlainLoops) {
  std::mt19937 rng(13);
  for (int specials = 0; specials < 2; ++specials) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1023},
                     size_t{1024}, size_t{1025}, size_t{2111}, size_t{4096}, size_t{32000}}) {
      std::vector<float> v = Logits(rng, n, specials);
      for (float& x : v) x += std::uniform_real_distribution<float>(0.0f, 0.5f)(rng);
      for (float divisor : {1.0f, 0.7f}) {
        std::vector<float> q(n), maxima, maxima2;
        DivideAndGroupMaxima(v, divisor, q.data(), maxima);
        for (size_t i = 0; i < n; ++i) {
          const float want = v[i] / divisor;
          ASSERT_TRUE(std::memcmp(&q[i], &want, 4) == 0 || (std::isnan(q[i]) && std::isnan(want)))
              << "n " << n << " i " << i;
        }
        GroupMaxima(q, maxima2);
        EXPECT_EQ(maxima, maxima2) << "n " << n;
        // Groups are disjoint and cover the values: as many finite maxima as groups holding a
        // finite value, their largest the largest finite value.
        std::vector<float> finite;
        for (float x : q) {
          if (std::isfinite(x)) finite.push_back(x);
        }
        std::sort(finite.begin(), finite.end(), std::greater<float>());
        EXPECT_EQ(MaxFinite(maxima), finite.empty() ? -kInf : finite[0]) << "n " << n;
        EXPECT_LE(maxima.size(), n / 16 + 64) << "n " << n;
        for (int32_t k : {1, 2, 7, 50, 400}) {
          std::vector<float> scratch = maxima;
          const float floor = KthLargestOf(scratch, k);
          if (floor == -kInf) continue;
          ASSERT_GE(finite.size(), static_cast<size_t>(k));
          EXPECT_LE(floor, finite[k - 1]) << "n " << n << " k " << k;  // under the k-th largest
          std::vector<int32_t> want = {-7}, got = {-7};
          for (size_t i = 0; i < n; ++i) {
            if (std::isfinite(q[i]) && q[i] >= floor) want.push_back(static_cast<int32_t>(i));
          }
          IndicesAtLeast(q, floor, got);
          EXPECT_EQ(got, want) << "n " << n << " k " << k;
          EXPECT_GE(got.size(), static_cast<size_t>(k) + 1) << "n " << n << " k " << k;
        }
      }
      EXPECT_EQ(MaxNotNaN(v), [&] {
        float best = -kInf;
        for (float x : v) best = x > best ? x : best;
        return best;
      }()) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace kvserve::sampling
