// KvCacheManager: the coordinator. One arena, pool and group manager per KV group; per
// request the block tables of every group, the request's block hashes and its cache salt.
//
// Invariants (CheckIntegrity): every pool is consistent; each block's ref count equals the
// number of request tables that hold it; a request's tables exist in every group.
// Hit rule (hybrid): a prefix of L tokens (a multiple of the block size) is served only when
// every group can serve it: full and latent groups need all blocks of [0, L), sliding groups
// the blocks covering [L - window, L). FindLongestCachedPrefix iterates to the largest L all
// groups accept. Worked example: block 4, window 8, prompt of 14 tokens, everything cached:
//   cap = ((14 - 1) / 4) * 4 = 12 (the last token is always computed, for its logits)
//   full group: blocks 0, 1, 2; sliding group: [12 - 8, 12) = [4, 12) = blocks 1, 2 (block 0
//   is kNullBlock in its table). num_cached_tokens = 12.
// If the sliding group had evicted block 1: sliding can serve L = 8? it needs [0, 8) = blocks
//   0, 1: no; L = 4 needs block 0: yes (if cached), so L = 4, and the full group takes 0 only.
//
// Thread safety: none; the scheduler thread owns it (the forward pass reads arenas through
// views, under the scheduler's rules).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/arena.h"
#include "kv/block_pool.h"
#include "kv/config.h"
#include "kv/group_manager.h"
#include "kv/hash.h"
#include "kv/kv_connector.h"
#include "tensor/kv_view.h"

namespace kvserve::kv {

// What the cache already holds for a prompt; pass it to AllocateNew.
struct PrefixHit {
  int64_t num_cached_tokens = 0;                       // a multiple of the block size
  // [group][block]: the cached block, kLoadBlock where only a lower tier holds it,
  // kNullBlock where the group needs nothing.
  std::vector<std::vector<BlockId>> blocks_per_group;
  int64_t num_load_blocks = 0;                         // kLoadBlock entries, all groups
  std::vector<BlockHash> block_hashes;                 // the prompt's full blocks
  std::string cache_salt;
};

// Blocks added by one allocation, per group (to zero, load from a tier, or log).
struct NewBlocks {
  std::vector<std::vector<BlockId>> per_group;
  std::vector<BlockLoad> loads;  // hit entries to fill from a lower tier, by index then group
};

struct KvCacheStats {
  double usage = 0;                 // max over groups of the referenced fraction
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up
  int64_t prefix_hit_tokens = 0;    // of which served from cache
  int64_t num_evictions = 0;        // cached blocks reused, all groups
  int64_t num_requests = 0;
};

struct KvCacheManagerOptions {
  bool enable_prefix_caching = true;
  bool allocate_memory = true;   // false: bookkeeping only (planner, simulator, tests)
  // Make the arenas resident at creation (KvArena::Prefault on every core), so no write to a
  // block takes a page fault later. The engine sets it when KV offload tiers are configured:
  // their loads land in blocks never written before (after a restart, all of them), where the
  // faults cost more than the copy.
  bool prefault_memory = false;
  // Without prefault_memory: make resident at creation the blocks that the first
  // prefault_tokens tokens of each group take (ceil(tokens / block_size) + 1 blocks, in the
  // free queue's first order), so the first step's K/V writes take no page fault: what a
  // server's first requests would otherwise pay in TTFT. The engine passes the larger of its
  // max_num_batched_tokens (one step's worth) and EngineConfig::prefault_kv_tokens; 0 for none.
  int64_t prefault_tokens = 0;
  ModelFingerprint fingerprint;  // namespaces the block hashes
};

// (group, block, hash) of a cached block about to be reused.
using GroupEvictionCallback = std::function<void(int group, BlockId block, const BlockHash& hash)>;

class KvCacheManager {
 public:
  // Sizes every group from the budget (ComputeCapacity) and allocates the arenas.
  static Result<std::unique_ptr<KvCacheManager>> Create(const KvCacheConfig& config,
                                                        uint64_t budget_bytes,
                                                        const KvCacheManagerOptions& options);

  const KvCacheConfig& config() const { return config_; }
  const KvCapacity& capacity() const { return capacity_; }
  // What creation made resident (KvCacheManagerOptions::prefault_memory / prefault_tokens):
  // bytes over all groups, and the seconds it took.
  int64_t prefaulted_bytes() const { return prefaulted_bytes_; }
  double prefault_seconds() const { return prefault_seconds_; }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  bool prefix_caching_enabled() const { return options_.enable_prefix_caching; }

