#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "sampling/exp_below_max.h"
#include "sampling/rng.h"
#include "sampling/scan.h"
#include "sampling/sort_key.h"

namespace kvserve::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN sorts and sums as -inf.
float Key(float logit) { return std::isnan(logit) ? kNegInf : logit; }

}  // namespace

Sampler::Sampler(int32_t vocab_size)
    : vocab_size_(vocab_size),
      logits_(vocab_size),
      token_counts_(vocab_size, 0),
      seen_(vocab_size, 0),
      order_(vocab_size),
      bucket_(vocab_size),
      exp_(vocab_size) {
  CHECK_GT(vocab_size, 0);
  touched_.reserve(vocab_size);
  candidates_.reserve(vocab_size);
  sort_keys_.reserve(vocab_size);
  sort_buffer_.reserve(vocab_size);
  in_range_.reserve(vocab_size);
  maxima_.reserve(static_cast<size_t>(vocab_size) / 64 + 32);
  cumulative_.resize(vocab_size);
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
  // The survivors as sort words (sort_key.h), straight from logits_: the candidates
  // are built once, in order, after the sort.
  // min-p keeps p_i >= min_p * p_max, i.e. exp(l_i - l_max) >= min_p.
  const bool use_min_p = params.min_p > 0.0f;
  sort_keys_.clear();
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float l = logits_[i];
    if (!std::isfinite(l)) continue;
    if (use_min_p && std::exp(static_cast<double>(l) - max_logit) < params.min_p) continue;
    sort_keys_.push_back(SortWord(l, i));
  }
  if (sort_keys_.empty()) {  // nothing finite: fall back to the argmax (+inf or token 0)
    const int32_t t = Argmax(logits_);
    candidates_.push_back({t, logits_[t], 1.0});
    return;
  }
  const size_t k = params.top_k > 0 ? static_cast<size_t>(params.top_k) : sort_keys_.size();
  if (k < sort_keys_.size()) {
    std::nth_element(sort_keys_.begin(), sort_keys_.begin() + k, sort_keys_.end());
    sort_keys_.resize(k);
    std::sort(sort_keys_.begin(), sort_keys_.end());
  } else {
    SortWords(sort_keys_, sort_buffer_);
  }
  CandidatesFromKeys(sort_keys_.size());
  NormaliseAndCut(params);
}

void Sampler::CandidatesFromKeys(size_t count) {
  candidates_.clear();
  for (size_t i = 0; i < count; ++i) {
    const int32_t token = TokenOf(sort_keys_[i]);
    candidates_.push_back({token, logits_[token], 0.0});
  }
}

// Normalises candidates_ (sorted, not empty), then applies top-p.
void Sampler::NormaliseAndCut(const SamplingParams& params) {
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
// in candidate order.
// note: candidates_ is sorted, so candidates_[0] holds the max logit.
void Sampler::Normalise(size_t count) {
  candidates_.resize(count);
  const double max_logit = candidates_[0].logit;
  double sum = 0.0;
  for (Candidate& c : candidates_) {
    c.prob = std::exp(static_cast<double>(c.logit) - max_logit);
    sum += c.prob;
  }
  // The running total of the probs in order rides along: two independent chains in one pass.
  // cumulative_[i] is what the draw's scan would add up to after candidate i.
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    candidates_[i].prob /= sum;
    total += candidates_[i].prob;
    cumulative_[i] = total;
  }
  prob_total_ = total;
}

std::optional<Candidate> Sampler::ScaleLogits(std::span<const float> logits,
                                              const SamplingParams& params,
                                              const TokenHistory& history) {
  CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_size_);
  if (!params.HasPenalties()) {  // no working copy to penalise: read the logits directly
    if (params.IsGreedy()) {
      const int32_t t = Argmax(logits);
      return Candidate{t, logits[t], 1.0};
    }
    DivideAndGroupMaxima(logits, params.temperature, logits_.data(), maxima_);
    return std::nullopt;
  }
  std::copy(logits.begin(), logits.end(), logits_.begin());
  ApplyPenalties(logits_, params, history);
  if (params.IsGreedy()) {
    const int32_t t = Argmax(logits_);
    return Candidate{t, logits_[t], 1.0};
  }
  DivideAndGroupMaxima(logits_, params.temperature, logits_.data(), maxima_);
  return std::nullopt;
}

