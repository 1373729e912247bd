// Sample's fast path (sampler_fast.cc) against the full sort written plainly
// (reference_sampler.h): the same token for the same logits, options and seed, for every mix of
// temperature, top-k, top-p, min-p and penalties, on logits with ties, signed zeros, non-finite
// values, flat and peaked shapes; and at cumulative boundaries placed within rounding of the
// draw, where the fast path must decline and the full sort answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "sampling/exp_below_max.h"
#include "sampling/reference_sampler.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

namespace kvserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kShapes = 8;

std::vector<float> MakeLogits(int shape, int32_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, shape == 1 ? 8.0f : 2.0f);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& l : logits) {
    l = normal(rng);
    const uint32_t r = rng() % 64;
    switch (shape) {
      case 2: l = uniform(rng); break;                       // flat
      case 3: l = std::round(l * 4.0f) * 0.25f; break;       // many ties
      case 4: l = r == 0 ? -kInf : 0.5f; break;              // all tied
      case 5:                                                // specials
        if (r == 0) l = std::numeric_limits<float>::quiet_NaN();
        if (r == 1) l = -kInf;
        if (r == 2) l = -0.0f;
        if (r == 3) l = 0.0f;
        break;
      case 6: l *= r < 32 ? 1e30f : 1e-30f; break;           // huge and tiny magnitudes
      default: break;
    }
  }
  if (shape == 7) logits[rng() % vocab] = 30.0f;  // one token holds nearly all the mass
  return logits;
}

// Repetition, frequency, presence penalties as vLLM defines them, written plainly.
std::vector<float> Penalised(std::vector<float> logits, const SamplingParams& p,
                             const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& generated) {
  std::vector<int> count(logits.size(), 0);
  std::vector<bool> seen(logits.size(), false);
  for (int32_t t : prompt) seen[t] = true;
  for (int32_t t : generated) seen[t] = true, ++count[t];
  for (size_t t = 0; t < logits.size(); ++t) {
    if (!seen[t]) continue;
    float& l = logits[t];
    if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.frequency_penalty * static_cast<float>(count[t]);
    if (count[t] > 0) l -= p.presence_penalty;
  }
  return logits;
}

bool AnyFinite(const std::vector<float>& logits) {
  for (float l : logits) {
    if (std::isfinite(l)) return true;
  }
  return false;
}

// Every option mix on every shape, `seeds` draws each; returns the number of draws.
int64_t CheckAllMixes(int32_t vocab, int seeds, const std::vector<int>& shapes, Sampler& sampler) {
  std::mt19937 rng(vocab);
  std::vector<int32_t> prompt(16), generated(8);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  for (int32_t& t : generated) t = static_cast<int32_t>(rng() % vocab);
  const int64_t position = static_cast<int64_t>(prompt.size() + generated.size());
  int64_t draws = 0;
  for (int shape : shapes) {
    const std::vector<float> logits = MakeLogits(shape, vocab, rng);
    for (bool penalties : {false, true}) {
      SamplingParams base;
      if (penalties) {
        base.repetition_penalty = 1.3f, base.frequency_penalty = 0.4f, base.presence_penalty = 0.2f;
      }
      const std::vector<float> penalised = Penalised(logits, base, prompt, generated);
      if (!AnyFinite(penalised)) continue;
      for (float temperature : {0.0f, 0.3f, 1.0f, 1.7f}) {
        for (int32_t top_k : {0, -1, 1, 7, 50, vocab / 3, vocab + 1}) {
          for (float top_p : {1.0f, 0.95f, 0.6f, 0.1f}) {
            for (float min_p : {0.0f, 0.05f, 0.5f}) {
              SamplingParams p = base;
              p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
              SamplingParams plain = p;  // the reference gets the penalties applied already
              plain.repetition_penalty = 1.0f, plain.frequency_penalty = 0.0f;
              plain.presence_penalty = 0.0f;
              const Reference want = ReferenceDistribution(penalised, plain);
              for (int s = 0; s < seeds; ++s) {
                const uint64_t seed = rng();
                const int32_t got = sampler.Sample(logits, p, {prompt, generated}, seed).token;
                const int32_t expected = ReferenceToken(want, seed, position);
                if (got != expected) {
                  ADD_FAILURE() << "token " << got << " instead of " << expected << ": shape "
                                << shape << " penalties " << penalties << " T " << temperature
                                << " top_k " << top_k << " top_p " << top_p << " min_p "
                                << min_p << " seed " << seed;
                  return draws;
                }
                ++draws;
              }
            }
          }
        }
      }
    }
  }
  return draws;
}

