#include "sampling/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "sampling/rng.h"

namespace kvserve::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN sorts and sums as -inf.
float Key(float logit) { return std::isnan(logit) ? kNegInf : logit; }

// The fixed order of candidates: logit descending, ties by token id ascending.
// A function object rather than a function pointer, so std::sort / nth_element inline the
// comparison (sorting the whole vocabulary is the sampler's main cost).
constexpr auto MoreLikely = [](const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
};

// Sort key of a finite logit: ascending key = descending logit. -0 and +0 get the same key
// (MoreLikely treats them as equal). Example: 2.0f -> ~(0x40000000 | 0x80000000).
uint32_t DescendingKey(float logit) {
  uint32_t u;
  const float l = logit == 0.0f ? 0.0f : logit;
  std::memcpy(&u, &l, 4);
  const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ascending;
}

// Sorts finite candidates by MoreLikely. `c` arrives in increasing token order, so a stable
// LSD radix sort on the logit key alone breaks ties by token id exactly as MoreLikely does;
// MoreLikely is a strict total order, so the result equals std::sort's. The sort moves 8-byte
// (key << 32 | token) words, 11 + 11 + 10 key bits per pass, with the three histograms from
// one pass; a pass whose digit is the same for every key (common for the top bits) is
// skipped. note: every candidate's logit is logits[token].
void SortMoreLikely(std::span<const float> logits, std::vector<Candidate>& c,
                    std::vector<uint64_t>& keys, std::vector<uint64_t>& buffer) {
  if (c.size() < 512 || !std::is_sorted(c.begin(), c.end(), [](const auto& a, const auto& b) {
        return a.token < b.token;
      })) {
    std::sort(c.begin(), c.end(), MoreLikely);
    return;
  }
  const size_t n = c.size();
  keys.resize(n);
  buffer.resize(n);
  constexpr int kShift[3] = {32, 43, 54};
  constexpr uint32_t kMask[3] = {0x7FF, 0x7FF, 0x3FF};
  std::array<std::array<uint32_t, 2049>, 3> count{};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t k = (static_cast<uint64_t>(DescendingKey(c[i].logit)) << 32) |
                       static_cast<uint32_t>(c[i].token);
    keys[i] = k;
    for (int p = 0; p < 3; ++p) ++count[p][((k >> kShift[p]) & kMask[p]) + 1];
  }
  for (int p = 0; p < 3; ++p) {
    if (count[p][((keys[0] >> kShift[p]) & kMask[p]) + 1] == n) continue;  // one digit
    for (uint32_t b = 0; b < kMask[p] + 1; ++b) count[p][b + 1] += count[p][b];
    for (uint64_t k : keys) buffer[count[p][(k >> kShift[p]) & kMask[p]]++] = k;
    keys.swap(buffer);
  }
  for (size_t i = 0; i < n; ++i) {
    const auto token = static_cast<int32_t>(keys[i] & 0xFFFFFFFFu);
    c[i] = {token, logits[token], 0.0};
  }
}

// Index of the largest logit, ties to the lowest id; NaN never wins; 0 when all are -inf/NaN.
int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_logit = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_logit) {
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

Sampler::Sampler(int32_t vocab_size)
    : vocab_size_(vocab_size),
      logits_(vocab_size),
      token_counts_(vocab_size, 0),
      seen_(vocab_size, 0),
      order_(vocab_size) {
  CHECK_GT(vocab_size, 0);
  touched_.reserve(vocab_size);
  candidates_.reserve(vocab_size);
}

void Sampler::ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                             const TokenHistory& history) {
  CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_size_);
  touched_.clear();
  auto mark = [&](int32_t t) {
    CHECK(t >= 0 && t < vocab_size_) << "token id " << t << " outside the vocabulary";
    if (seen_[t] == 0) {
      seen_[t] = 1;
      touched_.push_back(t);
    }
  };
  for (int32_t t : history.prompt) mark(t);
  for (int32_t t : history.generated) {
    mark(t);
    ++token_counts_[t];
  }
  const float rep = params.repetition_penalty;
  for (int32_t t : touched_) {
    float& l = logits[t];
    if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
    const int32_t count = token_counts_[t];
    l -= params.frequency_penalty * static_cast<float>(count);
    if (count > 0) l -= params.presence_penalty;
    seen_[t] = 0;
    token_counts_[t] = 0;
  }
  touched_.clear();
}

