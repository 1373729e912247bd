#include "kv/block_pool.h"

#include <fmt/format.h>

#include "core/check.h"

namespace kvserve::kv {

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : num_blocks_(num_blocks),
      head_(num_blocks),
      enable_caching_(enable_caching),
      hash_to_block_(enable_caching ? static_cast<size_t>(num_blocks) : 0) {
  CHECK_GE(num_blocks, 2) << "a pool needs the null block and one usable block";
  blocks_.resize(static_cast<size_t>(num_blocks) + 1);
  blocks_[head_].prev = head_;
  blocks_[head_].next = head_;
  // The null block is permanently referenced so that it never looks free.
  blocks_[kNullBlock].ref_cnt = 1;
  states_.assign(static_cast<size_t>(num_blocks), BlockState::kFree);
  states_[kNullBlock] = BlockState::kNull;
  for (BlockId id = 1; id < num_blocks; ++id) QueuePushBack(id);
}

BlockState BlockPool::StateOf(const Block& b) {
  return b.ref_cnt > 1 ? BlockState::kShared
         : b.ref_cnt == 1 ? BlockState::kUsed
         : b.hash ? BlockState::kCached
                  : BlockState::kFree;
}

void BlockPool::UpdateState(BlockId id) { states_[id] = StateOf(blocks_[id]); }

double BlockPool::Usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(NumUsableBlocks());
}

void BlockPool::QueuePushBack(BlockId id) {
  Block& b = blocks_[id];
  DCHECK(!b.in_queue);
  const int32_t tail = blocks_[head_].prev;
  b.prev = tail;
  b.next = head_;
  blocks_[tail].next = id;
  blocks_[head_].prev = id;
  b.in_queue = true;
  ++num_free_;
}

void BlockPool::QueueRemove(BlockId id) {
  Block& b = blocks_[id];
  DCHECK(b.in_queue);
  blocks_[b.prev].next = b.next;
  blocks_[b.next].prev = b.prev;
  b.in_queue = false;
  --num_free_;
}

std::optional<BlockId> BlockPool::LookupCached(const BlockHash& hash) const {
  return hash_to_block_.Find(hash);
}

void BlockPool::Evict(BlockId id) {
  Block& b = blocks_[id];
  if (!b.hash.has_value()) return;
  const BlockHash hash = *b.hash;
  hash_to_block_.Erase(hash);
  b.hash.reset();
  UpdateState(id);
  ++num_evictions_;
  if (on_evict_) on_evict_(id, hash);
}

int64_t BlockPool::EvictAllFree() {
  int64_t n = 0;
  for (BlockId id = blocks_[head_].next; id != head_; id = blocks_[id].next) {
    if (!blocks_[id].hash.has_value()) continue;
    Evict(id);
    ++n;
  }
  return n;
}

std::optional<std::vector<BlockId>> BlockPool::Allocate(int32_t n) {
  CHECK_GE(n, 0);
  if (n > num_free_) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = blocks_[head_].next;  // least recently used
    QueueRemove(id);
    Evict(id);
    blocks_[id].ref_cnt = 1;
    UpdateState(id);
    out.push_back(id);
  }
  return out;
}

void BlockPool::Touch(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    if (id == kNullBlock) continue;
    CHECK(id > 0 && id < num_blocks_) << "block " << id;
    Block& b = blocks_[id];
    if (b.ref_cnt == 0) QueueRemove(id);
    ++b.ref_cnt;
    UpdateState(id);
  }
}

void BlockPool::Free(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    if (id == kNullBlock) continue;
    CHECK(id > 0 && id < num_blocks_) << "block " << id;
    Block& b = blocks_[id];
    CHECK_GT(b.ref_cnt, 0) << "double free of block " << id;
    if (--b.ref_cnt == 0) QueuePushBack(id);
    UpdateState(id);
  }
}

bool BlockPool::CacheFullBlock(BlockId id, const BlockHash& hash) {
  if (!enable_caching_ || id == kNullBlock) return false;
  Block& b = blocks_.at(id);
  CHECK_GT(b.ref_cnt, 0) << "caching a free block " << id;
  if (b.hash.has_value()) {
    CHECK(*b.hash == hash) << "block " << id << " re-cached under a different hash";
    return false;
  }
  if (!hash_to_block_.Insert(hash, id)) return false;
  b.hash = hash;
  UpdateState(id);
  return true;
}

Status BlockPool::CheckIntegrity() const {
  if (blocks_[kNullBlock].in_queue || blocks_[kNullBlock].hash.has_value() ||
      blocks_[kNullBlock].ref_cnt != 1) {
    return Internal("null block was allocated, cached or freed");
  }
  // Walk the queue: links consistent, members have ref 0, length == num_free_.
  int32_t count = 0;
  for (int32_t id = blocks_[head_].next, prev = head_; id != head_;
       prev = id, id = blocks_[id].next) {
    if (id <= 0 || id >= num_blocks_) return Internal(fmt::format("queue holds id {}", id));
    if (blocks_[id].prev != prev) return Internal(fmt::format("broken prev link at {}", id));
    if (!blocks_[id].in_queue || blocks_[id].ref_cnt != 0) {
      return Internal(fmt::format("queued block {} has ref {}", id, blocks_[id].ref_cnt));
    }
    if (++count > num_blocks_) return Internal("free queue has a cycle");
  }
  if (count != num_free_) {
    return Internal(fmt::format("free queue has {} blocks, counter says {}", count, num_free_));
  }
  size_t num_hashed = 0;
  for (BlockId id = 1; id < num_blocks_; ++id) {
    const Block& b = blocks_[id];
    if (b.ref_cnt < 0) return Internal(fmt::format("block {} has ref {}", id, b.ref_cnt));
    if (!b.in_queue && b.ref_cnt == 0) return Internal(fmt::format("block {} leaked", id));
    if (states_[id] != StateOf(b)) return Internal(fmt::format("block {} state is stale", id));
    if (!b.hash.has_value()) continue;
    ++num_hashed;
    if (hash_to_block_.Find(*b.hash) != std::optional<BlockId>(id)) {
      return Internal(fmt::format("block {} hash not mapped to it", id));
    }
  }
  if (num_hashed != hash_to_block_.size()) {
    return Internal(
        fmt::format("{} hashed blocks, {} map entries", num_hashed, hash_to_block_.size()));
  }
  return Status::Ok();
}

}  // namespace kvserve::kv
