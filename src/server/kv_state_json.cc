#include "server/kv_state_json.h"

#include <algorithm>

#include "offload/tier.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

// [[first, count], ...] of the non-null ids of a block table, in table order.
json BlockRuns(const std::vector<kv::BlockId>& table) {
  json runs = json::array();
  kv::BlockId first = 0, count = 0;
  for (kv::BlockId b : table) {
    if (b == kv::kNullBlock) continue;
    if (count > 0 && b == first + count) {
      ++count;
      continue;
    }
    if (count > 0) runs.push_back({first, count});
    first = b;
    count = 1;
  }
  if (count > 0) runs.push_back({first, count});
  return runs;
}

json HistogramJson(const engine::Histogram& h) {
  return {{"count", h.count()}, {"sum", h.sum()}, {"p50", h.Quantile(0.5)},
          {"p99", h.Quantile(0.99)}};
}

json GroupJson(const engine::KvGroupSnapshot& g, size_t index, int block_size) {
  const int64_t bb = g.block_bytes;
  return {{"index", index},
          {"kind", g.kind},
          {"spec", g.spec},
          {"block_size", block_size},
          {"block_bytes", bb},
          {"writer_layers", g.num_writer_layers},
          {"reader_layers", g.num_reader_layers},
          {"bytes_per_token", g.bytes_per_token},
          {"bytes_per_token_formula", g.bytes_per_token_formula},
          {"blocks",
           {{"total", g.num_blocks}, {"used", g.num_used}, {"cached", g.num_cached},
            {"free", g.num_free}}},
          {"bytes",
           {{"total", g.num_blocks * bb}, {"used", g.num_used * bb},
            {"cached", g.num_cached * bb}, {"free", g.num_free * bb}}},
          {"usage", g.num_blocks ? static_cast<double>(g.num_used) / g.num_blocks : 0.0},
          {"evictions", g.num_evictions},
          {"map", EncodeBlockMap(g)}};
}

json RequestJson(const engine::KvRequestSnapshot& r) {
  int64_t from_tiers = 0;
  json sources = json::object();
  for (size_t t = 0; t < r.tier_tokens.size(); ++t) {
    sources[offload::TierName(static_cast<offload::TierKind>(t))] = r.tier_tokens[t];
    from_tiers += r.tier_tokens[t];
  }
  sources["device"] = std::max<int64_t>(0, r.num_cached_tokens - from_tiers);
  sources["computed"] = std::max<int64_t>(0, r.num_prompt_tokens - r.num_cached_tokens);
  json blocks = json::array(), runs = json::array();
  for (const std::vector<kv::BlockId>& table : r.block_tables) {
    blocks.push_back(std::count_if(table.begin(), table.end(),
                                   [](kv::BlockId b) { return b != kv::kNullBlock; }));
    runs.push_back(BlockRuns(table));
  }
  return {{"id", r.id},
          {"state", engine::KvRequestStateName(r.state)},
          {"prompt_tokens", r.num_prompt_tokens},
          {"output_tokens", r.num_output_tokens},
          {"max_tokens", r.max_tokens},
          {"computed_tokens", r.num_computed_tokens},
          {"cached_tokens", r.num_cached_tokens},
          {"sources", sources},
          {"preemptions", r.num_preemptions},
          {"blocks", blocks},
          {"block_runs", runs}};
}

json TierJson(const engine::KvTierSnapshot& t) {
  const offload::TierStats& s = t.stats;
  json capacity = t.capacity_bytes ? json(*t.capacity_bytes) : json(nullptr);
  return {{"tier", s.tier},
          {"capacity_bytes", capacity},
          {"usage_bytes", s.usage_bytes},
          {"blocks", s.num_blocks},
          {"lookups", s.lookups},
          {"hits", s.hits},
          {"hit_rate", s.lookups ? static_cast<double>(s.hits) / s.lookups : 0.0},
          {"loads", s.loads},
          {"loaded_bytes", s.bytes_loaded},
          {"stores", s.stores},
          {"stored_bytes", s.bytes_stored},
          {"evictions", s.evictions},
          {"failed_checksums", s.failed_checksums},
          {"errors", s.errors}};
}

