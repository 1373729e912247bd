// Engine metrics: latency histograms with fixed bucket boundaries (vLLM's Prometheus ones),
// gauges and counters. The engine thread records; readers take a MetricsSnapshot (a copy).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvserve::engine {

// Counts of observations per bucket: bucket i counts values <= bounds[i] (and above
// bounds[i-1]); the last bucket counts values above every bound. Not thread-safe.
class Histogram {
 public:
  explicit Histogram(std::span<const double> bounds);

  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<int64_t>& counts() const { return counts_; }  // bounds.size() + 1
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  double Mean() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }
  // The q-quantile (q in [0, 1]) by linear interpolation inside its bucket (Prometheus'
  // histogram_quantile); 0 when empty. Values above the last bound report the last bound.
  double Quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0;
};

// vLLM's bucket boundaries (seconds, or tokens for tokens per step).
std::span<const double> TtftBucketsSeconds();
std::span<const double> InterTokenBucketsSeconds();  // ITL and time per output token
std::span<const double> RequestBucketsSeconds();     // queue time and end-to-end latency
std::span<const double> TokensPerStepBuckets();

struct MetricsSnapshot {
  Histogram time_to_first_token_s{TtftBucketsSeconds()};
  Histogram time_per_output_token_s{InterTokenBucketsSeconds()};  // (e2e - ttft) / (n - 1)
  Histogram inter_token_latency_s{InterTokenBucketsSeconds()};    // every gap between tokens
  Histogram queue_time_s{RequestBucketsSeconds()};                // arrival -> first scheduled
  Histogram e2e_latency_s{RequestBucketsSeconds()};               // arrival -> finished
  Histogram tokens_per_step{TokensPerStepBuckets()};
  int num_running = 0;
  int num_waiting = 0;
  double kv_usage = 0;               // fraction of KV blocks referenced by requests
  int64_t prefix_cache_queries = 0;  // tokens looked up at admissions
  int64_t prefix_cache_hits = 0;     // of which found in a cache tier (device or lower)
  int64_t prefix_cache_loaded = 0;   // of which loaded from a tier below the device pool
  int64_t num_preemptions = 0;
  int64_t num_prompt_tokens = 0;      // computed in prefill chunks (prompts, recomputes)
  int64_t num_generation_tokens = 0;  // sampled
  int64_t num_steps = 0;
  int64_t num_finished = 0;
  // Speculative decoding (vLLM's spec_decode_* counters).
  int64_t spec_num_drafts = 0;           // verifications (a request's drafts in one step)
  int64_t spec_num_draft_tokens = 0;     // drafted tokens verified
  int64_t spec_num_accepted_tokens = 0;  // of which accepted
  std::vector<int64_t> spec_accepted_per_position;  // [i]: drafts accepted at position i

  // Counts one verification of num_drafts drafts, the first num_accepted accepted.
  void RecordDrafts(int64_t num_drafts, int64_t num_accepted);

  // Human-readable summary lines (p50/p99 of each histogram, counters).
  std::vector<std::string> Format() const;
};

}  // namespace kvserve::engine
