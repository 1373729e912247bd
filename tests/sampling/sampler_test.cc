#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampling_params.h"

namespace kvserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

SamplingParams Params(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

std::vector<int32_t> Tokens(std::span<const Candidate> dist) {
  std::vector<int32_t> out;
  for (const Candidate& c : dist) out.push_back(c.token);
  return out;
}

TEST(SamplerTest, GreedyTakesArgmaxTiesToLowestId) {
  Sampler sampler(5);
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, -kInf};
  for (uint64_t seed = 0; seed < 5; ++seed) {
    EXPECT_EQ(sampler.Sample(logits, Params(0.0f), {}, seed).token, 1);
  }
  EXPECT_EQ(sampler.Sample(std::vector<float>{-kInf, -kInf, NAN, -kInf, -kInf}, Params(0.0f),
                           {}, 0).token, 0);
}

TEST(SamplerTest, PenaltiesExactValues) {
  Sampler sampler(5);
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<int32_t> prompt = {0, 1, 0, 0};
  std::vector<int32_t> generated = {2, 2, 1};
  sampler.ApplyPenalties(logits, p, {prompt, generated});
  // 0: prompt only: 2 / 2. 1: -2 * 2 - 0.5 * 1 - 0.25. 2: 1 / 2 - 0.5 * 2 - 0.25. 3, 4: unseen.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.75f, -0.75f, 0.5f, 3.0f}));

  // Scratch state is reset: a call with no history changes nothing.
  std::vector<float> again = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  sampler.ApplyPenalties(again, p, {});
  EXPECT_EQ(again, (std::vector<float>{2.0f, -2.0f, 1.0f, 0.5f, 3.0f}));
}

TEST(SamplerTest, PenaltiesChangeGreedyChoice) {
  Sampler sampler(3);
  std::vector<float> logits = {1.0f, 1.5f, 0.0f};
  SamplingParams p = Params(0.0f);
  std::vector<int32_t> generated = {1, 1};
  EXPECT_EQ(sampler.Sample(logits, p, {{}, generated}, 0).token, 1);
  p.frequency_penalty = 0.5f;  // 1.5 - 1.0 = 0.5 < 1.0
  EXPECT_EQ(sampler.Sample(logits, p, {{}, generated}, 0).token, 0);
  p.frequency_penalty = 0.0f;
  p.repetition_penalty = 2.0f;  // 1.5 / 2 = 0.75 < 1.0
  EXPECT_EQ(sampler.Sample(logits, p, {{}, generated}, 0).token, 0);
}

