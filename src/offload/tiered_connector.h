// TieredKvConnector: the device KV pool's link to the offload tiers (kv/kv_connector.h).
//
//   store: every computed block the KV manager registers in its prefix cache is written
//          through to the file tier and Redis (OffloadManager::WriteThrough), and every
//          cached block that leaves the device pool goes to the CPU tier (StoreToCpu); see
//          offload_manager.h for the write policy and its guarantee.
//   load:  StartLoad hands the request's tier-only blocks, with the device blocks the
//          scheduler reserved for them, to the read threads, which copy each block's bytes
//          straight into its device block (OffloadManager::LoadAsync); PollLoads, on the
//          scheduler thread, only reports finished loads. CancelLoad returns once no read
//          thread can write the aborted request's blocks any more.
//
// Owns: the OffloadManager and the loads in flight. Holds: the KV manager (not owned; it
// outlives this object). Thread safety: scheduler thread only (Stats-like reads of the
// manager are thread-safe).
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_connector.h"
#include "offload/offload_manager.h"

namespace kvserve::offload {

class TieredKvConnector final : public kv::KvConnector {
 public:
  // Installs the computed-block and eviction callbacks on `kv`. note: kv outlives this object.
  TieredKvConnector(std::unique_ptr<OffloadManager> manager, kv::KvCacheManager* kv);
  ~TieredKvConnector() override;  // removes the callback, waits for queued writes

  // Whether a tier holds the block. Answers are remembered for kContainsMemo: a request that
  // waits for room repeats its prefix lookup every step, and each fresh answer may cost a
  // Redis round trip. Blocks this server's device pool evicts are remembered as present at
  // once (they were stored to the CPU tier or written through when computed); a block
  // another server wrote, or a tier dropped, is seen within kContainsMemo (a stale "present"
  // only makes a load come up short, which the scheduler recomputes).
  bool Contains(int group, const kv::BlockHash& hash) override;
  static constexpr std::chrono::milliseconds kContainsMemo{1000};
  void StartLoad(kv::RequestId id, std::vector<kv::BlockLoad> loads) override;
  std::vector<kv::FinishedLoad> PollLoads(std::chrono::milliseconds wait) override;
  void CancelLoad(kv::RequestId id) override;

  OffloadManager& manager() { return *manager_; }
  const OffloadManager& manager() const { return *manager_; }

 private:
  struct Pending {
    kv::RequestId id = 0;
    std::vector<kv::BlockLoad> loads;
    PendingLoad load;
  };
  std::span<std::byte> BlockBytes(int group, kv::BlockId block) const;
  // FinishedLoad::tokens_per_tier of a load (indexed by TierKind).
  std::vector<int64_t> TokensPerTier(const Pending& pending, const LoadResult& result) const;

  struct Memo {
    bool present = false;
    std::chrono::steady_clock::time_point at;
  };
  void Remember(const BlockKey& key, bool present, std::chrono::steady_clock::time_point now);

  std::unique_ptr<OffloadManager> manager_;
  kv::KvCacheManager* kv_;
  std::vector<Pending> pending_;  // in StartLoad order
  std::unordered_map<BlockKey, Memo, BlockKeyHasher> memo_;  // Contains answers (scheduler thread)
};

}  // namespace kvserve::offload