json EngineJson(const engine::KvSnapshot& s, const RateMeter::Rates& rates) {
  const engine::MetricsSnapshot& m = s.metrics;
  return {{"steps", m.num_steps},
          {"running", m.num_running},
          {"waiting", m.num_waiting},
          {"preemptions", m.num_preemptions},
          {"prompt_tokens", m.num_prompt_tokens},
          {"generation_tokens", m.num_generation_tokens},
          {"finished", m.num_finished},
          {"prefix_cache_queries", m.prefix_cache_queries},
          {"prefix_cache_hits", m.prefix_cache_hits},
          {"prefix_cache_loaded", m.prefix_cache_loaded},
          {"prefix_hit_rate", s.prefix_hit_rate},
          {"kv_usage", m.kv_usage},
          {"rate_window_s", rates.window_s},
          {"generation_tokens_per_s", rates.generation_tokens_per_s},
          {"prompt_tokens_per_s", rates.prompt_tokens_per_s},
          {"steps_per_s", rates.steps_per_s},
          {"ttft_s", HistogramJson(m.time_to_first_token_s)},
          {"itl_s", HistogramJson(m.inter_token_latency_s)},
          {"e2e_s", HistogramJson(m.e2e_latency_s)},
          {"queue_s", HistogramJson(m.queue_time_s)}};
}

json SettingsJson(const engine::KvSettings& k) {
  return {{"max_num_seqs", k.max_num_seqs},
          {"max_num_batched_tokens", k.max_num_batched_tokens},
          {"max_model_len", k.max_model_len},
          {"block_size", k.block_size},
          {"kv_cache_memory_bytes", k.kv_cache_memory_bytes},
          {"kv_cache_dtype", k.kv_cache_dtype},
          {"enable_prefix_caching", k.enable_prefix_caching},
          {"threads", k.num_threads},
          {"num_speculative_tokens", k.num_speculative_tokens},
          {"kv_cache_tokens", k.kv_cache_tokens},
          {"max_concurrency", k.max_concurrency},
          {"bytes_per_token", k.bytes_per_token},
          {"capacity_report", k.capacity_report}};
}

}  // namespace

RateMeter::Rates RateMeter::Add(const engine::KvSnapshot& s) {
  const Point now{s.uptime_s, s.metrics.num_generation_tokens, s.metrics.num_prompt_tokens,
                  s.metrics.num_steps};
  if (!points_.empty() && now.uptime_s <= points_.back().uptime_s) {  // same or older
    points_.back() = now;
  } else {
    points_.push_back(now);
  }
  // Keep one point at least a second old (the rate's base) and nothing older than 30 s (with
  // many dashboards open, states come as seldom as every 5 s: the rate is over that).
  while (points_.size() > 2 && now.uptime_s - points_[1].uptime_s >= 1.0) points_.pop_front();
  while (points_.size() > 1 && now.uptime_s - points_.front().uptime_s > 30.0) points_.pop_front();
  Rates rates;
  const Point& base = points_.front();
  const double dt = now.uptime_s - base.uptime_s;
  if (dt <= 0) return rates;
  rates.window_s = dt;
  rates.generation_tokens_per_s = static_cast<double>(now.generation_tokens - base.generation_tokens) / dt;
  rates.prompt_tokens_per_s = static_cast<double>(now.prompt_tokens - base.prompt_tokens) / dt;
  rates.steps_per_s = static_cast<double>(now.steps - base.steps) / dt;
  return rates;
}

std::string EncodeBlockMap(const engine::KvGroupSnapshot& group) {
  std::string out;
  const std::vector<kv::BlockState>& states = group.states;
  size_t b = 0;
  while (b < states.size()) {
    size_t end = b + 1;
    while (end < states.size() && states[end] == states[b]) ++end;
    out += static_cast<char>(states[b]);  // the letters of kv::BlockState
    out += std::to_string(end - b);
    b = end;
  }
  return out;
}

json KvStateJson(const engine::KvSnapshot& s, const RateMeter::Rates& rates,
                 const std::string& model_name) {
  json groups = json::array(), requests = json::array(), tiers = json::array();
  for (size_t g = 0; g < s.groups.size(); ++g) {
    groups.push_back(GroupJson(s.groups[g], g, s.settings.block_size));
  }
  for (const engine::KvRequestSnapshot& r : s.requests) requests.push_back(RequestJson(r));
  for (const engine::KvTierSnapshot& t : s.tiers) tiers.push_back(TierJson(t));
  return {{"object", "kv.state"},
          {"model", model_name},
          {"sequence", s.sequence},
          {"uptime_s", s.uptime_s},
          {"unix_ms", s.unix_ms},
          {"snapshot_us", s.take_seconds * 1e6},
          {"settings", SettingsJson(s.settings)},
          {"engine", EngineJson(s, rates)},
          {"groups", groups},
          {"tiers", tiers},
          {"requests", requests}};
}

json KvBlockJson(const engine::KvBlockInfo& info, int group, int64_t id) {
  return {{"group", group},
          {"id", id},
          {"state", engine::KvBlockStateName(info.state)},
          {"ref_count", info.ref_count},
          {"hash", info.hash ? json(info.hash->ToHex()) : json(nullptr)},
          {"owners", info.owners}};
}

}  // namespace kvserve::server
