#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/units.h"

namespace kvserve::sim {
namespace {

using Json = nlohmann::json;

// The q-quantile of sorted values by linear interpolation between the two closest ranks.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

Json LatencyJson(const Latency& l) {
  return {{"mean", l.mean}, {"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}};
}

std::string Ms(const Latency& l) {
  return fmt::format("mean {:.1f} p50 {:.1f} p90 {:.1f} p99 {:.1f}", l.mean * 1e3, l.p50 * 1e3,
                     l.p90 * 1e3, l.p99 * 1e3);
}

Json TierJson(const offload::TierStats& t) {
  return {{"tier", t.tier},          {"hits", t.hits},
          {"loads", t.loads},        {"bytes_loaded", t.bytes_loaded},
          {"stores", t.stores},      {"bytes_stored", t.bytes_stored},
          {"evictions", t.evictions}, {"usage_bytes", t.usage_bytes},
          {"num_blocks", t.num_blocks}};
}

}  // namespace

Latency Percentiles(std::vector<double> values) {
  Latency l;
  if (values.empty()) return l;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  l.mean = sum / static_cast<double>(values.size());
  l.p50 = Quantile(values, 0.5);
  l.p90 = Quantile(values, 0.9);
  l.p99 = Quantile(values, 0.99);
  return l;
}

RequestLatencies Latencies(const SimResult& result) {
  RequestLatencies out;
  for (const RequestTiming& r : result.requests) {
    if (r.error || !r.first_token || !r.finish) continue;
    out.ttft.push_back(*r.first_token - r.arrival);
    out.e2e.push_back(*r.finish - r.arrival);
    if (r.num_generated > 1) {
      out.tpot.push_back((*r.finish - *r.first_token) / static_cast<double>(r.num_generated - 1));
    }
  }
  return out;
}

Summary Summarize(const SimResult& result) {
  Summary s;
  s.elapsed = result.elapsed;
  s.num_errors = result.num_errors;
  double tokens = 0, output = 0;
  for (const RequestTiming& r : result.requests) {
    if (r.error || !r.finish) continue;
    ++s.num_requests;
    tokens += static_cast<double>(r.input_len + r.num_generated);
    output += static_cast<double>(r.num_generated);
  }
  if (s.elapsed > 0) {
    s.requests_per_s = static_cast<double>(s.num_requests) / s.elapsed;
    s.total_tokens_per_s = tokens / s.elapsed;
    s.output_tokens_per_s = output / s.elapsed;
  }
  RequestLatencies lat = Latencies(result);
  s.ttft = Percentiles(std::move(lat.ttft));
  s.tpot = Percentiles(std::move(lat.tpot));
  s.e2e = Percentiles(std::move(lat.e2e));
  s.itl = Percentiles(result.inter_token_latencies);
  if (result.decode_seconds > 0) {
    s.decode_tokens_per_s = static_cast<double>(result.num_decode_tokens) / result.decode_seconds;
  }
  s.num_preemptions = result.stats.num_preemptions;
  if (result.stats.prefix_query_tokens > 0) {
    const double q = static_cast<double>(result.stats.prefix_query_tokens);
    s.prefix_hit_rate = static_cast<double>(result.stats.prefix_hit_tokens) / q;
    s.prefix_loaded_rate = static_cast<double>(result.stats.prefix_loaded_tokens) / q;
  }
  double prev = 0, weighted = 0;
  for (const TimelinePoint& p : result.timeline) {
    weighted += p.kv_usage * (p.time - prev);
    prev = p.time;
    s.peak_kv_usage = std::max(s.peak_kv_usage, p.kv_usage);
    s.max_waiting = std::max(s.max_waiting, p.num_waiting);
  }
  if (prev > 0) s.mean_kv_usage = weighted / prev;
  return s;
}

std::string FormatText(const RunLabel& label, const SimResult& result, const Summary& s) {
  std::string out = fmt::format("Simulated: {} on {}; {}\n", label.model, label.hardware,
                                fmt::join(label.knobs, ", "));
  out += fmt::format("Throughput: {:.2f} requests/s, {:.2f} total tokens/s, {:.2f} output tokens/s\n",
                     s.requests_per_s, s.total_tokens_per_s, s.output_tokens_per_s);
  out += fmt::format("Elapsed {:.2f} s (virtual); {} requests finished, {} failed\n", s.elapsed,
                     s.num_requests, s.num_errors);
  if (!result.first_error.empty()) out += fmt::format("  first failure: {}\n", result.first_error);
  out += fmt::format("TTFT ms: {}\n", Ms(s.ttft));
  out += fmt::format("Time per output token ms: {}\n", Ms(s.tpot));
  out += fmt::format("Inter-token latency ms: {}\n", Ms(s.itl));
  out += fmt::format("End-to-end latency ms: {}\n", Ms(s.e2e));
  if (result.num_decode_steps > 0) {
    out += fmt::format("Decode-only steps: {} steps, {} tokens, {:.2f} tokens/s\n",
                       result.num_decode_steps, result.num_decode_tokens, s.decode_tokens_per_s);
  }
  out += fmt::format("Preemptions: {}; prefix cache: {} of {} tokens hit ({:.2f}%), {} loaded from "
                     "tiers below the device pool\n",
                     s.num_preemptions, result.stats.prefix_hit_tokens,
                     result.stats.prefix_query_tokens, 100 * s.prefix_hit_rate,
                     result.stats.prefix_loaded_tokens);
  out += fmt::format("KV cache: {} tokens in {} groups; usage mean {:.1f}% peak {:.1f}%; queue "
                     "peak {} waiting\n",
                     result.capacity.num_tokens, result.capacity.groups.size(),
                     100 * s.mean_kv_usage, 100 * s.peak_kv_usage, s.max_waiting);
  for (const offload::TierStats& t : result.tiers) {
    out += fmt::format("Tier {}: {} hits ({} loaded), {} stored ({} blocks), {} evictions, "
                       "holds {}\n",
                       t.tier, t.hits, FormatBytes(t.bytes_loaded), FormatBytes(t.bytes_stored),
                       t.stores, t.evictions, FormatBytes(t.usage_bytes));
  }
  double busy = 0;
  for (double v : result.op_seconds) busy += v;
  std::string ops;
  for (int k = 0; k < kNumOpKinds; ++k) {
    ops += fmt::format("{}{} {:.1f}%", k ? ", " : "", OpKindName(static_cast<OpKind>(k)),
                       busy > 0 ? 100 * result.op_seconds[k] / busy : 0.0);
  }
  out += fmt::format("Step time: {}; {} steps, {:.1f} tokens per step\n", ops, result.num_steps,
                     result.num_steps ? static_cast<double>(result.num_prompt_tokens +
                                                            result.num_generation_tokens) /
                                            result.num_steps
                                      : 0.0);
  if (result.store_seconds > 0 || result.idle_seconds > 0) {
    out += fmt::format("Tier copies on the scheduler thread {:.3f} s; idle (waiting for arrivals "
                       "or tier loads) {:.3f} s\n",
                       result.store_seconds, result.idle_seconds);
  }
  out += fmt::format("Simulated in {:.2f} s of wall time\n", result.wall_seconds);
  return out;
}

std::vector<TimelinePoint> ThinTimeline(const std::vector<TimelinePoint>& timeline, size_t n) {
  if (timeline.size() <= n || n < 2) return timeline;
  std::vector<TimelinePoint> out;
  for (size_t i = 0; i < n; ++i) out.push_back(timeline[i * (timeline.size() - 1) / (n - 1)]);
  return out;
}

std::vector<std::pair<double, double>> Cdf(std::vector<double> values, size_t n) {
  std::vector<std::pair<double, double>> out;
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  const size_t points = std::min(n, values.size());
  for (size_t i = 0; i < points; ++i) {
    const size_t k = points == 1 ? values.size() - 1 : i * (values.size() - 1) / (points - 1);
    out.emplace_back(values[k], static_cast<double>(k + 1) / static_cast<double>(values.size()));
  }
  return out;
}

std::string FormatJson(const RunLabel& label, const SimResult& result, const Summary& s,
                       size_t max_points) {
  Json j;
  j["model"] = label.model;
  j["hardware"] = label.hardware;
  j["knobs"] = label.knobs;
  j["summary"] = {{"requests", s.num_requests}, {"errors", s.num_errors},
                  {"elapsed_s", s.elapsed}, {"requests_per_s", s.requests_per_s},
                  {"total_tokens_per_s", s.total_tokens_per_s},
                  {"output_tokens_per_s", s.output_tokens_per_s},
                  {"ttft_s", LatencyJson(s.ttft)}, {"tpot_s", LatencyJson(s.tpot)},
                  {"itl_s", LatencyJson(s.itl)}, {"e2e_s", LatencyJson(s.e2e)},
                  {"decode_tokens_per_s", s.decode_tokens_per_s},
                  {"preemptions", s.num_preemptions}, {"prefix_hit_rate", s.prefix_hit_rate},
                  {"prefix_loaded_rate", s.prefix_loaded_rate},
                  {"mean_kv_usage", s.mean_kv_usage}, {"peak_kv_usage", s.peak_kv_usage},
                  {"max_waiting", s.max_waiting}};
  j["counts"] = {{"steps", result.num_steps}, {"prompt_tokens", result.num_prompt_tokens},
                 {"generation_tokens", result.num_generation_tokens},
                 {"prefix_query_tokens", result.stats.prefix_query_tokens},
                 {"prefix_hit_tokens", result.stats.prefix_hit_tokens},
                 {"prefix_loaded_tokens", result.stats.prefix_loaded_tokens},
                 {"kv_tokens", result.capacity.num_tokens},
                 {"store_seconds", result.store_seconds},
                 {"idle_seconds", result.idle_seconds},
                 {"wall_seconds", result.wall_seconds}};
  if (!result.first_error.empty()) j["first_error"] = result.first_error;
  j["tiers"] = Json::array();
  for (const offload::TierStats& t : result.tiers) j["tiers"].push_back(TierJson(t));
  for (int k = 0; k < kNumOpKinds; ++k) {
    j["ops"][OpKindName(static_cast<OpKind>(k))] = {{"seconds", result.op_seconds[k]},
                                                     {"flops", result.work[k].flops},
                                                     {"bytes", result.work[k].bytes}};
  }
  RequestLatencies lat = Latencies(result);
  auto cdf = [&](std::vector<double> v) {
    Json a = Json::array();
    for (const auto& [x, f] : Cdf(std::move(v), 200)) a.push_back({x, f});
    return a;
  };
  j["cdf"] = {{"ttft_s", cdf(lat.ttft)}, {"tpot_s", cdf(lat.tpot)},
              {"itl_s", cdf(result.inter_token_latencies)}};
  Json timeline = Json::array();
  for (const TimelinePoint& p : ThinTimeline(result.timeline, max_points)) {
    timeline.push_back({{"t", p.time}, {"kv_usage", p.kv_usage}, {"running", p.num_running},
                        {"waiting", p.num_waiting}, {"loading", p.num_loading}});
  }
  j["timeline"] = std::move(timeline);
  return j.dump(2) + "\n";
}

std::string FormatSweepTable(const std::string& knob,
                             const std::vector<std::pair<std::string, Summary>>& rows) {
  std::string out = fmt::format(
      "| {} | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 ms | ITL p50 / p99 ms | "
      "E2E p50 ms | preemptions | prefix hit |\n|---|---|---|---|---|---|---|---|---|\n",
      knob);
  for (const auto& [value, s] : rows) {
    out += fmt::format("| {} | {:.2f} | {:.1f} | {:.1f} / {:.1f} | {:.2f} | {:.2f} / {:.2f} | "
                       "{:.1f} | {} | {:.2f}% |\n",
                       value, s.requests_per_s, s.output_tokens_per_s, s.ttft.p50 * 1e3,
                       s.ttft.p99 * 1e3, s.tpot.p50 * 1e3, s.itl.p50 * 1e3, s.itl.p99 * 1e3,
                       s.e2e.p50 * 1e3, s.num_preemptions, 100 * s.prefix_hit_rate);
  }
  return out;
}

}  // namespace kvserve::sim
