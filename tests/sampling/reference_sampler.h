// The sampler's pipeline (sampler.h) written plainly, for tests: one std::sort of every
// surviving token by (logit descending, token ascending), probs exp(l - max) / sum summed in
// that order, top-p, and a linear inverse-CDF scan. Shares no code with src/sampling beyond
// the types and the random stream.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampler.h"

namespace kvserve::sampling {

struct Reference {
  std::vector<Candidate> dist;
  double total = 0.0;  // the probs summed in order
};

// sampler.h's pipeline as first written: one std::sort by MoreLikely, probs exp(l - max) / sum
// in candidate order, top-p, and (in ReferenceToken) a linear inverse-CDF scan.
inline Reference ReferenceDistribution(std::vector<float> logits, const SamplingParams& params) {
  Reference r;
  if (params.IsGreedy()) {
    int32_t best = 0;
    float best_logit = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] > best_logit) best_logit = logits[i], best = static_cast<int32_t>(i);
    }
    r.dist.push_back({best, logits[best], 1.0});
    return r;
  }
  for (float& l : logits) l /= params.temperature;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) {
    if (std::isfinite(l) && l > max_logit) max_logit = l;
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!std::isfinite(l)) continue;
    if (params.min_p > 0 && std::exp(static_cast<double>(l) - max_logit) < params.min_p) continue;
    r.dist.push_back({static_cast<int32_t>(i), l, 0.0});
  }
  std::sort(r.dist.begin(), r.dist.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < r.dist.size()) {
    r.dist.resize(params.top_k);
  }
  auto normalise = [&](size_t count) {
    r.dist.resize(count);
    double sum = 0.0;
    for (Candidate& c : r.dist) sum += (c.prob = std::exp(static_cast<double>(c.logit) - r.dist[0].logit));
    r.total = 0.0;
    for (Candidate& c : r.dist) r.total += (c.prob /= sum);
  };
  normalise(r.dist.size());
  if (params.top_p < 1.0f) {
    double before = 0.0;
    size_t keep = r.dist.size();
    for (size_t i = 0; i < r.dist.size(); ++i) {
      if (before >= params.top_p) {
        keep = i;
        break;
      }
      before += r.dist[i].prob;
    }
    normalise(keep);
  }
  return r;
}

inline int32_t ReferenceToken(const Reference& r, uint64_t seed, int64_t position) {
  const double target = UniformDouble(seed, position) * r.total;
  double cumulative = 0.0;
  for (const Candidate& c : r.dist) {
    if (target < (cumulative += c.prob)) return c.token;
  }
  return r.dist.back().token;
}

}  // namespace kvserve::sampling
