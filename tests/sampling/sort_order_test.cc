// The sampler's distribution order on a large vocabulary (where it radix-sorts) must equal a
// plain sort by (logit descending, token ascending): ties, -0 / +0, infinities and NaN included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace kvserve::sampling {
namespace {

TEST(SamplerSortOrderTest, LargeVocabularyMatchesReferenceOrder) {
  constexpr int32_t kVocab = 5000;
  std::mt19937 rng(11);
  Sampler sampler(kVocab);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> logits(kVocab);
    for (float& l : logits) {
      // Coarse values give many ties; a few signed zeros and non-finite values.
      l = static_cast<float>(static_cast<int>(rng() % 400) - 200) * 0.25f;
      const uint32_t r = rng() % 100;
      if (r == 0) l = -0.0f;
      if (r == 1) l = std::numeric_limits<float>::quiet_NaN();
      if (r == 2) l = -std::numeric_limits<float>::infinity();
      if (trial % 2 == 1) l *= 1e-30f;  // tiny and subnormal magnitudes
    }
    SamplingParams params;
    params.temperature = 1.0f;
    std::vector<int32_t> want;
    for (int32_t i = 0; i < kVocab; ++i) {
      if (std::isfinite(logits[i])) want.push_back(i);
    }
    std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const std::span<const Candidate> dist = sampler.Distribution(logits, params, TokenHistory{});
    ASSERT_EQ(dist.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(dist[i].token, want[i]) << "rank " << i;
  }
}

}  // namespace
}  // namespace kvserve::sampling
