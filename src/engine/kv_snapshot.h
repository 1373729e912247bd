// KvSnapshot: a copy of the KV cache's whole state at one step boundary, for the live dashboard
// (server/kv_dashboard.h) and GET /v1/kv/state: every block of every group (state, reference
// count, prefix hash), every request the scheduler holds (state, progress, block tables, where
// its prompt tokens came from), the offload tiers' counters, the engine's totals and the knobs
// in force.
//
// TakeKvSnapshot runs on the engine thread between two steps (AsyncEngine does it when a
// snapshot was asked for), so the copy is consistent: every in-use block is in some request's
// table, the counts add up to the pool. It only copies: each pool's state bytes (one memcpy,
// kv::BlockPool::States), the reference counts of shared blocks, the request tables; prefix
// hashes are not copied (TakeKvBlockInfo answers one block). Encoding happens later, on another
// thread. Cost against a decode step: bench/kv_snapshot_bench.cc, docs/PERFORMANCE.md.
//
// Thread safety: a KvSnapshot is a plain value, immutable once taken and shared as
// shared_ptr<const KvSnapshot>; TakeKvSnapshot itself must run on the engine's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "kv/block_pool.h"
#include "kv/config.h"
#include "kv/hash.h"
#include "offload/metrics.h"
#include "scheduler/request.h"

namespace kvserve::engine {

class Engine;

// "null", "free", "cached", "used", "shared" (kv::BlockState: cached = unreferenced but holding
// a prefix hash, evictable and reusable by a prefix hit; shared = held by several requests).
const char* KvBlockStateName(kv::BlockState state);

struct KvGroupSnapshot {
  std::string kind;                 // kv::SpecKindName: "full_attention", ...
  std::string spec;                 // kv::DescribeSpec
  int num_writer_layers = 0;
  int num_reader_layers = 0;
  int64_t block_bytes = 0;          // arena bytes per block
  double bytes_per_token = 0;       // all writer layers
  std::string bytes_per_token_formula;
  int32_t num_blocks = 0;           // usable (the null block excluded)
  int32_t num_used = 0;             // num_used + num_cached + num_free == num_blocks
  int32_t num_cached = 0;           // (num_used counts used and shared blocks)
  int32_t num_free = 0;
  int64_t num_evictions = 0;        // cached blocks reused since start
  std::vector<kv::BlockState> states;  // [block id], block 0 (the null block) included
  // (block, reference count) of every shared block, by id; used blocks have 1, others 0.
  std::vector<std::pair<kv::BlockId, int32_t>> shared_ref_counts;

  int32_t RefCount(kv::BlockId block) const;
};

enum class KvRequestState : uint8_t { kRunning, kWaiting, kLoading, kPreempted };
// "running", "waiting", "loading" (its prefix is being read from a tier), "preempted"
// (waiting again after a preemption).
const char* KvRequestStateName(KvRequestState state);

struct KvRequestSnapshot {
  scheduler::RequestId id = 0;
  KvRequestState state = KvRequestState::kWaiting;
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  int64_t max_tokens = 0;              // output tokens it may produce
  int64_t num_computed_tokens = 0;     // tokens with KV in the cache
  // Where its prompt came from at its latest admission: num_cached_tokens from caches (the
  // device pool and the tiers), of which tier_tokens[kind] were loaded from the offload tier
  // of that offload::TierKind (cpu, file, redis); the rest of the prompt is computed.
  int64_t num_cached_tokens = 0;
  std::array<int64_t, 3> tier_tokens{};
  int64_t num_preemptions = 0;
  std::vector<std::vector<kv::BlockId>> block_tables;  // [group]: block ids, kNullBlock = none
};

struct KvTierSnapshot {
  offload::TierStats stats;                // the same counters /metrics renders
  std::optional<int64_t> capacity_bytes;   // the CPU tier's bound; files and Redis: unbounded
};

// The knobs in force (vLLM names) and the startup KV accounting.
struct KvSettings {
  int max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
  int block_size = 0;
  uint64_t kv_cache_memory_bytes = 0;
  std::string kv_cache_dtype;
  bool enable_prefix_caching = true;
  int num_threads = 0;
  int64_t num_speculative_tokens = 0;
  int64_t kv_cache_tokens = 0;         // "KV cache: N tokens"
  double max_concurrency = 0;          // at max-model-len
  double bytes_per_token = 0;          // all groups
  std::vector<std::string> capacity_report;  // kv::FormatCapacityReport, as logged at startup
};

struct KvSnapshot {
  uint64_t sequence = 0;          // 1, 2, ... in the order taken
  double uptime_s = 0;            // since the engine started
  int64_t unix_ms = 0;            // wall clock when taken
  double take_seconds = 0;        // what the copy cost on the engine thread
  KvSettings settings;
  std::vector<KvGroupSnapshot> groups;
  std::vector<KvRequestSnapshot> requests;  // running (admission order), loading, waiting (FIFO)
  std::vector<KvTierSnapshot> tiers;        // cpu, then file, then redis, as configured
  MetricsSnapshot metrics;                  // the engine's totals, as /metrics shows them
  double prefix_hit_rate = 0;               // hits / queries (tokens), 0 before any query
};

// One block in full (what hovering it on the dashboard shows).
struct KvBlockInfo {
  kv::BlockState state = kv::BlockState::kFree;
  int32_t ref_count = 0;
  std::optional<kv::BlockHash> hash;
  std::vector<scheduler::RequestId> owners;  // requests whose table holds it
};

// The settings part, computed once (it does not change while the engine runs).
KvSettings MakeKvSettings(const Engine& engine);

// Block `block` of group `group`; nullopt when either is out of range. note: on the engine
// thread, between steps.
std::optional<KvBlockInfo> TakeKvBlockInfo(const Engine& engine, int group, kv::BlockId block);

// Copies the engine's state. note: on the engine thread, between steps.
KvSnapshot TakeKvSnapshot(const Engine& engine, const KvSettings& settings, uint64_t sequence,
                          double uptime_s);

// Checks what the dashboard relies on: per group used + cached + free == blocks and the states
// agree with the counts; every used block's reference count equals the number of request
// table entries holding it and every table entry is a used block; cached and free blocks
// belong to no request. Ok or Internal naming the first violation.
Status CheckKvSnapshot(const KvSnapshot& snapshot);

}  // namespace kvserve::engine
