// Offload metrics: per-tier counters and I/O latency histograms, updated from any thread with
// relaxed atomics and read as a plain snapshot. Prometheus names are kvserve:offload_*.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace kvserve::offload {

// Upper bounds (seconds) of the I/O latency buckets; one more bucket counts the rest.
inline constexpr std::array<double, 12> kIoLatencyBoundsSeconds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0};

// A lock-free histogram. Thread safety: Observe from any thread; Snapshot is a consistent
// enough copy for metrics (each bucket read atomically, not the whole set).
class LatencyHistogram {
 public:
  void Observe(double seconds);
  struct Snapshot {
    std::vector<int64_t> counts;  // kIoLatencyBoundsSeconds.size() + 1 buckets
    int64_t count = 0;
    double sum_seconds = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<int64_t>, kIoLatencyBoundsSeconds.size() + 1> counts_{};
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> sum_ns_{0};
};

// The counters of one tier. Thread safety: every field is atomic.
struct TierCounters {
  std::atomic<int64_t> lookups{0};          // Contains / Get calls
  std::atomic<int64_t> hits{0};             // Get calls that returned a block
  std::atomic<int64_t> stores{0};           // blocks written
  std::atomic<int64_t> bytes_stored{0};
  std::atomic<int64_t> loads{0};            // blocks read back
  std::atomic<int64_t> bytes_loaded{0};
  std::atomic<int64_t> evictions{0};        // blocks dropped to stay inside the bound
  std::atomic<int64_t> failed_checksums{0}; // records rejected (bad header, checksum, size)
  std::atomic<int64_t> errors{0};           // I/O or connection failures (served around)
  std::atomic<int64_t> usage_bytes{0};      // bytes held now (CPU: payloads; file: on disk)
  std::atomic<int64_t> num_blocks{0};       // blocks held now
  LatencyHistogram load_latency;
  LatencyHistogram store_latency;
};

// A plain copy of TierCounters.
struct TierStats {
  std::string tier;  // "cpu", "file", "redis"
  int64_t lookups = 0, hits = 0, stores = 0, bytes_stored = 0, loads = 0, bytes_loaded = 0;
  int64_t evictions = 0, failed_checksums = 0, errors = 0, usage_bytes = 0, num_blocks = 0;
  LatencyHistogram::Snapshot load_latency;
  LatencyHistogram::Snapshot store_latency;
};

TierStats ReadCounters(const std::string& tier, const TierCounters& counters);

// Prometheus text for every tier: kvserve:offload_hits_total{tier="cpu"} 3, ...,
// kvserve:offload_load_latency_seconds_bucket{tier="file",le="0.001"} 7, ...
std::string RenderPrometheus(const std::vector<TierStats>& tiers);

}  // namespace kvserve::offload
