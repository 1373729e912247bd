// The Prometheus text exposition (format 0.0.4) of the engine's metrics, names prefixed
// `kvserve:` like vLLM's `vllm:` ones, every series labelled model_name="...".
#pragma once

#include <cstdint>
#include <string>

#include "engine/metrics.h"

namespace kvserve::server {

struct ServerCounters {
  int64_t num_kv_blocks = 0;        // usable KV blocks (the null block excluded)
  int64_t num_in_flight = 0;        // engine requests the HTTP layer is waiting on
  int64_t num_rejected = 0;         // 503s for a full queue
};

std::string FormatPrometheus(const engine::MetricsSnapshot& m, const ServerCounters& s,
                             const std::string& model_name);

}  // namespace kvserve::server
