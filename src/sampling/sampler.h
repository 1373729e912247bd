// Sampler: picks one token from one request's logits (vLLM semantics, sampling_params.h).
//
//   Sampler sampler(vocab_size);
//   uint64_t seed = ResolveSeed(params.seed, request_id);   // once per request
//   SampleResult r = sampler.Sample(logits, params, {prompt_ids, generated_ids}, seed);
//
// Pipeline: copy logits -> repetition, frequency, presence penalties -> greedy argmax, or
// temperature -> min-p -> top-k -> sort (logit descending, ties by token id) -> softmax ->
// top-p -> inverse-CDF draw with u = UniformDouble(seed, position).
// Sample takes a fast path (sampler_fast.cc) that sorts only the few candidates the result
// depends on and returns the token this full-sort pipeline would, bit for bit; it falls back
// to the full sort when it cannot prove that (a draw within ~1e-9 of a cumulative boundary).
// The token's position is history.NumTokens() (prompt + generated so far), so the draw depends
// only on (seed, position) and the logits: never on other requests or the order of calls.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"

namespace kvserve::sampling {

// The tokens before the one being sampled. Views; the caller owns the ids.
struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> generated;

  int64_t NumTokens() const { return static_cast<int64_t>(prompt.size() + generated.size()); }
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // natural log, of the raw model distribution
};

struct SampleResult {
  int32_t token = 0;
  // The chosen token's, of the raw model distribution; 0 when params.logprobs is nullopt
  // (not computed).
  float logprob = 0.0f;
  // The params.logprobs most likely tokens of the raw distribution, most likely first (ties by
  // token id); empty when logprobs is nullopt or 0.
  std::vector<TokenLogprob> top_logprobs;
};

// One token of the final distribution a draw is made from.
struct Candidate {
  int32_t token = 0;
  float logit = 0.0f;  // after penalties and temperature
  double prob = 0.0;   // normalised over the candidates that survived filtering
};

// Owns scratch buffers sized to the vocabulary, reused across calls: in steady state a call
// allocates nothing but SampleResult::top_logprobs. Not thread-safe: one Sampler per thread.
// Invariant: token_counts_ and seen_ are all zero between calls.
class Sampler {
 public:
  explicit Sampler(int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }

