// OffloadManager: the tiers below the device pool, their I/O threads and the transfer queue.
//
// Write policy (what a caller can rely on; the device side is offload/tiered_connector.h):
//   1. WriteThrough(key, bytes) runs on the scheduler thread when a computed block enters the
//      device prefix cache: the bytes are copied and queued to the file tier and to Redis on
//      the write threads. So a fleet sees a prefix as soon as one server computed it, and a
//      restart finds every block computed before it, whether or not it was ever evicted.
//   2. StoreToCpu(key, bytes) runs inside the device eviction callback: it copies the block
//      into the CPU tier at once (the device bytes are about to be reused). The CPU tier is
//      thus a victim cache of the device pool; a block it evicts (LRU) is queued to the file
//      tier again (a no-op when already there), so CPU evictions cascade to files.
//      Store(key, bytes) is both at once.
//   3. Guarantee: once Flush() returns (and at destruction), every block written through
//      whose write did not fail is in every configured secondary tier. Writes are dropped
//      (counted in dropped_stores) rather than block the scheduler when more than
//      max_pending_write_bytes are queued; a dropped or failed write only costs a later
//      recompute.
// Read policy: CountAvailable and LoadAsync look in CPU, then files, then Redis; LoadAsync
// copies each block straight into the caller's memory (the device block) on the read threads
// and promotes blocks found below the CPU tier into it.
// No tier ever serves bytes that failed their checks (offload/record.h).
//
// Owns: the tiers, the read and write pools. Thread safety: every method is thread-safe;
// the callers are the scheduler thread (Store, CountAvailable, LoadAsync) and the metrics
// reader (Stats).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "offload/config.h"
#include "offload/cpu_tier.h"
#include "offload/file_tier.h"
#include "offload/io_pool.h"
#include "offload/record.h"
#include "offload/redis_tier.h"

namespace kvserve::offload {

// One block of a load: its key and the caller's memory for its bytes (exactly the group's
// block bytes: the device block the request reserved for it).
struct LoadTarget {
  BlockKey key;
  std::span<std::byte> dest;
};

// The outcome of one load: targets[i].dest holds key i's checked bytes for i < num_loaded, the
// leading run that every tier together could serve; the destinations after it hold
// unspecified bytes (a partial read, a block that failed its checks).
struct LoadResult {
  size_t num_loaded = 0;
  std::array<int64_t, 3> blocks_per_tier{};  // indexed by TierKind, within the leading run
  std::vector<TierKind> tiers;               // [i < num_loaded]: where keys[i] came from
};

struct LoadState;  // offload_manager.cc

// A load in flight (OffloadManager::LoadAsync). The read threads write its destinations until
// it finishes or is cancelled. Move-only; destroying an unfinished load cancels it.
class PendingLoad {
 public:
  PendingLoad() = default;
  PendingLoad(PendingLoad&&) noexcept = default;
  PendingLoad& operator=(PendingLoad&&) noexcept;
  ~PendingLoad();

  // Waits up to `wait` for the load to finish; true when it has (Get will not block).
  bool WaitFor(std::chrono::milliseconds wait) const;
  // The outcome; blocks until the load finished. Call once.
  LoadResult Get();
  // Stops the load: when Cancel returns, nothing more is written into any destination
  // (copies and reads in flight are waited for; they take at most one block's I/O).
  void Cancel();

 private:
  friend class OffloadManager;
  std::shared_ptr<LoadState> state_;
  std::future<LoadResult> result_;
};

struct OffloadManagerOptions {
  uint64_t max_pending_write_bytes = 256ull << 20;
};

class OffloadManager {
 public:
  // Opens the tiers of `config` (a file tier directory that cannot be created, or a Redis that
  // is down, is logged and served around, not an error).
  static std::unique_ptr<OffloadManager> Create(const OffloadConfig& config,
                                                RecordIdentity identity,
                                                OffloadManagerOptions options = {});
  ~OffloadManager();  // waits for queued writes

  // ---- scheduler API ----

  // note (all three): bytes.size() is the group's block bytes.
  // A computed block: queued to the file tier and Redis (what they lack).
  void WriteThrough(const BlockKey& key, std::span<const std::byte> bytes);
  // A block leaving the device pool: into the CPU tier (unless it holds it already).
  void StoreToCpu(const BlockKey& key, std::span<const std::byte> bytes);
  // Both.
  void Store(const BlockKey& key, std::span<const std::byte> bytes);
  // How many leading keys some tier holds (a later load may still come up shorter).
  size_t CountAvailable(std::span<const BlockKey> keys);
  // Loads every target's block into its destination on the read threads, in batches of
  // consecutive targets (CPU tier: a copy from its payload; file tier: read in place and
  // checked there; Redis: a copy of the reply); blocks found below the CPU tier are promoted
  // into it. Nothing runs on the caller's thread. note: each dest has the group's block size.
  PendingLoad LoadAsync(std::vector<LoadTarget> targets);
  // Blocks until every queued write has been attempted.
  void Flush();

  // ---- metrics ----
  std::vector<TierStats> Stats() const;
  std::string PrometheusText() const;  // RenderPrometheus(Stats()) + manager counters
  int64_t num_dropped_stores() const { return dropped_stores_.load(); }

  const OffloadConfig& config() const { return config_; }
  const RecordIdentity& identity() const { return identity_; }
  CpuTier* cpu_tier() { return cpu_.get(); }
  FileTier* file_tier() { return file_.get(); }
  RedisTier* redis_tier() { return redis_.get(); }

 private:
  OffloadManager(OffloadConfig config, RecordIdentity identity, OffloadManagerOptions options);
  void CheckBlock(const BlockKey& key, std::span<const std::byte> bytes) const;
  // Queues a write of `bytes` to the file tier and/or Redis; false when dropped.
  bool QueueWrite(const BlockKey& key, SharedBytes bytes, bool to_file, bool to_redis);
  // Targets [begin, end) of a load, on a read thread.
  void LoadRange(const std::shared_ptr<LoadState>& state, size_t begin, size_t end);
  // The tier that served target `index` (its bytes are in its destination), or nullopt.
  std::optional<TierKind> LoadOne(const LoadTarget& target);
  static void Finish(LoadState* state);

  const OffloadConfig config_;
  const RecordIdentity identity_;
  const OffloadManagerOptions options_;
  std::unique_ptr<CpuTier> cpu_;
  std::unique_ptr<FileTier> file_;
  std::unique_ptr<RedisTier> redis_;
  std::unique_ptr<IoPool> readers_;
  std::unique_ptr<IoPool> writers_;
  std::atomic<int64_t> pending_write_bytes_{0};
  std::atomic<int64_t> dropped_stores_{0};
  std::atomic<int64_t> load_requests_{0};
};

}  // namespace kvserve::offload
