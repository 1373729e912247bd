// Sampler's fast path: the token of the full pipeline (sampler.cc: sort every surviving token,
// normalise in that order, top-p, inverse-CDF draw) without sorting the vocabulary.
//
// The survivors (finite, passing min-p) are put in buckets by their distance below the largest
// logit, 1/64 nat wide: bucket order is the candidate order at a coarse grain (ties and -0/+0
// share a bucket), so only the buckets a result depends on need sorting:
// - top-k (k < survivors): the buckets holding the first k survivors are sorted; the full
//   pipeline then runs on those k candidates as it would (min-p was already applied exactly).
// - otherwise exp(l - max) of every survivor (ExpBelowMax, vectorised, within 2^-40 of
//   std::exp's), summed per bucket; the draw's (or top-p's) crossing point is found in the
//   bucket sums, and only its bucket is sorted.
// The full pipeline sums std::exp's values in candidate order, this path approximations in
// another order: the fractions compared with the target differ by at most
// 16 (n + buckets + 2) 2^-53 + 4 * 2^-40 (recursive summation of n positive terms is within
// (n - 1) 2^-53 of the exact sum, relative; the full pipeline rounds three times over n terms,
// this path twice over n + buckets; each exp is within 2^-40; the factors leave 2x to spare).
// A crossing farther than that from the target on both sides is the full pipeline's crossing;
// one closer (about 1 draw in 10^4 on a flat 151,936-token distribution, far rarer on a
// peaked one) returns nullopt and the caller runs the full pipeline. top-p's kept prefix is
// then normalised with std::exp, as the full pipeline does.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sampling/clones.h"
#include "sampling/exp_below_max.h"
#include "sampling/sampler.h"
#include "sampling/scan.h"
#include "sampling/sort_key.h"