std::span<const Candidate> Sampler::Distribution(std::span<const float> logits,
                                                 const SamplingParams& params,
                                                 const TokenHistory& history) {
  candidates_.clear();
  if (std::optional<Candidate> greedy = ScaleLogits(logits, params, history)) {
    candidates_.push_back(*greedy);
  } else {
    FilterAndSort(params);
  }
  return candidates_;
}

int32_t Sampler::Draw(double u) const {
  const std::span<const Candidate> dist = candidates_;
  if (dist.size() == 1) return dist[0].token;
  // Inverse CDF over the fixed candidate order: the first token whose cumulative prob
  // exceeds u * total. Example: probs 0.5 0.3 0.2, u = 0.6 -> cumulative 0.5, 0.8 -> 2nd.
  // prob_total_ and cumulative_: the probs summed in candidate order by the last Normalise,
  // so a binary search finds the token a scan would.
  const double target = u * prob_total_;
  const auto end = cumulative_.begin() + static_cast<int64_t>(dist.size());
  const auto it = std::upper_bound(cumulative_.begin(), end, target);
  return it != end ? dist[it - cumulative_.begin()].token : dist.back().token;
}

SampleResult Sampler::Sample(std::span<const float> logits, const SamplingParams& params,
                             const TokenHistory& history, uint64_t seed) {
  SampleResult result;
  if (std::optional<Candidate> greedy = ScaleLogits(logits, params, history)) {
    result.token = greedy->token;
  } else {
    const double u = UniformDouble(seed, history.NumTokens());
    // The fast path proves its token equals the full sort's, or declines (rarely).
    std::optional<int32_t> token = FastDraw(params, u);
    if (!token) {
      ++fast_path_declines_;
      FilterAndSort(params);
      token = Draw(u);
    }
    result.token = *token;
  }
  // Logprobs cost a pass of exp over the vocabulary: only when asked for (vLLM: logprobs None
  // computes none).
  if (params.logprobs) FillLogprobs(logits, params, result);
  return result;
}

// Raw logprobs: log_softmax of the unprocessed logits; the log-sum-exp from SumExpBelowMax (a
// fixed order, so the same value every time). The top ones: for a small k with a finite
// largest logit, SortLargestFinite; otherwise the whole vocabulary, partially sorted.
void Sampler::FillLogprobs(std::span<const float> logits, const SamplingParams& params,
                           SampleResult& result) {
  const float top = MaxNotNaN(logits);  // NaN counts as -inf
  double log_sum_exp = top;
  if (std::isfinite(top)) log_sum_exp = top + std::log(SumExpBelowMax(logits, top, exp_.data()));
  auto logprob = [&](int32_t t) {
    return static_cast<float>(static_cast<double>(Key(logits[t])) - log_sum_exp);
  };
  result.logprob = logprob(result.token);
  const int32_t k = std::min(params.logprobs.value_or(0), vocab_size_);
  if (k <= 0) return;
  result.top_logprobs.reserve(k);
  // No +inf (top is finite): the k most likely are the k largest finite logits when there are
  // k of them (-inf and NaN come last).
  if (std::isfinite(top) && FloorPays(k)) {
    GroupMaxima(logits, maxima_);
    if (SortLargestFinite(logits, k)) {
      for (uint64_t word : sort_keys_) {
        result.top_logprobs.push_back({TokenOf(word), logprob(TokenOf(word))});
      }
      return;
    }
  }
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
    const float la = Key(logits[a]);
    const float lb = Key(logits[b]);
    return la > lb || (la == lb && a < b);
  });
  for (int32_t i = 0; i < k; ++i) result.top_logprobs.push_back({order_[i], logprob(order_[i])});
}

}  // namespace kvserve::sampling
