// The JSON of GET /v1/kv/state and of each GET /v1/kv/events event: a KvSnapshot
// (engine/kv_snapshot.h) encoded for the dashboard and for scripts.
//
// Names follow /metrics where both show a number (engine.preemptions is
// kvserve:num_preemptions_total, tiers[i].hits is kvserve:offload_hits_total{tier=...}), so
// the two can be compared. The block map of a group is run-length encoded, one letter per
// state then a count: "n1u12s2c40f201" = the null block, 12 blocks used by one request, 2
// shared by several, 40 cached (evictable), 201 free. A request's blocks are runs of ids,
// [[first, count], ...] per group. Field by field: docs/dashboard.md.
//
// Thread safety: pure functions; RateMeter is not thread-safe (one owner).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/kv_snapshot.h"

namespace kvserve::server {

// Token and step rates over the last second or so, from the counters of successive snapshots.
class RateMeter {
 public:
  struct Rates {
    double window_s = 0;  // 0: not enough history yet
    double generation_tokens_per_s = 0;
    double prompt_tokens_per_s = 0;
    double steps_per_s = 0;
  };
  // Records `s` (snapshots in the order taken) and returns the rates ending at it.
  Rates Add(const engine::KvSnapshot& s);

 private:
  struct Point {
    double uptime_s = 0;
    int64_t generation_tokens = 0, prompt_tokens = 0, steps = 0;
  };
  std::deque<Point> points_;  // the last few seconds, oldest first
};

// The run-length block map of a group ("n1u12c40f201").
std::string EncodeBlockMap(const engine::KvGroupSnapshot& group);

// The whole state document.
nlohmann::json KvStateJson(const engine::KvSnapshot& s, const RateMeter::Rates& rates,
                           const std::string& model_name);

// One block's detail (GET /v1/kv/block): state, ref count, prefix hash, the requests holding it.
nlohmann::json KvBlockJson(const engine::KvBlockInfo& info, int group, int64_t id);

}  // namespace kvserve::server
