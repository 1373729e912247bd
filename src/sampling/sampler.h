// Sampler: picks one token from one request's logits (vLLM semantics, sampling_params.h).
//
//   Sampler sampler(vocab_size);
//   uint64_t seed = ResolveSeed(params.seed, request_id);   // once per request
//   SampleResult r = sampler.Sample(logits, params, {prompt_ids, generated_ids}, seed);
//
// Pipeline: copy logits -> repetition, frequency, presence penalties -> greedy argmax, or
// temperature -> min-p -> top-k -> sort (logit descending, ties by token id) -> softmax ->
// top-p -> inverse-CDF draw with u = UniformDouble(seed, position).
// The token's position is history.NumTokens() (prompt + generated so far), so the draw depends
// only on (seed, position) and the logits: never on other requests or the order of calls.
#pragma once

#include <cstdint>
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

  // Applies repetition, then frequency, then presence penalties to `logits` in place
  // (vocab_size values). Exposed for tests.
  void ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                      const TokenHistory& history);

 private:
  void FilterAndSort(const SamplingParams& params);
  void Normalise(size_t count);
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
};

}  // namespace kvserve::sampling