TEST(SamplerTest, TemperatureScalesLogits) {
  Sampler sampler(3);
  std::vector<float> logits = LogitsFor({1.0 / 7, 2.0 / 7, 4.0 / 7});
  auto dist = sampler.Distribution(logits, Params(1.0f), {});
  ASSERT_EQ(Tokens(dist), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_NEAR(dist[0].prob, 4.0 / 7, 1e-6);
  EXPECT_NEAR(dist[2].prob, 1.0 / 7, 1e-6);
  dist = sampler.Distribution(logits, Params(0.5f), {});  // squares the odds: 1 : 4 : 16
  EXPECT_NEAR(dist[0].prob, 16.0 / 21, 1e-6);
  EXPECT_NEAR(dist[1].prob, 4.0 / 21, 1e-6);
  EXPECT_NEAR(dist[2].prob, 1.0 / 21, 1e-6);
}

TEST(SamplerTest, TopKKeepsKMostLikely) {
  Sampler sampler(5);
  std::vector<float> logits = {1.0f, 4.0f, 2.0f, 3.0f, 3.0f};
  SamplingParams p;
  p.top_k = 2;
  auto dist = sampler.Distribution(logits, p, {});
  EXPECT_EQ(Tokens(dist), (std::vector<int32_t>{1, 3}));  // tie 3/4 goes to the lower id
  EXPECT_NEAR(dist[0].prob, 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  for (int32_t off : {0, -1}) {
    p.top_k = off;
    EXPECT_EQ(sampler.Distribution(logits, p, {}).size(), 5u);
  }
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingP) {
  Sampler sampler(3);
  std::vector<float> logits = LogitsFor({0.2, 0.5, 0.3});
  SamplingParams p;
  p.top_p = 0.75f;  // masses before: 0, 0.5, 0.8
  auto dist = sampler.Distribution(logits, p, {});
  ASSERT_EQ(Tokens(dist), (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(dist[0].prob, 0.625, 1e-6);
  EXPECT_NEAR(dist[1].prob, 0.375, 1e-6);
  p.top_p = 0.4f;
  EXPECT_EQ(Tokens(sampler.Distribution(logits, p, {})), (std::vector<int32_t>{1}));
  p.top_p = 0.85f;
  EXPECT_EQ(sampler.Distribution(logits, p, {}).size(), 3u);
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  Sampler sampler(4);
  std::vector<float> logits = LogitsFor({0.4, 0.3, 0.2, 0.1});
  SamplingParams p;
  p.top_p = 0.5f;  // alone: keeps 0.4 and 0.3
  EXPECT_EQ(Tokens(sampler.Distribution(logits, p, {})), (std::vector<int32_t>{0, 1}));
  p.top_k = 2;  // renormalised 0.571, 0.429: the first alone reaches 0.5
  EXPECT_EQ(Tokens(sampler.Distribution(logits, p, {})), (std::vector<int32_t>{0}));
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  Sampler sampler(4);
  std::vector<float> logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1
  auto dist = sampler.Distribution(logits, p, {});
  ASSERT_EQ(Tokens(dist), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(dist[0].prob, 0.5 / 0.95, 1e-6);
  p.min_p = 1.0f;
  EXPECT_EQ(Tokens(sampler.Distribution(logits, p, {})), (std::vector<int32_t>{0}));
}

TEST(SamplerTest, MaskedAndNanLogitsAreNeverSampled) {
  Sampler sampler(4);
  std::vector<float> logits = {0.0f, -kInf, NAN, 0.0f};
  for (int64_t pos = 0; pos < 200; ++pos) {
    std::vector<int32_t> prompt(pos, 0);
    int32_t t = sampler.Sample(logits, Params(1.0f), {prompt, {}}, 7).token;
    EXPECT_TRUE(t == 0 || t == 3) << t;
  }
}

TEST(SamplerTest, SameSeedAndPositionSameToken) {
  const int32_t vocab = 100;
  std::vector<float> logits(vocab, 0.0f);  // uniform
  Sampler a(vocab);
  Sampler b(vocab);
  std::vector<int32_t> prompt = {1, 2, 3};
  std::set<int32_t> distinct;
  std::vector<int32_t> generated;
  for (int i = 0; i < 200; ++i) {
    int32_t t = a.Sample(logits, Params(1.0f), {prompt, generated}, 42).token;
    // A different sampler, after unrelated calls, gives the same token.
    (void)b.Sample(logits, Params(0.7f), {{}, generated}, 1234);
    EXPECT_EQ(b.Sample(logits, Params(1.0f), {prompt, generated}, 42).token, t);
    distinct.insert(t);
    generated.push_back(t);
  }
  EXPECT_GT(distinct.size(), 70u);  // positions give different draws
  // Another seed gives another stream.
  int differences = 0;
  generated.clear();
  for (int i = 0; i < 50; ++i) {
    int32_t t = a.Sample(logits, Params(1.0f), {prompt, generated}, 42).token;
    differences += t != a.Sample(logits, Params(1.0f), {prompt, generated}, 43).token;
    generated.push_back(t);
  }
  EXPECT_GT(differences, 40);
}

TEST(SamplerTest, DrawDependsOnPositionNotHistoryContent) {
  std::vector<float> logits(50, 0.0f);
  Sampler sampler(50);
  std::vector<int32_t> h1 = {1, 2, 3, 4};
  std::vector<int32_t> h2 = {9, 8};
  std::vector<int32_t> h3 = {7, 7};
  // Same seed, same position 4, no penalties: same token however the history splits.
  int32_t t1 = sampler.Sample(logits, Params(1.0f), {h1, {}}, 5).token;
  int32_t t2 = sampler.Sample(logits, Params(1.0f), {h2, h3}, 5).token;
  EXPECT_EQ(t1, t2);
}

TEST(SamplerTest, FrequenciesMatchDistribution) {
  const std::vector<double> probs = {0.5, 0.25, 0.15, 0.1};
  std::vector<float> logits = LogitsFor(probs);
  Sampler sampler(4);
  const int kDraws = 20000;
  std::vector<int> counts(4, 0);
  std::vector<int32_t> prompt(kDraws, 0);
  for (int i = 0; i < kDraws; ++i) {
    std::span<const int32_t> history(prompt.data(), i);  // position i
    ++counts[sampler.Sample(logits, Params(1.0f), {history, {}}, 2024).token];
  }
  for (int t = 0; t < 4; ++t) {
    const double sigma = std::sqrt(probs[t] * (1 - probs[t]) / kDraws);
    EXPECT_NEAR(counts[t] / double(kDraws), probs[t], 4 * sigma) << "token " << t;
  }
}

TEST(SamplerTest, RawLogprobs) {
  Sampler sampler(4);
  std::vector<float> logits = LogitsFor({0.1, 0.4, 0.4, 0.1});
  SamplingParams p = Params(0.0f);
  p.logprobs = 3;
  p.repetition_penalty = 1.5f;  // does not change reported logprobs
  std::vector<int32_t> generated = {1};
  SampleResult r = sampler.Sample(logits, p, {{}, generated}, 0);
  EXPECT_EQ(r.token, 2);  // 1 was penalised
  EXPECT_NEAR(r.logprob, std::log(0.4), 1e-6);
  ASSERT_EQ(r.top_logprobs.size(), 3u);
  EXPECT_EQ(r.top_logprobs[0].token, 1);
  EXPECT_EQ(r.top_logprobs[1].token, 2);
  EXPECT_EQ(r.top_logprobs[2].token, 0);
  EXPECT_NEAR(r.top_logprobs[2].logprob, std::log(0.1), 1e-6);
  p.logprobs = 0;
  EXPECT_TRUE(sampler.Sample(logits, p, {}, 0).top_logprobs.empty());
  p.temperature = 0.3f;  // temperature does not change reported logprobs either
  SampleResult s = sampler.Sample(logits, p, {}, 9);
  EXPECT_NEAR(s.logprob, std::log(s.token == 1 || s.token == 2 ? 0.4 : 0.1), 1e-6);
  p.logprobs.reset();  // not asked for: not computed (a pass of exp over the vocabulary saved)
  SampleResult none = sampler.Sample(logits, p, {}, 9);
  EXPECT_EQ(none.token, s.token);
  EXPECT_EQ(none.logprob, 0.0f);
  EXPECT_TRUE(none.top_logprobs.empty());
}

// The top logprobs at real vocabulary sizes (the floor-and-gather path for small k, the
// partial sort for large k or a +inf logit) against a plain log-softmax in double and a full
// sort by (logit descending, id ascending): the same tokens, logprobs within float rounding;
// on tied, signed-zero, NaN and -inf logits.
TEST(SamplerTest, TopLogprobsMatchAPlainSortAtVocabularySizes) {
  std::mt19937 rng(5);
  for (int32_t vocab : {32000, 151936}) {
    Sampler sampler(vocab);
    for (int shape = 0; shape < 5; ++shape) {
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits(vocab);
      for (float& l : logits) {
        l = normal(rng);
        const uint32_t r = rng() % 32;
        if (shape == 1) l = std::round(l * 2.0f) * 0.5f;  // many ties
        if (shape == 2 && r == 0) l = std::numeric_limits<float>::quiet_NaN();
        if (shape == 2 && r == 1) l = -kInf;
        if (shape == 3) l = r < 16 ? -0.0f : 0.0f;  // all tied, signed zeros
        if (shape == 4 && r == 0) l = -kInf;
      }
      if (shape == 4) logits[vocab / 2] = kInf;  // the partial sort's case
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      auto key = [&](int32_t t) { return std::isnan(logits[t]) ? -kInf : logits[t]; };
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return key(a) > key(b) || (key(a) == key(b) && a < b);
      });
      double top = -kInf, sum = 0.0;
      for (int32_t t = 0; t < vocab; ++t) top = std::max(top, static_cast<double>(key(t)));
      for (int32_t t = 0; t < vocab; ++t) sum += std::exp(key(t) - top);
      const double lse = std::isfinite(top) ? top + std::log(sum) : top;
      for (int k : {1, 5, 20, 500}) {
        SamplingParams p = Params(0.0f);
        p.logprobs = k;
        const SampleResult r = sampler.Sample(logits, p, {}, 0);
        ASSERT_EQ(r.top_logprobs.size(), static_cast<size_t>(k));
        for (int i = 0; i < k; ++i) {
          const int32_t want = order[i];
          ASSERT_EQ(r.top_logprobs[i].token, want) << "vocab " << vocab << " shape " << shape
                                                   << " k " << k << " rank " << i;
          const float logprob = static_cast<float>(key(want) - lse);
          if (std::isfinite(logprob)) {
            EXPECT_NEAR(r.top_logprobs[i].logprob, logprob,
                        1e-6f * std::max(1.0f, std::abs(logprob)));
          } else {
            EXPECT_TRUE(std::isnan(r.top_logprobs[i].logprob) == std::isnan(logprob));
          }
        }
      }
    }
  }
}

// The vocabulary-sized sort (radix, with skipped passes) orders exactly as std::sort by
// (logit descending, token ascending): a 32000-token vocabulary with many ties, +0 / -0,
// -inf and NaN (dropped), and logits in a narrow range (top digits all equal) or a wide one.
TEST(SamplerTest, LargeVocabularyOrderEqualsComparisonSort) {
  constexpr int32_t kVocab = 32000;
  Sampler sampler(kVocab);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<float> logits(kVocab);
    std::normal_distribution<float> normal(0.0f, trial % 2 ? 30.0f : 0.01f);
    for (float& l : logits) l = normal(rng);
    for (int i = 0; i < 2000; ++i) logits[rng() % kVocab] = logits[rng() % kVocab];  // ties
    logits[rng() % kVocab] = 0.0f;
    logits[rng() % kVocab] = -0.0f;
    logits[rng() % kVocab] = -kInf;
    logits[rng() % kVocab] = std::nanf("");
    std::vector<std::pair<float, int32_t>> want;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (std::isfinite(logits[t])) want.push_back({logits[t], t});
    }
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    std::span<const Candidate> dist = sampler.Distribution(logits, Params(1.0f), {});
    ASSERT_EQ(dist.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(dist[i].token, want[i].second) << "trial " << trial << " rank " << i;
      ASSERT_EQ(dist[i].logit, want[i].first);
    }
  }
}

TEST(RngTest, UniformIsPureAndInRange) {
  double sum = 0.0;
  for (int64_t pos = 0; pos < 100000; ++pos) {
    double u = UniformDouble(77, pos);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  EXPECT_EQ(UniformDouble(1, 2), UniformDouble(1, 2));
  EXPECT_NE(UniformDouble(1, 2), UniformDouble(2, 1));
  EXPECT_NE(RandomBits(0, 0), RandomBits(0, 1));
}

TEST(RngTest, ResolveSeed) {
  EXPECT_EQ(ResolveSeed(123, "req-1"), 123u);
  EXPECT_EQ(ResolveSeed(std::nullopt, "req-1"), ResolveSeed(std::nullopt, "req-1"));
  EXPECT_NE(ResolveSeed(std::nullopt, "req-1"), ResolveSeed(std::nullopt, "req-2"));
}

TEST(SamplingParamsTest, ValidateRejectsOutOfRange) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  auto bad = [](auto mutate, const char* field) {
    SamplingParams p;
    mutate(p);
    Status s = p.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  bad([](SamplingParams& p) { p.min_p = 1.1f; }, "min_p");
  bad([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty");
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  bad([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  bad([](SamplingParams& p) { p.stop_token_ids = {3, -1}; }, "stop_token_ids");
  SamplingParams ok;
  ok.temperature = 0.0f;
  ok.top_k = -1;
  ok.logprobs = 20;
  EXPECT_TRUE(ok.Validate().ok());
}

TEST(SamplingParamsTest, IsStopToken) {
  SamplingParams p;
  p.stop_token_ids = {7};
  p.max_tokens = 3;
  EXPECT_FALSE(IsStopToken(p, 5, 2));
  EXPECT_TRUE(IsStopToken(p, 2, 2));  // EOS
  EXPECT_TRUE(IsStopToken(p, 7, 2));  // a stop token id
  EXPECT_FALSE(IsStopToken(p, 5, std::nullopt));
  p.ignore_eos = true;
  EXPECT_FALSE(IsStopToken(p, 2, 2));
  EXPECT_TRUE(IsStopToken(p, 7, 2));
}

}  // namespace
}  // namespace kvserve::sampling