TEST(SamplerFastPathTest, SameTokenAsFullSortForEveryOptionMix) {
  constexpr int32_t kVocab = 3000;
  Sampler sampler(kVocab);
  std::vector<int> shapes(kShapes);
  for (int s = 0; s < kShapes; ++s) shapes[s] = s;
  const int64_t draws = CheckAllMixes(kVocab, 4, shapes, sampler);
  // The fast path answered nearly all of them (declining is for draws within rounding).
  EXPECT_LT(sampler.fast_path_declines() * 100, draws) << sampler.fast_path_declines();
}

TEST(SamplerFastPathTest, SameTokenAsFullSortAtQwenVocabulary) {
  constexpr int32_t kVocab = 151936;
  Sampler sampler(kVocab);
  std::mt19937 rng(3);
  for (int shape : {0, 2, 3, 7}) {
    const std::vector<float> logits = MakeLogits(shape, kVocab, rng);
    for (int setting = 0; setting < 5; ++setting) {
      SamplingParams p;
      if (setting == 1) p.temperature = 0.7f;
      if (setting == 2) p.top_p = 0.9f, p.min_p = 0.01f;
      if (setting == 3) p.top_k = 40, p.top_p = 0.95f;
      if (setting == 4) p.top_p = 0.8f;
      const Reference want = ReferenceDistribution(logits, p);
      for (int64_t position = 0; position < 40; ++position) {
        const std::vector<int32_t> prompt(position, 1);
        ASSERT_EQ(sampler.Sample(logits, p, {prompt, {}}, 77).token,
                  ReferenceToken(want, 77, position))
            << "shape " << shape << " setting " << setting << " position " << position;
      }
    }
  }
  EXPECT_LT(sampler.fast_path_declines(), 8);
}

// Logits over `vocab` tokens (the rest -inf) whose first candidate's share of the mass is
// `share` to within ~1e-14: token 0 has logit 0, tokens 1 and 2 the rest of the mass, the
// third fine-tuning the second's float rounding.
std::vector<float> FirstShareIs(double share, int32_t vocab) {
  std::vector<float> logits(vocab, -kInf);
  logits[0] = 0.0f;
  const double rest = (1.0 - share) / share;  // the others' mass, token 0's being 1
  float a = static_cast<float>(std::log(rest));
  while (std::exp(static_cast<double>(a)) >= rest) a = std::nextafter(a, -kInf);
  logits[1] = a;
  logits[2] = static_cast<float>(std::log(rest - std::exp(static_cast<double>(a))));
  return logits;
}

TEST(SamplerFastPathTest, DeclinesAtBoundariesWithinRoundingAndStillMatches) {
  constexpr int32_t kVocab = 64;
  Sampler sampler(kVocab);
  int boundaries = 0;
  for (uint64_t seed = 0; boundaries < 50; ++seed) {
    const int64_t position = 3;
    const double u = UniformDouble(seed, position);
    if (u < 0.55 || u > 0.95) continue;  // token 0 first, tokens 1, 2 after it
    ++boundaries;
    const std::vector<float> logits = FirstShareIs(u, kVocab);
    SamplingParams p;
    const std::vector<int32_t> prompt(position, 7);
    ASSERT_EQ(sampler.Sample(logits, p, {prompt, {}}, seed).token,
              ReferenceToken(ReferenceDistribution(logits, p), seed, position))
        << "seed " << seed;
  }
  EXPECT_EQ(sampler.fast_path_declines(), boundaries);
  // top-p whose boundary falls at the first candidate's share.
  const int64_t before = sampler.fast_path_declines();
  for (float top_p : {0.6f, 0.7f, 0.8f, 0.9f}) {
    const std::vector<float> logits = FirstShareIs(top_p, kVocab);
    SamplingParams p;
    p.top_p = top_p;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      ASSERT_EQ(sampler.Sample(logits, p, {}, seed).token,
                ReferenceToken(ReferenceDistribution(logits, p), seed, 0))
          << "top_p " << top_p << " seed " << seed;
    }
  }
  EXPECT_EQ(sampler.fast_path_declines() - before, 80);
}