// Fills candidates_ from logits_ (already penalised and scaled): the finite logits that pass
// min-p and top-k, sorted by MoreLikely, with probs normalised; then applies top-p.
void Sampler::FilterAndSort(const SamplingParams& params) {
  candidates_.clear();
  float max_logit = kNegInf;
  for (float l : logits_) {
    if (std::isfinite(l) && l > max_logit) max_logit = l;
  }
  // min-p keeps p_i >= min_p * p_max, i.e. exp(l_i - l_max) >= min_p.
  const bool use_min_p = params.min_p > 0.0f;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float l = logits_[i];
    if (!std::isfinite(l)) continue;
    if (use_min_p && std::exp(static_cast<double>(l) - max_logit) < params.min_p) continue;
    candidates_.push_back({i, l, 0.0});
  }
  if (candidates_.empty()) {  // nothing finite: fall back to the argmax (+inf or token 0)
    const int32_t t = Argmax(logits_);
    candidates_.push_back({t, logits_[t], 1.0});
    return;
  }
  const size_t k = params.top_k > 0 ? static_cast<size_t>(params.top_k) : candidates_.size();
  if (k < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.end(),
                     MoreLikely);
    candidates_.resize(k);
  }
  SortMoreLikely(logits_, candidates_, sort_keys_, sort_buffer_);
  Normalise(candidates_.size());
  if (params.top_p < 1.0f) {
    // Keep tokens while the mass before them is below top_p. Example: probs 0.5 0.3 0.2,
    // top_p 0.75: masses before are 0, 0.5, 0.8 -> keep the first two.
    double mass_before = 0.0;
    size_t keep = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (mass_before >= params.top_p) {
        keep = i;
        break;
      }
      mass_before += candidates_[i].prob;
    }
    Normalise(keep);
  }
}

// Keeps the first `count` candidates and sets their probs to softmax of their logits, summed
// in candidate order. note: candidates_ is sorted, so candidates_[0] holds the max logit.
void Sampler::Normalise(size_t count) {
  candidates_.resize(count);
  const double max_logit = candidates_[0].logit;
  double sum = 0.0;
  for (Candidate& c : candidates_) {
    c.prob = std::exp(static_cast<double>(c.logit) - max_logit);
    sum += c.prob;
  }
  for (Candidate& c : candidates_) c.prob /= sum;
}

std::span<const Candidate> Sampler::Distribution(std::span<const float> logits,
                                                 const SamplingParams& params,
                                                 const TokenHistory& history) {
  CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_size_);
  std::copy(logits.begin(), logits.end(), logits_.begin());
  if (params.HasPenalties()) ApplyPenalties(logits_, params, history);
  if (params.IsGreedy()) {
    const int32_t t = Argmax(logits_);
    candidates_.clear();
    candidates_.push_back({t, logits_[t], 1.0});
    return candidates_;
  }
  for (float& l : logits_) l /= params.temperature;
  FilterAndSort(params);
  return candidates_;
}

SampleResult Sampler::Sample(std::span<const float> logits, const SamplingParams& params,
                             const TokenHistory& history, uint64_t seed) {
  std::span<const Candidate> dist = Distribution(logits, params, history);
  SampleResult result;
  result.token = dist.back().token;
  if (dist.size() > 1) {
    // Inverse CDF over the fixed candidate order: the first token whose cumulative prob
    // exceeds u * total. Example: probs 0.5 0.3 0.2, u = 0.6 -> cumulative 0.5, 0.8 -> 2nd.
    double total = 0.0;
    for (const Candidate& c : dist) total += c.prob;
    const double target = UniformDouble(seed, history.NumTokens()) * total;
    double cumulative = 0.0;
    for (const Candidate& c : dist) {
      cumulative += c.prob;
      if (target < cumulative) {
        result.token = c.token;
        break;
      }
    }
  }
  // Logprobs cost a pass of exp over the vocabulary: only when asked for (vLLM: logprobs None
  // computes none).
  if (params.logprobs) FillLogprobs(logits, params, result);
  return result;
}

// Raw logprobs: log_softmax of the unprocessed logits, summed in token-id order.
void Sampler::FillLogprobs(std::span<const float> logits, const SamplingParams& params,
                           SampleResult& result) {
  double max_logit = kNegInf;
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(Key(l)));
  double log_sum_exp = max_logit;
  if (std::isfinite(max_logit)) {
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(Key(l)) - max_logit);
    log_sum_exp = max_logit + std::log(sum);
  }
  auto logprob = [&](int32_t t) {
    return static_cast<float>(static_cast<double>(Key(logits[t])) - log_sum_exp);
  };
  result.logprob = logprob(result.token);
  const int32_t k = std::min(params.logprobs.value_or(0), vocab_size_);
  if (k <= 0) return;
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
    const float la = Key(logits[a]);
    const float lb = Key(logits[b]);
    return la > lb || (la == lb && a < b);
  });
  result.top_logprobs.reserve(k);
  for (int32_t i = 0; i < k; ++i) result.top_logprobs.push_back({order_[i], logprob(order_[i])});
}

}  // namespace kvserve::sampling