  // ---- scheduler API ----

  // The longest cached prefix of `prompt` under the hybrid rule, capped at
  // ((len - 1) / block_size) * block_size; with `lower`, blocks a lower tier holds count too
  // (kLoadBlock entries). Changes nothing but the query statistics.
  PrefixHit FindLongestCachedPrefix(std::span<const TokenId> prompt, std::string_view cache_salt,
                                    KvConnector* lower = nullptr);

  // Starts request `id`: adopts the hit's blocks (fresh ones for kLoadBlock entries, listed
  // in NewBlocks::loads) and allocates slots for num_new_tokens after them. nullopt (nothing
  // changed) when any group lacks blocks.
  // note: `hit` must come from FindLongestCachedPrefix with no allocation in between (a hit
  // block evicted meanwhile is CHECKed).
  std::optional<NewBlocks> AllocateNew(RequestId id, PrefixHit hit, int64_t num_new_tokens);

  // Grows a running request to num_computed_tokens + num_new_tokens slots, after releasing
  // the sliding blocks it no longer needs. nullopt (no new blocks taken) when any group lacks
  // blocks: the scheduler preempts.
  std::optional<NewBlocks> AllocateSlots(RequestId id, int64_t num_computed_tokens,
                                         int64_t num_new_tokens);

  // Releases the blocks a request holds past those covering its first num_tokens slots: the
  // positions of rejected draft tokens (speculative decoding). note: num_tokens >= its
  // computed tokens, so no cached block is released.
  void TruncateSlots(RequestId id, int64_t num_tokens);

  // After a step: hashes the request's newly full blocks (tokens = all its tokens so far)
  // and registers those whose KV is computed (the first num_computed_tokens).
  void CacheFullBlocks(RequestId id, std::span<const TokenId> tokens, int64_t num_computed_tokens);

  // Registers blocks filled from a lower tier in the prefix cache. note: each is still in
  // request `id`'s table at its index.
  void CommitLoadedBlocks(RequestId id, std::span<const BlockLoad> loads);

  // Releases every block of the request (cached blocks stay reusable until evicted).
  void Free(RequestId id);

  bool HasRequest(RequestId id) const { return requests_.count(id) != 0; }
  KvCacheStats Stats() const;
  void SetEvictionCallback(GroupEvictionCallback callback);
  // vLLM's reset_prefix_cache: evicts every cached block no request holds (the eviction
  // callback sees each, so offload tiers keep them). Returns the number evicted.
  int64_t ResetPrefixCache();
  // Called from CacheFullBlocks for every computed block it registers (its bytes are final);
  // not for blocks registered by CommitLoadedBlocks.
  void SetComputedBlockCallback(GroupEvictionCallback callback) {
    on_computed_ = std::move(callback);
  }
  // Ok or Internal naming the first broken invariant. O(blocks + table entries).
  Status CheckIntegrity() const;

  // ---- model API (the views the forward pass reads) ----

  // table[i] holds tokens [i * block_size, (i + 1) * block_size) of the request.
  const std::vector<BlockId>& BlockTable(RequestId id, int group) const;
  tensor::PagedKvView KvView(int group) const;          // full / sliding groups
  tensor::PagedLatentView LatentView(int group) const;  // latent groups
  const KvArena& arena(int group) const { return *groups_.at(group).arena; }
  KvArena& arena(int group) { return *groups_.at(group).arena; }
  const BlockPool& pool(int group) const { return *groups_.at(group).pool; }

 private:
  struct Group {
    std::unique_ptr<KvArena> arena;
    std::unique_ptr<BlockPool> pool;
    std::unique_ptr<GroupManager> manager;
  };
  struct RequestState {
    std::vector<BlockHash> block_hashes;
    std::string cache_salt;
  };

  KvCacheManager(KvCacheConfig config, KvCapacity capacity, KvCacheManagerOptions options);
  int64_t LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                           const std::vector<LowerTierLookup>& lower) const;

  KvCacheConfig config_;
  KvCapacity capacity_;
  KvCacheManagerOptions options_;
  BlockHash root_hash_;
  std::vector<Group> groups_;
  std::unordered_map<RequestId, RequestState> requests_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prefaulted_bytes_ = 0;
  double prefault_seconds_ = 0;
  GroupEvictionCallback on_computed_;
  std::vector<std::pair<BlockId, BlockHash>> registered_;  // scratch for on_computed_
};

}  // namespace kvserve::kv
