// The sampler's distribution order on a large vocabulary (where it bucket- or radix-sorts) must
// equal a plain sort by (logit descending, token ascending): ties, -0 / +0, infinities and NaN
// included. And the whole sampler must agree bit for bit with sampler.h's pipeline written
// plainly (below): the same distribution and, for every seed and position, the same token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "sampling/reference_sampler.h"

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

TEST(SamplerSortOrderTest, SameDistributionAndDrawsAsThePlainPipeline) {
  constexpr int32_t kVocab = 151936;  // Qwen2/Qwen3
  std::mt19937 rng(5);
  Sampler sampler(kVocab);
  std::vector<int32_t> prompt(40);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
  for (int shape = 0; shape < 4; ++shape) {
    std::normal_distribution<float> normal(0.0f, shape == 1 ? 8.0f : 2.0f);
    std::vector<float> logits(kVocab);
    for (float& l : logits) {
      l = normal(rng);
      if (shape == 2) l = std::round(l * 4.0f) * 0.25f;  // many ties
      if (shape == 3 && rng() % 50 == 0) l = -std::numeric_limits<float>::infinity();
    }
    for (int setting = 0; setting < 6; ++setting) {
      SamplingParams p;
      p.temperature = std::vector<float>{1.0f, 0.7f, 1.3f, 1.0f, 1.0f, 0.0f}[setting];
      if (setting == 3) p.top_p = 0.9f, p.min_p = 0.01f;
      if (setting == 4) p.top_k = 50;
      const Reference want = ReferenceDistribution(logits, p);
      const std::span<const Candidate> got = sampler.Distribution(logits, p, TokenHistory{});
      ASSERT_EQ(got.size(), want.dist.size()) << shape << "/" << setting;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].token, want.dist[i].token) << shape << "/" << setting << " rank " << i;
        ASSERT_EQ(got[i].prob, want.dist[i].prob) << shape << "/" << setting << " rank " << i;
      }
      for (int64_t position = 40; position < 60; ++position) {
        std::vector<int32_t> generated(position - 40, 1);
        const SampleResult r = sampler.Sample(logits, p, {prompt, generated}, 1234 + shape);
        ASSERT_EQ(r.token, ReferenceToken(want, 1234 + shape, position))
            << shape << "/" << setting << " position " << position;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::sampling
