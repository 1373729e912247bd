#include "offload/metrics.h"

#include <fmt/format.h>

namespace kvserve::offload {

void LatencyHistogram::Observe(double seconds) {
  size_t bucket = 0;
  while (bucket < kIoLatencyBoundsSeconds.size() && seconds > kIoLatencyBoundsSeconds[bucket]) {
    ++bucket;
  }
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  for (const auto& c : counts_) s.counts.push_back(c.load(std::memory_order_relaxed));
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

TierStats ReadCounters(const std::string& tier, const TierCounters& c) {
  auto load = [](const std::atomic<int64_t>& a) { return a.load(std::memory_order_relaxed); };
  TierStats s;
  s.tier = tier;
  s.lookups = load(c.lookups);
  s.hits = load(c.hits);
  s.stores = load(c.stores);
  s.bytes_stored = load(c.bytes_stored);
  s.loads = load(c.loads);
  s.bytes_loaded = load(c.bytes_loaded);
  s.evictions = load(c.evictions);
  s.failed_checksums = load(c.failed_checksums);
  s.errors = load(c.errors);
  s.usage_bytes = load(c.usage_bytes);
  s.num_blocks = load(c.num_blocks);
  s.load_latency = c.load_latency.Read();
  s.store_latency = c.store_latency.Read();
  return s;
}

namespace {

void AppendCounter(std::string* out, const char* name, const char* type,
                   const std::vector<TierStats>& tiers, int64_t TierStats::*field) {
  *out += fmt::format("# TYPE kvserve:offload_{} {}\n", name, type);
  for (const TierStats& t : tiers) {
    *out += fmt::format("kvserve:offload_{}{{tier=\"{}\"}} {}\n", name, t.tier, t.*field);
  }
}

void AppendHistogram(std::string* out, const char* name, const std::vector<TierStats>& tiers,
                     LatencyHistogram::Snapshot TierStats::*field) {
  *out += fmt::format("# TYPE kvserve:offload_{} histogram\n", name);
  for (const TierStats& t : tiers) {
    const LatencyHistogram::Snapshot& h = t.*field;
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      std::string le = i < kIoLatencyBoundsSeconds.size()
                           ? fmt::format("{}", kIoLatencyBoundsSeconds[i])
                           : std::string("+Inf");
      *out += fmt::format("kvserve:offload_{}_bucket{{tier=\"{}\",le=\"{}\"}} {}\n", name, t.tier,
                          le, cumulative);
    }
    *out += fmt::format("kvserve:offload_{}_sum{{tier=\"{}\"}} {}\n", name, t.tier, h.sum_seconds);
    *out += fmt::format("kvserve:offload_{}_count{{tier=\"{}\"}} {}\n", name, t.tier, h.count);
  }
}

}  // namespace

std::string RenderPrometheus(const std::vector<TierStats>& tiers) {
  std::string out;
  AppendCounter(&out, "lookups_total", "counter", tiers, &TierStats::lookups);
  AppendCounter(&out, "hits_total", "counter", tiers, &TierStats::hits);
  AppendCounter(&out, "stores_total", "counter", tiers, &TierStats::stores);
  AppendCounter(&out, "stored_bytes_total", "counter", tiers, &TierStats::bytes_stored);
  AppendCounter(&out, "loads_total", "counter", tiers, &TierStats::loads);
  AppendCounter(&out, "loaded_bytes_total", "counter", tiers, &TierStats::bytes_loaded);
  AppendCounter(&out, "evictions_total", "counter", tiers, &TierStats::evictions);
  AppendCounter(&out, "failed_checksums_total", "counter", tiers, &TierStats::failed_checksums);
  AppendCounter(&out, "errors_total", "counter", tiers, &TierStats::errors);
  AppendCounter(&out, "usage_bytes", "gauge", tiers, &TierStats::usage_bytes);
  AppendCounter(&out, "blocks", "gauge", tiers, &TierStats::num_blocks);
  AppendHistogram(&out, "load_latency_seconds", tiers, &TierStats::load_latency);
  AppendHistogram(&out, "store_latency_seconds", tiers, &TierStats::store_latency);
  return out;
}

}  // namespace kvserve::offload
