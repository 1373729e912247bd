#include "engine/kv_snapshot.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "engine/engine.h"

namespace kvserve::engine {
namespace {

using Clock = std::chrono::steady_clock;

KvGroupSnapshot CopyGroup(const kv::KvCacheManager& kv, int g) {
  const kv::KvCacheGroup& group = kv.config().groups[static_cast<size_t>(g)];
  const kv::GroupCapacity& capacity = kv.capacity().groups[static_cast<size_t>(g)];
  const kv::BlockPool& pool = kv.pool(g);
  KvGroupSnapshot out;
  out.kind = kv::SpecKindName(group.spec);
  out.spec = kv::DescribeSpec(group.spec);
  out.num_writer_layers = static_cast<int>(group.layers.size());
  out.num_reader_layers = static_cast<int>(group.readers.size());
  out.block_bytes = capacity.block_bytes;
  out.bytes_per_token = capacity.bytes_per_token.bytes;
  out.bytes_per_token_formula = capacity.bytes_per_token.formula;
  out.num_blocks = pool.NumUsableBlocks();
  out.num_evictions = pool.num_evictions();
  const std::span<const kv::BlockState> states = pool.States();
  out.states.assign(states.begin(), states.end());
  // Byte compares over the copy (vectorized); shared blocks are few and looked up one by one.
  int32_t num_shared = 0;
  for (kv::BlockState s : out.states) {
    out.num_used += s == kv::BlockState::kUsed;
    num_shared += s == kv::BlockState::kShared;
    out.num_cached += s == kv::BlockState::kCached;
  }
  out.num_used += num_shared;
  out.num_free = out.num_blocks - out.num_used - out.num_cached;
  out.shared_ref_counts.reserve(static_cast<size_t>(num_shared));
  for (size_t b = 0; num_shared > 0 && b < out.states.size(); ++b) {
    if (out.states[b] != kv::BlockState::kShared) continue;
    const kv::BlockId id = static_cast<kv::BlockId>(b);
    out.shared_ref_counts.emplace_back(id, pool.RefCount(id));
    --num_shared;
  }
  return out;
}

KvRequestSnapshot CopyRequest(const Engine& engine, scheduler::RequestId id,
                              KvRequestState state) {
  const scheduler::Request& r = *engine.scheduler().Find(id);
  KvRequestSnapshot out;
  out.id = id;
  out.state = state;
  if (state == KvRequestState::kWaiting && r.num_preemptions > 0) {
    out.state = KvRequestState::kPreempted;
  }
  out.num_prompt_tokens = r.num_prompt_tokens;
  out.num_output_tokens = r.NumOutputTokens();
  out.max_tokens = r.max_tokens;
  out.num_computed_tokens = r.num_computed_tokens;
  out.num_cached_tokens = r.num_cached_tokens;
  for (size_t t = 0; t < r.loaded_tokens_per_tier.size() && t < out.tier_tokens.size(); ++t) {
    out.tier_tokens[t] = r.loaded_tokens_per_tier[t];
  }
  out.num_preemptions = r.num_preemptions;
  const kv::KvCacheManager& kv = engine.kv();
  if (kv.HasRequest(id)) {
    for (int g = 0; g < kv.num_groups(); ++g) out.block_tables.push_back(kv.BlockTable(id, g));
  } else {
    out.block_tables.resize(static_cast<size_t>(kv.num_groups()));
  }
  return out;
}

std::vector<KvRequestSnapshot> CopyRequests(const Engine& engine) {
  const scheduler::Scheduler& s = engine.scheduler();
  std::vector<KvRequestSnapshot> out;
  for (scheduler::RequestId id : s.running()) {
    out.push_back(CopyRequest(engine, id, KvRequestState::kRunning));
  }
  std::vector<scheduler::RequestId> loading(s.loading().begin(), s.loading().end());
  std::sort(loading.begin(), loading.end());
  for (scheduler::RequestId id : loading) {
    out.push_back(CopyRequest(engine, id, KvRequestState::kLoading));
  }
  for (scheduler::RequestId id : s.waiting()) {
    out.push_back(CopyRequest(engine, id, KvRequestState::kWaiting));
  }
  return out;
}

std::vector<KvTierSnapshot> CopyTiers(const Engine& engine) {
  std::vector<KvTierSnapshot> out;
  const offload::OffloadManager* tiers = engine.offload();
  if (tiers == nullptr) return out;
  for (offload::TierStats& stats : tiers->Stats()) {
    KvTierSnapshot t;
    if (stats.tier == "cpu") {
      t.capacity_bytes = static_cast<int64_t>(tiers->config().cpu_bytes_to_use);
    }
    t.stats = std::move(stats);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

const char* KvBlockStateName(kv::BlockState state) {
  switch (state) {
    case kv::BlockState::kNull: return "null";
    case kv::BlockState::kFree: return "free";
    case kv::BlockState::kCached: return "cached";
    case kv::BlockState::kUsed: return "used";
    case kv::BlockState::kShared: return "shared";
  }
  return "?";
}

int32_t KvGroupSnapshot::RefCount(kv::BlockId block) const {
  const kv::BlockState s = states.at(static_cast<size_t>(block));
  if (s == kv::BlockState::kUsed) return 1;
  if (s != kv::BlockState::kShared) return 0;
  auto it = std::lower_bound(shared_ref_counts.begin(), shared_ref_counts.end(),
                             std::make_pair(block, 0));
  CHECK(it != shared_ref_counts.end() && it->first == block) << "shared block " << block;
  return it->second;
}

std::optional<KvBlockInfo> TakeKvBlockInfo(const Engine& engine, int group, kv::BlockId block) {
  const kv::KvCacheManager& kv = engine.kv();
  if (group < 0 || group >= kv.num_groups()) return std::nullopt;
  const kv::BlockPool& pool = kv.pool(group);
  if (block < 0 || block >= pool.num_blocks()) return std::nullopt;
  KvBlockInfo info;
  info.state = pool.States()[static_cast<size_t>(block)];
  info.ref_count = block == kv::kNullBlock ? 0 : pool.RefCount(block);
  info.hash = pool.HashOf(block);
  if (block == kv::kNullBlock) return info;
  for (const KvRequestSnapshot& r : CopyRequests(engine)) {
    const std::vector<kv::BlockId>& table = r.block_tables[static_cast<size_t>(group)];
    if (std::find(table.begin(), table.end(), block) != table.end()) info.owners.push_back(r.id);
  }
  return info;
}

const char* KvRequestStateName(KvRequestState state) {
  switch (state) {
    case KvRequestState::kRunning: return "running";
    case KvRequestState::kWaiting: return "waiting";
    case KvRequestState::kLoading: return "loading";
    case KvRequestState::kPreempted: return "preempted";
  }
  return "?";
}

KvSettings MakeKvSettings(const Engine& engine) {
  const EngineConfig& c = engine.config();
  const kv::KvCacheManager& kv = engine.kv();
  KvSettings s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_model_len = engine.max_model_len();
  s.block_size = kv.config().block_size;
  s.kv_cache_memory_bytes = c.KvBudgetBytes();
  s.kv_cache_dtype = c.kv_cache_dtype;
  s.enable_prefix_caching = kv.prefix_caching_enabled();
  s.num_threads = engine.num_threads();
  s.num_speculative_tokens = c.speculative ? c.speculative->num_speculative_tokens : 0;
  s.kv_cache_tokens = kv.capacity().num_tokens;
  s.max_concurrency = kv.capacity().max_concurrency;
  s.bytes_per_token = kv.capacity().bytes_per_token;
  s.capacity_report = kv::FormatCapacityReport(kv.config(), kv.capacity());
  return s;
}

KvSnapshot TakeKvSnapshot(const Engine& engine, const KvSettings& settings, uint64_t sequence,
                          double uptime_s) {
  const Clock::time_point start = Clock::now();
  KvSnapshot s;
  s.sequence = sequence;
  s.uptime_s = uptime_s;
  s.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.settings = settings;
  for (int g = 0; g < engine.kv().num_groups(); ++g) s.groups.push_back(CopyGroup(engine.kv(), g));
  s.requests = CopyRequests(engine);
  s.tiers = CopyTiers(engine);
  s.metrics = engine.Metrics();
  if (s.metrics.prefix_cache_queries > 0) {
    s.prefix_hit_rate = static_cast<double>(s.metrics.prefix_cache_hits) /
                        static_cast<double>(s.metrics.prefix_cache_queries);
  }
  s.take_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

Status CheckKvSnapshot(const KvSnapshot& snapshot) {
  for (size_t g = 0; g < snapshot.groups.size(); ++g) {
    const KvGroupSnapshot& group = snapshot.groups[g];
    if (group.num_used + group.num_cached + group.num_free != group.num_blocks) {
      return Internal(fmt::format("group {}: {} used + {} cached + {} free != {} blocks", g,
                                  group.num_used, group.num_cached, group.num_free,
                                  group.num_blocks));
    }
    int32_t used = 0, cached = 0, free = 0;
    for (size_t b = 1; b < group.states.size(); ++b) {
      const kv::BlockState st = group.states[b];
      used += st == kv::BlockState::kUsed || st == kv::BlockState::kShared;
      cached += st == kv::BlockState::kCached;
      free += st == kv::BlockState::kFree;
    }
    if (used != group.num_used || cached != group.num_cached || free != group.num_free) {
      return Internal(fmt::format("group {}: the block states count {} used, {} cached, {} free",
                                  g, used, cached, free));
    }
    std::vector<int64_t> holders(group.states.size(), 0);
    for (const KvRequestSnapshot& r : snapshot.requests) {
      if (r.block_tables.size() != snapshot.groups.size()) {
        return Internal(fmt::format("request {} has {} block tables", r.id, r.block_tables.size()));
      }
      for (kv::BlockId b : r.block_tables[g]) {
        if (b == kv::kNullBlock) continue;
        if (b < 0 || static_cast<size_t>(b) >= holders.size()) {
          return Internal(fmt::format("request {} holds block {} outside group {}", r.id, b, g));
        }
        if (group.RefCount(b) == 0) {
          return Internal(fmt::format("request {} holds block {} of group {}, which is {}", r.id,
                                      b, g, KvBlockStateName(group.states[b])));
        }
        ++holders[b];
      }
    }
    for (size_t b = 1; b < holders.size(); ++b) {
      const int32_t ref = group.RefCount(static_cast<kv::BlockId>(b));
      if (holders[b] != ref) {
        return Internal(fmt::format("group {} block {} ({}): ref count {} but {} request entries",
                                    g, b, KvBlockStateName(group.states[b]), ref, holders[b]));
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvserve::engine
