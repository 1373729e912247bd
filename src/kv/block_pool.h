// BlockPool: the block ids of one group's arena, their reference counts and the prefix cache.
//
// Owns: per-block metadata (ref count, optional hash), the free queue and the hash -> block
// map. It knows nothing about bytes; the arena (kv/arena.h) maps ids to memory.
//
// Invariants (CheckIntegrity):
//   - block kNullBlock (0) is reserved: never allocated, freed, cached or queued. Sliding
//     groups put it in block tables where a block left the window.
//   - every other block is either in the free queue with ref_cnt 0, or out of it with
//     ref_cnt > 0;
//   - a block with a hash is the value of hash_to_block_[hash] and vice versa;
//   - free queue length == NumFreeBlocks(); ordered least recently used first;
//   - States()[id] agrees with the block's ref count and hash.
// Free blocks keep their hash (a "cached free block") until allocation evicts them, so a
// later prefix hit can take them back out of the middle of the queue in O(1).
//
// Thread safety: none; the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/block_hash_table.h"
#include "kv/hash.h"

namespace kvserve::kv {

using BlockId = int32_t;
inline constexpr BlockId kNullBlock = 0;

// A block's state in one byte, kept current for every block (BlockPool::States), so a view of
// the whole pool (the live dashboard, engine/kv_snapshot.h) costs one copy of num_blocks bytes.
enum class BlockState : char {
  kNull = 'n',    // the reserved block 0
  kFree = 'f',    // ref 0, no hash
  kCached = 'c',  // ref 0, holds a prefix hash (evictable, reusable by a hit)
  kUsed = 'u',    // ref 1
  kShared = 's',  // ref 2 or more (a prefix shared by several requests)
};

// Called when a cached block is evicted (its page is about to be reused): the offload tiers
// copy the page out before the call returns.
using EvictionCallback = std::function<void(BlockId block, const BlockHash& hash)>;

class BlockPool {
 public:
  // num_blocks >= 2: the null block plus at least one usable block.
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  // Usable blocks (all but the null block).
  int32_t NumUsableBlocks() const { return num_blocks() - 1; }
  // Blocks in the free queue (cached or not): what Allocate can hand out.
  int32_t NumFreeBlocks() const { return num_free_; }
  // Fraction of usable blocks referenced by requests, in [0, 1].
  double Usage() const;

  int32_t RefCount(BlockId id) const { return blocks_.at(id).ref_cnt; }
  // [block id]: every block's state, as RefCount and HashOf say it.
  std::span<const BlockState> States() const { return states_; }
  std::optional<BlockHash> HashOf(BlockId id) const { return blocks_.at(id).hash; }

  // The cached block holding `hash`, if any. Does not change any state.
  std::optional<BlockId> LookupCached(const BlockHash& hash) const;

  // n fresh blocks with ref_cnt 1 and no hash, or nullopt (nothing changed) when fewer than
  // n are free. Takes least recently used blocks first; a cached one is evicted (its hash
  // dropped and reported to the eviction callback).
  std::optional<std::vector<BlockId>> Allocate(int32_t n);

  // Adds a reference to each block (a prefix hit); a block at ref 0 leaves the
  // free queue. note: never kNullBlock (skipped).
  void Touch(std::span<const BlockId> blocks);

  // Drops a reference from each block, in order; blocks reaching 0 join the queue tail in
  // that order (pass a request's blocks last-first so its tail is evicted first).
  // kNullBlock entries are skipped. CHECK-fails on a double free.
  void Free(std::span<const BlockId> blocks);

  // Registers a full, computed block under `hash`. If another block already holds the hash
  // (two requests computed the same content), this one stays uncached. No-op without caching.
  // True when this call registered the block.
  bool CacheFullBlock(BlockId block, const BlockHash& hash);

  // Evicts every cached block in the free queue (each reported to the eviction callback);
  // blocks held by requests keep their hashes. Returns how many were evicted.
  int64_t EvictAllFree();

  void SetEvictionCallback(EvictionCallback callback) { on_evict_ = std::move(callback); }
  int64_t num_evictions() const { return num_evictions_; }

  // Ok, or Internal naming the first broken invariant. O(num_blocks).
  Status CheckIntegrity() const;

 private:
  struct Block {
    int32_t ref_cnt = 0;
    std::optional<BlockHash> hash;
    bool in_queue = false;
    int32_t prev = 0;  // free queue links: indices into blocks_ (head_ is the list head)
    int32_t next = 0;
  };
  void QueuePushBack(BlockId id);
  void QueueRemove(BlockId id);
  void Evict(BlockId id);
  static BlockState StateOf(const Block& b);
  void UpdateState(BlockId id);  // states_[id] = StateOf(blocks_[id])

  int32_t num_blocks_;
  std::vector<Block> blocks_;  // index = BlockId, plus the list head at index num_blocks_
  std::vector<BlockState> states_;  // index = BlockId
  int32_t head_;               // head node of the circular free list (never a block)
  int32_t num_free_ = 0;
  bool enable_caching_;
  BlockHashTable hash_to_block_;  // cached blocks (sized for every block when caching)
  EvictionCallback on_evict_;
  int64_t num_evictions_ = 0;
};

}  // namespace kvserve::kv
