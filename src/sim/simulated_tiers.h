// SimulatedTiers: the KV tiers below the device pool (kv/kv_connector.h) in virtual time, with
// no bytes moved.
//
// The CPU tier is the real offload::CpuTier (its LRU, byte bound, eviction order and
// counters): every block of a KV group is stored as the same shared zero page of that group's
// block size, so the tier accounts bytes exactly while holding only its index. The file tier
// and Redis are sets of keys (both unbounded, as the real ones are by kvserve). The policy is
// offload/offload_manager.h's, step for step:
//   computed block (KV manager callback) -> written through to the file tier and Redis;
//   device eviction (KV manager callback) -> into the CPU tier; a CPU eviction -> file tier;
//   Contains: CPU, then file, then Redis;
//   a load takes each block from the first tier holding it and promotes blocks found below
//   the CPU tier into it.
// Differences, by design: writes land at once (the real ones queue on write threads and are
// dropped beyond 256 MiB pending); Contains is exact (the real connector remembers answers for
// a second); a load's blocks are looked up when it starts, not when each read runs.
//
// Time: loads run one after another on one read queue; a load of blocks from tiers t takes
// sum over t of (latency_t + bytes_t / bandwidth_t) (hardware.h TierSpeed). The copies the
// real connector makes on the scheduler thread are free unless the profile gives a
// synchronous store bandwidth (cpu_tier.store_bandwidth: a CPU server's memcpy), in which case
// TakeStoreSeconds() reports the time the step spent copying: a device eviction into the CPU
// tier (OffloadManager::StoreToCpu copies the block), and a computed block written through
// (OffloadManager::WriteThrough copies it for the write threads when the file tier lacks it
// or Redis is configured). The write threads' own work and promotions on the read threads
// run beside the step and cost it nothing here.
// Thread safety: none (the simulator's thread).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_connector.h"
#include "offload/config.h"
#include "offload/cpu_tier.h"
#include "offload/metrics.h"
#include "sim/hardware.h"

namespace kvserve::sim {

class SimulatedTiers final : public kv::KvConnector {
 public:
  // `config` says which tiers exist (cpu_bytes_to_use = this rank's CPU tier); `speed` gives
  // their read speeds. Installs the computed-block and eviction callbacks on `kv` (which
  // outlives this object). InvalidArgument when a configured tier has no bandwidth.
  static Result<std::unique_ptr<SimulatedTiers>> Create(const offload::OffloadConfig& config,
                                                        const HardwareProfile& speed,
                                                        kv::KvCacheManager* kv);
  ~SimulatedTiers() override;

  // ---- kv::KvConnector ----
  bool Contains(int group, const kv::BlockHash& hash) override;
  void StartLoad(kv::RequestId id, std::vector<kv::BlockLoad> loads) override;
  // The loads whose virtual completion time is <= now (`wait` is ignored: the simulator
  // advances time itself, to NextCompletion()).
  std::vector<kv::FinishedLoad> PollLoads(std::chrono::milliseconds wait) override;
  void CancelLoad(kv::RequestId id) override;

  // ---- simulator API ----
  void SetNow(double seconds) { now_ = seconds; }
  // The earliest completion time of a load in flight; nullopt when none.
  std::optional<double> NextCompletion() const;
  // Seconds of synchronous copies (evictions into the CPU tier, write-through) since the last
  // call.
  double TakeStoreSeconds();
  // cpu, then file and redis when configured (offload::TierStats fields).
  std::vector<offload::TierStats> Stats() const;

 private:
  enum Kind { kCpu = 0, kFile = 1, kRedis = 2 };
  struct Pending {
    kv::RequestId id = 0;
    size_t num_blocks = 0;
    double done = 0;
    std::vector<int64_t> tokens_per_tier;  // as kv::FinishedLoad's
  };
  struct KeyTier {  // the file tier or Redis: a set of keys
    bool enabled = false;
    std::unordered_set<offload::BlockKey, offload::BlockKeyHasher> keys;
    offload::TierStats stats;
    void Put(const offload::BlockKey& key, int64_t bytes);
  };

  SimulatedTiers(const offload::OffloadConfig& config, const HardwareProfile& speed,
                 kv::KvCacheManager* kv);
  int64_t BlockBytes(int group) const { return pages_.at(group)->size(); }
  void StoreToCpu(const offload::BlockKey& key);
  void WriteThrough(const offload::BlockKey& key);
  void AddCopy(int group);  // one block copied on the scheduler thread
  // The tier a load would take `key` from; nullopt when none holds it.
  std::optional<Kind> Locate(const offload::BlockKey& key);

  offload::OffloadConfig config_;
  std::array<TierSpeed, 3> speed_;
  kv::KvCacheManager* kv_;
  std::vector<offload::SharedBytes> pages_;  // [group]: the one zero page of that size
  std::unique_ptr<offload::CpuTier> cpu_;
  KeyTier file_;
  KeyTier redis_;
  std::vector<Pending> pending_;  // in StartLoad order
  double now_ = 0;
  double read_free_at_ = 0;       // when the read queue is idle
  double store_bandwidth_ = 0;    // synchronous copies; 0: free
  double store_seconds_ = 0;
};

}  // namespace kvserve::sim