namespace kvserve::sampling {
namespace {

constexpr int32_t kBuckets = 4096;
constexpr float kBucketsPerNat = 64.0f;  // distances of 64 nats and more share the last bucket
constexpr uint16_t kNoBucket = 0xFFFF;
constexpr uint16_t kMinPBand = 0xFFFE;  // BucketIds: min-p undecided
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kUnitRoundoff = 0x1.0p-53;

// The bucket of a finite logit <= max_logit: monotone in the logit (a larger one never lands
// in a later bucket); ties, -0 and +0 share one.
inline uint16_t BucketOf(float logit, float max_logit) {
  const float d = (max_logit - logit) * kBucketsPerNat;
  return d < static_cast<float>(kBuckets - 1) ? static_cast<uint16_t>(d) : kBuckets - 1;
}

// bucket[i] = BucketOf(logits[i]) for finite logits that pass min-p (l - max > log_min_p +
// 1e-6), kMinPBand within 1e-6 of log(min_p) (the caller decides), kNoBucket otherwise.
// Branch-free, so it vectorises.
KVSERVE_SAMPLING_CLONES void BucketIds(std::span<const float> logits, float max_logit,
                                      bool use_min_p, double log_min_p, uint16_t* bucket) {
  const double keep_above = log_min_p + 1e-6;
  const double drop_below = log_min_p - 1e-6;
  const float* in = logits.data();
  const size_t n = logits.size();
  if (!use_min_p) {  // no doubles: twice the lanes
    for (size_t i = 0; i < n; ++i) {
      const float l = in[i];
      const bool finite = l > -kInf && l < kInf;
      bucket[i] = finite ? BucketOf(l, max_logit) : kNoBucket;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float l = in[i];
    const bool finite = l > -kInf && l < kInf;
    const double x = static_cast<double>(l) - max_logit;
    const uint16_t b = BucketOf(finite ? l : max_logit, max_logit);
    const uint16_t band = x >= drop_below ? kMinPBand : kNoBucket;
    bucket[i] = !finite ? kNoBucket : x > keep_above ? b : band;
  }
}

}  // namespace

int64_t Sampler::BucketSurvivors(const SamplingParams& params, float max_logit, bool with_mass) {
  // min-p keeps exp(l - max) >= min_p (as FilterAndSort computes it). exp and log are accurate
  // to about an ulp, so l - max more than 1e-6 from log(min_p) decides it; closer, the exp is
  // computed as FilterAndSort does.
  const bool use_min_p = params.min_p > 0.0f;
  const double log_min_p = use_min_p ? std::log(static_cast<double>(params.min_p)) : 0.0;
  BucketIds(logits_, max_logit, use_min_p, log_min_p, bucket_.data());
  if (with_mass) ExpBelowMax(logits_, max_logit, exp_.data());
  bucket_count_.assign(kBuckets, 0);
  bucket_mass_.assign(kBuckets, 0.0);
  int64_t* count = bucket_count_.data();
  double* mass = bucket_mass_.data();
  const double* exps = exp_.data();
  uint16_t* bucket = bucket_.data();
  int64_t survivors = 0;
  if (!use_min_p && with_mass) {  // the common case (temperature, top-p): no min-p band
    for (int32_t i = 0; i < vocab_size_; ++i) {
      const uint16_t b = bucket[i];
      if (b == kNoBucket) continue;
      ++count[b];
      mass[b] += exps[i];
    }
    for (int32_t b = 0; b < kBuckets; ++b) survivors += count[b];
    return survivors;
  }
  for (int32_t i = 0; i < vocab_size_; ++i) {
    uint16_t b = bucket[i];
    if (b == kNoBucket) continue;
    if (b == kMinPBand) {
      const double x = static_cast<double>(logits_[i]) - max_logit;
      b = std::exp(x) < params.min_p ? kNoBucket : BucketOf(logits_[i], max_logit);
      bucket[i] = b;
      if (b == kNoBucket) continue;
    }
    ++count[b];
    if (with_mass) mass[b] += exps[i];
    ++survivors;
  }
  return survivors;
}

void Sampler::GatherSorted(int32_t last_bucket, bool only_last) {
  const int32_t first = only_last ? last_bucket : 0;
  int64_t total = 0;
  for (int32_t b = first; b <= last_bucket; ++b) total += bucket_count_[b];
  const uint16_t* bucket = bucket_.data();
  const float* logits = logits_.data();
  if (total * 8 < vocab_size_) {  // sparse: the few in range found 32 ids at a time
    in_range_.clear();
    IndicesInRange(bucket_, static_cast<uint16_t>(first), static_cast<uint16_t>(last_bucket),
                   in_range_);
    sort_keys_.clear();
    for (int32_t i : in_range_) sort_keys_.push_back(SortWord(logits[i], i));
    SortWords(sort_keys_, sort_buffer_);
    return;
  }
  // Dense: branch-free (the test is not predictable); every word is written, the next slot
  // taken only by those in range; one spare slot for the writes after the last.
  sort_keys_.resize(static_cast<size_t>(total) + 1);
  uint64_t* out = sort_keys_.data();
  const auto span = static_cast<uint32_t>(last_bucket - first);
  size_t n = 0;
  for (int32_t i = 0; i < vocab_size_ && n < static_cast<size_t>(total); ++i) {
    out[n] = SortWord(logits[i], i);
    n += static_cast<uint32_t>(bucket[i] - first) <= span ? 1 : 0;
  }
  sort_keys_.resize(static_cast<size_t>(total));
  SortWords(sort_keys_, sort_buffer_);
}

void Sampler::ComputeMass(float max_logit) {
  ExpBelowMax(logits_, max_logit, exp_.data());
  bucket_mass_.assign(kBuckets, 0.0);
  const uint16_t* bucket = bucket_.data();
  const double* exps = exp_.data();
  double* mass = bucket_mass_.data();
  for (int32_t i = 0; i < vocab_size_; ++i) {
    if (bucket[i] != kNoBucket) mass[bucket[i]] += exps[i];
  }
}

std::optional<Sampler::Crossing> Sampler::FindCrossing(double fraction, int64_t survivors) {
  double total = 0.0;
  for (double m : bucket_mass_) total += m;
  const double margin = 16.0 * static_cast<double>(survivors + kBuckets + 2) * kUnitRoundoff +
                        4.0 * kExpBelowMaxError;
  const double goal = fraction * total;
  double before = 0.0;
  int64_t rank_before = 0;
  int32_t b = 0;
  for (; b < kBuckets && before + bucket_mass_[b] <= goal; ++b) {
    before += bucket_mass_[b];
    rank_before += bucket_count_[b];
  }
  if (b == kBuckets) return std::nullopt;
  GatherSorted(b, /*only_last=*/true);
  double run = before;
  for (size_t j = 0; j < sort_keys_.size(); ++j) {
    const double prev = run;
    run += exp_[TokenOf(sort_keys_[j])];
    if (run <= goal) continue;
    const int64_t rank = rank_before + static_cast<int64_t>(j);
    // The full pipeline's cumulative sums are within margin / 2 of run / total and
    // prev / total: clear of the target by more, they cross it at the same candidate.
    const bool clear_above = run / total - fraction > margin;
    const bool clear_below = rank == 0 || fraction - prev / total > margin;
    if (!clear_above || !clear_below) return std::nullopt;
    return Crossing{rank, b, TokenOf(sort_keys_[j])};
  }
  return std::nullopt;  // the bucket's sum rounded differently from its elements': rare
}

void Sampler::FinishOnPrefix(int64_t count, int32_t last_bucket, const SamplingParams& params,
                             bool cut) {
  GatherSorted(last_bucket, /*only_last=*/false);
  CandidatesFromKeys(static_cast<size_t>(count));
  if (cut) {
    NormaliseAndCut(params);
  } else {
    Normalise(candidates_.size());
  }
}

std::optional<int32_t> Sampler::FastDraw(const SamplingParams& params, double u) {
  const float max_logit = MaxFinite(logits_);
  if (max_logit == -kInf) return std::nullopt;  // nothing finite: FilterAndSort's fallback
  const bool top_k_may_cut = params.top_k > 0 && params.top_k < vocab_size_;
  const int64_t survivors = BucketSurvivors(params, max_logit, !top_k_may_cut);
  if (top_k_may_cut && params.top_k < survivors) {
    // The first k survivors, then the full pipeline's steps on them.
    int32_t last = 0;
    int64_t seen = 0;
    while (seen + bucket_count_[last] < params.top_k) seen += bucket_count_[last++];
    FinishOnPrefix(params.top_k, last, params, /*cut=*/true);
    return Draw(u);
  }
  if (top_k_may_cut) ComputeMass(max_logit);  // top-k cut nothing: the mass after all
  if (params.top_p < 1.0f) {
    // The full pipeline keeps candidates while the mass before them is below top_p: up to
    // and including the one at which the mass first reaches it. Then it renormalises those.
    const std::optional<Crossing> cut = FindCrossing(params.top_p, survivors);
    if (!cut) return std::nullopt;
    FinishOnPrefix(cut->rank + 1, cut->bucket, params, /*cut=*/false);
    return Draw(u);
  }
  const std::optional<Crossing> drawn = FindCrossing(u, survivors);
  if (!drawn) return std::nullopt;
  return drawn->token;
}

}  // namespace kvserve::sampling
