// Sampler's fast path: the token of the full pipeline (sampler.cc: sort every surviving token,
// normalise in that order, top-p, inverse-CDF draw) without sorting the vocabulary.
//
// The survivors (finite, passing min-p) are put in buckets by their distance below the largest
// logit, 1/64 nat wide: bucket order is the candidate order at a coarse grain (ties and -0/+0
// share a bucket), so only the buckets a result depends on need sorting:
// - top-k (k < survivors): the buckets holding the first k survivors are sorted; the full
//   pipeline then runs on those k candidates as it would (min-p was already applied exactly).
// - otherwise exp(l - max) of every survivor (ExpBelowMax, vectorised, within 2^-40 of
//   std::exp's), summed per bucket; the draw's crossing point is found in the bucket sums, and
//   only its bucket is sorted. With top-p, two crossings: the cut (where the cumulative mass
//   first reaches top_p of the total), then the draw at u of the mass through the cut, which
//   is where the full pipeline's draw over the renormalised kept prefix lands.
// The full pipeline sums std::exp's values in candidate order, this path approximations in
// another order: the fractions compared with the target differ by at most
// 16 (n + buckets + 2) 2^-53 + 4 * 2^-40 (recursive summation of n positive terms is within
// (n - 1) 2^-53 of the exact sum, relative; the full pipeline rounds three times over n terms,
// this path twice over n + buckets; each exp is within 2^-40; the factors leave 2x to spare).
// The same holds for fractions of the kept prefix's mass: both sides' sums through a candidate
// and through the cut carry the relative errors above, so their ratio is within twice them of
// the exact ratio (the full pipeline's renormalising division and the draw's target one more
// rounding each), inside the same bound.
// A crossing farther than that from the target on both sides is the full pipeline's crossing;
// one closer (about 1 draw in 10^4 on a flat 151,936-token distribution, far rarer on a
// peaked one) returns nullopt and the caller runs the full pipeline.
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
constexpr int32_t kMassBlock = 2048;  // logits per block of BucketSurvivors' mass pass
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

// How far apart the full pipeline's cumulative fractions and this path's may be, with n
// survivors (the header's bound).
double CrossingMargin(int64_t survivors) {
  return 16.0 * static_cast<double>(survivors + kBuckets + 2) * kUnitRoundoff +
         4.0 * kExpBelowMaxError;
}

}  // namespace

