// What a simulation reports: the numbers `kvserve bench throughput` prints (throughput, TTFT /
// TPOT / ITL / E2E percentiles, preemptions, prefix-cache hit rate), plus per-tier hits, loads
// and bytes, where the step time went (per op kind) and KV usage and queue length over time;
// as text, as JSON (--json) and as a table across configurations (--sweep).
// Percentiles are exact (sorted values, linear interpolation between the two closest ranks,
// as `bench throughput` computes them). Pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/simulator.h"

namespace kvserve::sim {

// p50 / p90 / p99 and the mean of a latency, in seconds.
struct Latency {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

struct Summary {
  int64_t num_requests = 0;   // finished without error
  int64_t num_errors = 0;
  double elapsed = 0;
  double requests_per_s = 0;
  double total_tokens_per_s = 0;   // (prompt + output) tokens of finished requests
  double output_tokens_per_s = 0;
  Latency ttft, tpot, itl, e2e;
  double decode_tokens_per_s = 0;  // decode-only steps
  int64_t num_preemptions = 0;
  double prefix_hit_rate = 0;      // prefix_hit_tokens / prefix_query_tokens
  double prefix_loaded_rate = 0;   // of the queried tokens, the share loaded from a tier
  double mean_kv_usage = 0;        // time-weighted
  double peak_kv_usage = 0;
  int max_waiting = 0;
};

Summary Summarize(const SimResult& result);
Latency Percentiles(std::vector<double> values);

// What produced the result, for the report's header (one line per entry).
struct RunLabel {
  std::string model;       // "llama-3.1-8b (preset)"
  std::string hardware;    // "h200 x tp 4"
  std::vector<std::string> knobs;  // "max-num-seqs 256", ...
};

// The text report: bench throughput's lines first, then the simulator's own.
std::string FormatText(const RunLabel& label, const SimResult& result, const Summary& summary);
// One JSON object: label, summary, tiers, op breakdown, KV capacity, latency CDFs and the
// timeline (both thinned to at most `max_points` points).
std::string FormatJson(const RunLabel& label, const SimResult& result, const Summary& summary,
                       size_t max_points = 2000);
// --sweep: one row per configuration (label, summary).
std::string FormatSweepTable(const std::string& knob,
                             const std::vector<std::pair<std::string, Summary>>& rows);

// Helpers shared with the SVG writer: the timeline thinned to at most n points (keeping the
// first and last), and a latency's empirical CDF as (seconds, fraction) pairs.
std::vector<TimelinePoint> ThinTimeline(const std::vector<TimelinePoint>& timeline, size_t n);
std::vector<std::pair<double, double>> Cdf(std::vector<double> values, size_t n);
// Per request: TTFT, TPOT (for > 1 token), E2E in seconds.
struct RequestLatencies {
  std::vector<double> ttft, tpot, e2e;
};
RequestLatencies Latencies(const SimResult& result);

}  // namespace kvserve::sim
