// GroupManager: one KV group's per-request block tables over that group's BlockPool, and the
// spec kind's rules for prefix hits and for blocks a request no longer needs.
//
//   FullGroupManager     full attention and compressed latent: a prefix of k blocks is a hit
//                        when blocks [0, k) are all cached; nothing is released early.
//   SlidingGroupManager  sliding window W: a prefix of L = k * B tokens is a hit when the
//                        blocks covering [L - W, L) are cached (the next token attends to
//                        (L - W, L], so one token of margin); blocks wholly before
//                        num_computed - W are released while the request runs.
//
// Owns: the block tables (one vector of block ids per request; table[i] covers tokens
// [i * B, (i + 1) * B)). Holds one reference in the pool per non-null table entry.
// Thread safety: none (scheduler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/hash.h"
#include "kv/spec.h"

namespace kvserve::kv {

using RequestId = uint64_t;

// A hit-table entry that no device block holds but a lower tier does (offload/): AddHitBlocks
// gives it a fresh block, which the caller fills from the tier before registering it.
inline constexpr BlockId kLoadBlock = -1;

// Whether a tier below the device pool holds this group's block with `hash`; null: none.
using LowerTierLookup = std::function<bool(const BlockHash& hash)>;

class GroupManager {
 public:
  GroupManager(int block_size, BlockPool* pool) : block_size_(block_size), pool_(pool) {}
  virtual ~GroupManager() = default;

  // The largest k <= max_blocks such that a prefix of k blocks is a hit for this group, a
  // block counting as present when the pool caches it or `lower` (if set) holds it.
  // Does not change any state.
  virtual int64_t LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                                   const LowerTierLookup& lower) const = 0;
  // The table entries [0, k) for a hit of k blocks: the cached block, kLoadBlock where only
  // `lower` holds it, kNullBlock where the group needs nothing. note: k must be a hit.
  virtual std::vector<BlockId> HitBlocks(std::span<const BlockHash> hashes, int64_t k,
                                         const LowerTierLookup& lower) const = 0;
  // How many leading table entries a request with num_computed_tokens no longer needs.
  virtual int64_t NumSkippedBlocks(int64_t num_computed_tokens) const { return 0; }

  // Pool blocks needed to hold total_tokens after adopting hit_blocks (for a new request):
  // new blocks (kLoadBlock entries included) plus hit blocks that must leave the free queue.
  int64_t NumBlocksNeeded(RequestId id, int64_t total_tokens,
                          std::span<const BlockId> hit_blocks) const;
  // Adopts hit_blocks as the start of a new request's table (adds references); each
  // kLoadBlock entry gets a fresh block, returned as (table index, block), and is left
  // unregistered (RegisterLoadedBlock, once its bytes are in). note: NumBlocksNeeded blocks
  // must be free (CHECKed).
  std::vector<std::pair<int64_t, BlockId>> AddHitBlocks(RequestId id,
                                                        std::span<const BlockId> hit_blocks);
  // Grows the table to cover total_tokens; returns the new ids. note: NumBlocksNeeded blocks
  // must be free (CHECKed).
  std::vector<BlockId> AllocateTo(RequestId id, int64_t total_tokens);
  // Releases what NumSkippedBlocks allows; the entries become kNullBlock.
  void RemoveSkippedBlocks(RequestId id, int64_t num_computed_tokens);
  // Registers table entries [num cached, num_full_blocks) under hashes[i]; appends the
  // blocks this call registered to `registered` when set.
  void CacheFullBlocks(RequestId id, std::span<const BlockHash> hashes, int64_t num_full_blocks,
                       std::vector<std::pair<BlockId, BlockHash>>* registered = nullptr);
  // Releases the table's blocks past those covering [0, total_tokens), last first (blocks
  // that held only rejected draft positions). note: none of them is cached.
  void TruncateTo(RequestId id, int64_t total_tokens);
  // Drops the request's references, last block first.
  void Free(RequestId id);

  bool HasRequest(RequestId id) const { return tables_.count(id) != 0; }
  const std::vector<BlockId>& Table(RequestId id) const;
  const std::unordered_map<RequestId, std::vector<BlockId>>& tables() const { return tables_; }
  int block_size() const { return block_size_; }
  BlockPool& pool() const { return *pool_; }

 protected:
  // Whether block `hash` is cached here or held by `lower`.
  bool Present(const BlockHash& hash, const LowerTierLookup& lower) const {
    return pool_->LookupCached(hash).has_value() || (lower && lower(hash));
  }
  // The cached block, else kLoadBlock. note: Present(hash, lower).
  BlockId HitEntry(const BlockHash& hash) const {
    return pool_->LookupCached(hash).value_or(kLoadBlock);
  }
  int64_t CeilBlocks(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  int block_size_;
  BlockPool* pool_;  // not owned

 private:
  struct Progress {
    int64_t num_skipped = 0;  // leading entries already released
    int64_t num_cached = 0;   // leading entries already registered in the prefix cache
  };
  std::unordered_map<RequestId, std::vector<BlockId>> tables_;
  std::unordered_map<RequestId, Progress> progress_;
};

class FullGroupManager final : public GroupManager {
 public:
  using GroupManager::GroupManager;
  int64_t LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                           const LowerTierLookup& lower) const override;
  std::vector<BlockId> HitBlocks(std::span<const BlockHash> hashes, int64_t k,
                                 const LowerTierLookup& lower) const override;
};

class SlidingGroupManager final : public GroupManager {
 public:
  SlidingGroupManager(int block_size, BlockPool* pool, int window)
      : GroupManager(block_size, pool), window_(window) {}
  int64_t LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                           const LowerTierLookup& lower) const override;
  std::vector<BlockId> HitBlocks(std::span<const BlockHash> hashes, int64_t k,
                                 const LowerTierLookup& lower) const override;
  int64_t NumSkippedBlocks(int64_t num_computed_tokens) const override;

  // First block a hit of k blocks needs: floor(max(0, k * B - W) / B).
  // Example: B 4, W 8, k 3 (L 12): (12 - 8) / 4 = 1, so blocks 1 and 2 cover [4, 12).
  int64_t FirstNeededBlock(int64_t k) const;

 private:
  int window_;
};

std::unique_ptr<GroupManager> MakeGroupManager(const KvLayoutSpec& spec, int block_size,
                                               BlockPool* pool);

}  // namespace kvserve::kv