  // note: logits.size() == vocab_size(); params.Validate() is ok; history ids are in
  // [0, vocab_size). NaN logits count as -inf. When every logit is -inf, returns token 0.
  SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                      const TokenHistory& history, uint64_t seed);

  // The distribution Sample draws from, most likely first; greedy gives one candidate with
  // prob 1. Valid until the next call on this Sampler. For tests and debugging.
  std::span<const Candidate> Distribution(std::span<const float> logits,
                                          const SamplingParams& params,
                                          const TokenHistory& history);

  // How many Sample calls the fast path declined (the full sort ran instead). For tests and
  // benchmarks.
  int64_t fast_path_declines() const { return fast_path_declines_; }

  // Applies repetition, then frequency, then presence penalties to `logits` in place
  // (vocab_size values). Exposed for tests.
  void ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                      const TokenHistory& history);

 private:
  // Greedy: the argmax (after penalties). Otherwise fills logits_ with the penalised logits
  // divided by the temperature, and maxima_ with their group maxima, and returns nullopt.
  std::optional<Candidate> ScaleLogits(std::span<const float> logits,
                                       const SamplingParams& params, const TokenHistory& history);
  // The full pipeline on logits_: candidates_ = the sorted, normalised distribution.
  void FilterAndSort(const SamplingParams& params);
  // candidates_ = the tokens of sort_keys_[0, count), with their logits_, probs unset.
  void CandidatesFromKeys(size_t count);
  void NormaliseAndCut(const SamplingParams& params);
  void Normalise(size_t count);
  // The inverse-CDF draw over candidates_ (normalised by the last Normalise).
  int32_t Draw(double u) const;

  // The fast path (sampler_fast.cc): the token FilterAndSort + Draw(u) would give, or nullopt
  // when it cannot prove it. Uses logits_; clobbers candidates_ and the scratch below.
  std::optional<int32_t> FastDraw(const SamplingParams& params, double u);
  // top-k without min-p, for a k small beside the vocabulary: candidates_ = the k largest
  // finite logits_, sorted, normalised, then top-p, as FilterAndSort makes them. False
  // (candidates_ untouched) when fewer than k are finite: top-k cuts nothing.
  bool TopKPrefix(const SamplingParams& params);
  // Whether SortLargestFinite pays for k: few values above its floor (about vocabulary / 64
  // group maxima, a floor from at most a quarter of them).
  bool FloorPays(int32_t k) const { return int64_t{k} * 256 <= vocab_size_; }
  // sort_keys_ = the sort words of the k largest finite `values`, sorted: only those at or
  // above the floor the group maxima in maxima_ (of these values) give (scan.h: KthLargestOf)
  // are gathered. False when fewer than k are finite. Reorders maxima_; uses in_range_.
  bool SortLargestFinite(std::span<const float> values, int32_t k);
  // Buckets the finite logits_ that pass min-p by distance from `max_logit` (bucket_,
  // bucket_count_; with_mass: also exp_ and bucket_mass_ as ComputeMass, and without min-p no
  // bucket_count_: counted_ false); returns how many passed.
  int64_t BucketSurvivors(const SamplingParams& params, float max_logit, bool with_mass);
  // sort_keys_ = the sorted words of the survivors in buckets [0, last_bucket].
  void GatherSorted(int32_t last_bucket, bool only_last);
  // Fills exp_ (ExpBelowMax: within kExpBelowMaxError, not std::exp's bits) and bucket_mass_.
  void ComputeMass(float max_logit);
  // The first survivor (in candidate order) whose cumulative mass passes `goal`, or nullopt
  // when rounding could change the answer: the full pipeline's cumulative sums, as fractions of
  // `scale`, may differ from this path's by up to `margin` (sampler_fast.cc: CrossingMargin).
  // Needs ComputeMass.
  struct Crossing {
    int32_t bucket = 0;  // its bucket
    int32_t index = 0;   // its place among the bucket's survivors, in candidate order
    int32_t token = 0;
    double run = 0.0;    // the cumulative mass through it, as this path sums it
  };
  std::optional<Crossing> FindCrossing(double goal, double scale, double margin);
  // The first `count` survivors (sorted, in candidates_), normalised, then top-p.
  void FinishOnPrefix(int64_t count, int32_t last_bucket, const SamplingParams& params);
  void FillLogprobs(std::span<const float> logits, const SamplingParams& params,
                    SampleResult& result);

  int32_t vocab_size_;
  std::vector<float> logits_;          // (vocab_size) working copy, penalised then scaled
  std::vector<int32_t> token_counts_;  // (vocab_size) times generated; zero between calls
  std::vector<uint8_t> seen_;          // (vocab_size) 1 if in prompt or generated; zero between
  std::vector<int32_t> touched_;       // ids whose token_counts_ / seen_ entries are set
  std::vector<Candidate> candidates_;  // (<= vocab_size) the surviving tokens, sorted
  std::vector<int32_t> order_;         // (vocab_size) token ids, for the top-logprob selection
  std::vector<uint64_t> sort_keys_;    // (<= vocab_size) the survivors' (key, token) sort words
  std::vector<uint64_t> sort_buffer_;  // and its second buffer
  std::vector<double> cumulative_;     // (vocab_size) running sums of candidates_' probs
  double prob_total_ = 0.0;            // sum of candidates_' probs in order (Normalise)
  // Fast path scratch.
  std::vector<uint16_t> bucket_;        // (vocab_size) survivor's bucket, kNoBucket otherwise
  std::vector<int64_t> bucket_count_;   // (kBuckets) survivors per bucket, when counted_
  bool counted_ = false;                // the last BucketSurvivors filled bucket_count_
  std::vector<double> bucket_mass_;     // (kBuckets) sum of exp_ per bucket
  std::vector<double> exp_;             // (vocab_size) ~exp(l - max) (ComputeMass)
  std::vector<int32_t> in_range_;       // (<= vocab_size) GatherSorted's sparse hits
  std::vector<float> maxima_;           // (~vocab_size / 64) logits_' group maxima (ScaleLogits)
  int64_t fast_path_declines_ = 0;
};

}  // namespace kvserve::sampling