int64_t Sampler::BucketSurvivors(const SamplingParams& params, float max_logit, bool with_mass) {
  // min-p keeps exp(l - max) >= min_p (as FilterAndSort computes it). exp and log are accurate
  // to about an ulp, so l - max more than 1e-6 from log(min_p) decides it; closer, the exp is
  // computed as FilterAndSort does.
  const bool use_min_p = params.min_p > 0.0f;
  const double log_min_p = use_min_p ? std::log(static_cast<double>(params.min_p)) : 0.0;
  bucket_mass_.assign(kBuckets, 0.0);
  double* mass = bucket_mass_.data();
  uint16_t* bucket = bucket_.data();
  if (!use_min_p && with_mass) {
    // The common case (temperature, top-p): no min-p band and no counts (FindCrossing needs
    // none). Block by block, so that the ids and exps are still in L1 when summed.
    counted_ = false;
    const std::span<const float> logits = logits_;
    int64_t survivors = 0;
    for (int32_t i0 = 0; i0 < vocab_size_; i0 += kMassBlock) {
      const int32_t len = std::min(kMassBlock, vocab_size_ - i0);
      BucketIds(logits.subspan(i0, len), max_logit, false, 0.0, bucket + i0);
      ExpBelowMax(logits.subspan(i0, len), max_logit, exp_.data() + i0);
      const double* exps = exp_.data();
      for (int32_t i = i0; i < i0 + len; ++i) {
        const uint16_t b = bucket[i];
        if (b == kNoBucket) continue;
        mass[b] += exps[i];
        ++survivors;
      }
    }
    return survivors;
  }
  counted_ = true;
  BucketIds(logits_, max_logit, use_min_p, log_min_p, bucket);
  if (with_mass) ExpBelowMax(logits_, max_logit, exp_.data());
  bucket_count_.assign(kBuckets, 0);
  int64_t* count = bucket_count_.data();
  const double* exps = exp_.data();
  int64_t survivors = 0;
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
  int64_t total = -1;  // unknown without counts: gathered as the sparse case
  if (counted_) {
    total = 0;
    for (int32_t b = first; b <= last_bucket; ++b) total += bucket_count_[b];
  }
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

std::optional<Sampler::Crossing> Sampler::FindCrossing(double goal, double scale,
                                                       double margin) {
  double before = 0.0;
  int32_t b = 0;
  for (; b < kBuckets && before + bucket_mass_[b] <= goal; ++b) before += bucket_mass_[b];
  if (b == kBuckets) return std::nullopt;
  GatherSorted(b, /*only_last=*/true);
  double run = before;
  for (size_t j = 0; j < sort_keys_.size(); ++j) {
    const double prev = run;
    run += exp_[TokenOf(sort_keys_[j])];
    if (run <= goal) continue;
    // The full pipeline's cumulative sums are within margin / 2 of run / scale and
    // prev / scale: clear of the goal by more, they cross it at the same candidate. The first
    // candidate of all (bucket 0 holds the largest logit) has nothing before it.
    const bool first = b == 0 && j == 0;
    const bool clear_above = (run - goal) / scale > margin;
    const bool clear_below = first || (goal - prev) / scale > margin;
    if (!clear_above || !clear_below) return std::nullopt;
    return Crossing{b, static_cast<int32_t>(j), TokenOf(sort_keys_[j]), run};
  }
  return std::nullopt;  // the bucket's sum rounded differently from its elements': rare
}

void Sampler::FinishOnPrefix(int64_t count, int32_t last_bucket, const SamplingParams& params) {
  GatherSorted(last_bucket, /*only_last=*/false);
  CandidatesFromKeys(static_cast<size_t>(count));
  NormaliseAndCut(params);
}

bool Sampler::SortLargestFinite(std::span<const float> values, int32_t k) {
  const float floor = KthLargestOf(maxima_, k);
  in_range_.clear();
  IndicesAtLeast(values, floor, in_range_);
  // Fewer than k: fewer than k are finite (the floor was -inf). A finite floor has at least k
  // at or above it.
  if (in_range_.size() < static_cast<size_t>(k)) return false;
  sort_keys_.clear();
  for (int32_t i : in_range_) sort_keys_.push_back(SortWord(values[i], i));
  std::nth_element(sort_keys_.begin(), sort_keys_.begin() + (k - 1), sort_keys_.end());
  sort_keys_.resize(static_cast<size_t>(k));
  std::sort(sort_keys_.begin(), sort_keys_.end());
  return true;
}

bool Sampler::TopKPrefix(const SamplingParams& params) {
  // Fewer than k finite: top-k cuts nothing, the mass path's case.
  if (!SortLargestFinite(logits_, params.top_k)) return false;
  CandidatesFromKeys(sort_keys_.size());
  NormaliseAndCut(params);
  return true;
}

std::optional<int32_t> Sampler::FastDraw(const SamplingParams& params, double u) {
  const float max_logit = MaxFinite(maxima_);  // ScaleLogits' group maxima
  if (max_logit == -kInf) return std::nullopt;  // nothing finite: FilterAndSort's fallback
  const bool top_k_may_cut = params.top_k > 0 && params.top_k < vocab_size_;
  // A small k without min-p: the k largest straight from a floor under the k-th, none
  // bucketed.
  if (top_k_may_cut && params.min_p <= 0.0f && FloorPays(params.top_k) && TopKPrefix(params)) {
    return Draw(u);
  }
  const int64_t survivors = BucketSurvivors(params, max_logit, !top_k_may_cut);
  if (top_k_may_cut && params.top_k < survivors) {
    // The first k survivors, then the full pipeline's steps on them.
    int32_t last = 0;
    int64_t seen = 0;
    while (seen + bucket_count_[last] < params.top_k) seen += bucket_count_[last++];
    FinishOnPrefix(params.top_k, last, params);
    return Draw(u);
  }
  if (top_k_may_cut) ComputeMass(max_logit);  // top-k cut nothing: the mass after all
  double total = 0.0;
  for (double m : bucket_mass_) total += m;
  // Both sides' cumulative sums, as fractions of the same mass, are within margin / 4 of the
  // exact ones (the header's bound); a prefix's fractions of itself too (the full pipeline
  // renormalises it: one more rounding per term, inside the factor 16).
  const double margin = CrossingMargin(survivors);
  if (params.top_p >= 1.0f) {
    const std::optional<Crossing> drawn = FindCrossing(u * total, total, margin);
    if (!drawn) return std::nullopt;
    return drawn->token;
  }
  // top-p: the full pipeline keeps candidates while the mass before them is below top_p, up to
  // and including the one at which the mass first reaches it; renormalises those and draws
  // over them: the first whose cumulative share of the kept mass passes u. So a second
  // crossing, at u of the kept mass, inside the kept prefix.
  const std::optional<Crossing> cut = FindCrossing(params.top_p * total, total, margin);
  if (!cut) return std::nullopt;
  const std::optional<Crossing> drawn = FindCrossing(u * cut->run, cut->run, margin);
  if (!drawn) return std::nullopt;
  const bool inside = drawn->bucket < cut->bucket ||
                      (drawn->bucket == cut->bucket && drawn->index <= cut->index);
  if (!inside) return std::nullopt;  // the bucket sums and the walk rounded apart: rare
  return drawn->token;
}

}  // namespace kvserve::sampling