// Logits over `vocab` tokens whose top-p (p.top_p just below 1) keeps tokens 0, 1, 2 and part
// of a tail of equal small logits, with token 0's share of the kept mass `share` to within
// ~1e-13: token 1 holds most of the rest, token 2 fine-tunes it, and the tail's kept part is
// found by the reference (its mass moves token 1's, so until it settles).
std::vector<float> KeptFirstShareIs(double share, int32_t vocab, const SamplingParams& p) {
  const float tail_logit = static_cast<float>(std::log(1e-9));
  const double tail_mass = std::exp(static_cast<double>(tail_logit));
  std::vector<float> logits(vocab, tail_logit);
  logits[0] = 0.0f;
  size_t kept_tail = 0;
  for (int round = 0; round < 16; ++round) {
    const double rest = 1.0 / share - 1.0 - static_cast<double>(kept_tail) * tail_mass;
    float a = static_cast<float>(std::log(rest));
    while (rest - std::exp(static_cast<double>(a)) < 1e-7) a = std::nextafter(a, -kInf);
    logits[1] = a;
    logits[2] = static_cast<float>(std::log(rest - std::exp(static_cast<double>(a))));
    const size_t kept = ReferenceDistribution(logits, p).dist.size() - 3;
    if (kept == kept_tail) return logits;
    kept_tail = kept;
  }
  ADD_FAILURE() << "the kept tail did not settle";
  return logits;
}

// top-p's draw over the renormalised kept prefix (the fast path's second crossing) placed
// within rounding of a cumulative boundary: the fast path declines, the full sort answers.
TEST(SamplerFastPathTest, DeclinesAtBoundariesInsideTopPsKeptMass) {
  constexpr int32_t kVocab = 1024;
  Sampler sampler(kVocab);
  SamplingParams p;
  p.top_p = std::nextafter(1.0f, 0.0f);  // the cut falls inside the tail
  int boundaries = 0;
  for (uint64_t seed = 0; boundaries < 40; ++seed) {
    const int64_t position = 5;
    const double u = UniformDouble(seed, position);
    if (u < 0.55 || u > 0.95) continue;
    ++boundaries;
    const std::vector<float> logits = KeptFirstShareIs(u, kVocab, p);
    const Reference want = ReferenceDistribution(logits, p);
    ASSERT_GT(want.dist.size(), 3u);
    ASSERT_LT(want.dist.size(), static_cast<size_t>(kVocab)) << "top-p cut nothing";
    const std::vector<int32_t> prompt(position, 9);
    ASSERT_EQ(sampler.Sample(logits, p, {prompt, {}}, seed).token,
              ReferenceToken(want, seed, position))
        << "seed " << seed;
  }
  EXPECT_EQ(sampler.fast_path_declines(), boundaries);
  // The same logits with the draw away from the boundary: answered by the fast path.
  const std::vector<float> logits = KeptFirstShareIs(0.7, kVocab, p);
  const Reference want = ReferenceDistribution(logits, p);
  int away = 0;
  for (uint64_t seed = 0; away < 40; ++seed) {
    const double u = UniformDouble(seed, 0);
    if (std::abs(u - 0.7) < 0.01) continue;
    ++away;
    ASSERT_EQ(sampler.Sample(logits, p, {}, seed).token, ReferenceToken(want, seed, 0));
  }
  EXPECT_EQ(sampler.fast_path_declines(), boundaries) << "declined away from the boundary";
}


// The fast path's error budget assumes ExpBelowMax within kExpBelowMaxError of exp: measured
// here on this machine's SIMD target, with a factor of 16 to spare.
TEST(SamplerFastPathTest, ExpBelowMaxWithinItsBound) {
  std::mt19937 rng(9);
  std::vector<float> logits(100003);
  const float max = 3.5f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float scale = std::vector<float>{1e-6f, 0.5f, 4.0f, 40.0f, 700.0f}[i % 5];
    logits[i] = max - scale * std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  }
  logits[0] = max;
  logits[1] = max - 708.0f;
  logits[2] = max - 720.0f;  // below the range: 0
  logits[3] = -kInf;         // exp(-inf) = 0
  std::vector<double> got(logits.size());
  ExpBelowMax(logits, max, got.data());
  double worst = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double x = static_cast<double>(logits[i]) - max;
    const double want = std::exp(x);
    if (x < -708.0) {
      EXPECT_EQ(got[i], 0.0) << x;
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - want) / want);
  }
  EXPECT_EQ(got[0], 1.0);
  EXPECT_LT(worst, kExpBelowMaxError / 16) << worst;
  std::printf("ExpBelowMax: max relative difference from std::exp %.3g\n", worst);
}

}  // namespace
}  // namespace kvserve::sampling
