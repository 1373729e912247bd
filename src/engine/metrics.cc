#include "engine/metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/check.h"

namespace kvserve::engine {

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds.begin(), bounds.end()), counts_(bounds.size() + 1, 0) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += value;
}

// Worked example: bounds {1, 2}, counts {1, 2, 0} (one value <= 1, two in (1, 2]);
// q = 0.5 -> rank 1.5 falls in bucket 1 (cumulative 1 before it): 1 + (2 - 1) * 0.5/2 = 1.25.
double Histogram::Quantile(double q) const {
  if (count_ == 0) return 0.0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count_);
  int64_t below = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (static_cast<double>(below + counts_[i]) >= rank && counts_[i] > 0) {
      if (i == bounds_.size()) return bounds_.empty() ? 0.0 : bounds_.back();
      const double lo = i == 0 ? 0.0 : bounds_[i - 1];
      const double fraction = (rank - static_cast<double>(below)) / static_cast<double>(counts_[i]);
      return lo + (bounds_[i] - lo) * fraction;
    }
    below += counts_[i];
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

std::span<const double> TtftBucketsSeconds() {
  static const double kBounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return kBounds;
}

std::span<const double> InterTokenBucketsSeconds() {
  static const double kBounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                   0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return kBounds;
}

std::span<const double> RequestBucketsSeconds() {
  static const double kBounds[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                   5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return kBounds;
}

std::span<const double> TokensPerStepBuckets() {
  static const double kBounds[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  return kBounds;
}

void MetricsSnapshot::RecordDrafts(int64_t num_drafts, int64_t num_accepted) {
  ++spec_num_drafts;
  spec_num_draft_tokens += num_drafts;
  spec_num_accepted_tokens += num_accepted;
  if (static_cast<int64_t>(spec_accepted_per_position.size()) < num_drafts) {
    spec_accepted_per_position.resize(static_cast<size_t>(num_drafts), 0);
  }
  for (int64_t i = 0; i < num_accepted; ++i) ++spec_accepted_per_position[i];
}

std::vector<std::string> MetricsSnapshot::Format() const {
  auto line = [](const char* name, const Histogram& h, double scale, const char* unit) {
    return fmt::format("{:<24} n={:<6} mean={:.3f}{} p50~{:.3f}{} p99~{:.3f}{}", name, h.count(),
                       h.Mean() * scale, unit, h.Quantile(0.5) * scale, unit,
                       h.Quantile(0.99) * scale, unit);
  };
  std::vector<std::string> lines;
  lines.push_back(line("time to first token", time_to_first_token_s, 1e3, "ms"));
  lines.push_back(line("time per output token", time_per_output_token_s, 1e3, "ms"));
  lines.push_back(line("inter-token latency", inter_token_latency_s, 1e3, "ms"));
  lines.push_back(line("queue time", queue_time_s, 1e3, "ms"));
  lines.push_back(line("end-to-end latency", e2e_latency_s, 1e3, "ms"));
  lines.push_back(line("tokens per step", tokens_per_step, 1, ""));
  lines.push_back(fmt::format("running {} waiting {} kv usage {:.1f}% preemptions {}", num_running,
                              num_waiting, kv_usage * 100, num_preemptions));
  lines.push_back(fmt::format(
      "prefix cache: {} of {} tokens hit ({:.1f}%); prompt tokens {} generated {} steps {}",
      prefix_cache_hits, prefix_cache_queries,
      prefix_cache_queries ? 100.0 * prefix_cache_hits / prefix_cache_queries : 0.0,
      num_prompt_tokens, num_generation_tokens, num_steps));
  if (spec_num_drafts > 0) {
    lines.push_back(fmt::format(
        "speculative decoding: {} verifications, {} of {} drafted tokens accepted ({:.1f}%), "
        "accepted per position [{}]",
        spec_num_drafts, spec_num_accepted_tokens, spec_num_draft_tokens,
        100.0 * spec_num_accepted_tokens / std::max<int64_t>(1, spec_num_draft_tokens),
        fmt::join(spec_accepted_per_position, ", ")));
  }
  return lines;
}

}  // namespace kvserve::engine
