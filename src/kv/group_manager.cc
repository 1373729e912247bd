#include "kv/group_manager.h"

#include <algorithm>

#include "core/check.h"

namespace kvserve::kv {

const std::vector<BlockId>& GroupManager::Table(RequestId id) const {
  auto it = tables_.find(id);
  CHECK(it != tables_.end()) << "unknown request " << id;
  return it->second;
}

int64_t GroupManager::NumBlocksNeeded(RequestId id, int64_t total_tokens,
                                      std::span<const BlockId> hit_blocks) const {
  auto it = tables_.find(id);
  const int64_t have = (it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size())) +
                       static_cast<int64_t>(hit_blocks.size());
  int64_t needed = std::max<int64_t>(0, CeilBlocks(total_tokens) - have);
  for (BlockId b : hit_blocks) {
    if (b == kLoadBlock) {
      ++needed;  // a fresh block
    } else if (b != kNullBlock && pool_->RefCount(b) == 0) {
      ++needed;  // leaves the free queue
    }
  }
  return needed;
}

std::vector<std::pair<int64_t, BlockId>> GroupManager::AddHitBlocks(
    RequestId id, std::span<const BlockId> hit_blocks) {
  CHECK(!HasRequest(id)) << "request " << id << " already has blocks";
  std::vector<BlockId>& table = tables_[id];
  table.assign(hit_blocks.begin(), hit_blocks.end());
  // Touch every cached block before allocating any fresh one: allocation may evict free
  // cached blocks, and those of this hit must not be among them.
  std::vector<int64_t> to_load;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] == kLoadBlock) {
      to_load.push_back(static_cast<int64_t>(i));
      table[i] = kNullBlock;
    }
  }
  pool_->Touch(table);
  std::vector<std::pair<int64_t, BlockId>> loads;
  if (!to_load.empty()) {
    std::optional<std::vector<BlockId>> fresh =
        pool_->Allocate(static_cast<int32_t>(to_load.size()));
    CHECK(fresh.has_value()) << "AddHitBlocks without enough free blocks";
    for (size_t j = 0; j < to_load.size(); ++j) {
      table[to_load[j]] = (*fresh)[j];
      loads.emplace_back(to_load[j], (*fresh)[j]);
    }
  }
  Progress& p = progress_[id];
  p.num_cached = static_cast<int64_t>(hit_blocks.size());
  // Leading null entries of a sliding hit count as released.
  while (p.num_skipped < p.num_cached && hit_blocks[p.num_skipped] == kNullBlock) ++p.num_skipped;
  return loads;
}

std::vector<BlockId> GroupManager::AllocateTo(RequestId id, int64_t total_tokens) {
  std::vector<BlockId>& table = tables_[id];
  progress_.try_emplace(id);
  const int64_t n =
      std::max<int64_t>(0, CeilBlocks(total_tokens) - static_cast<int64_t>(table.size()));
  std::optional<std::vector<BlockId>> fresh = pool_->Allocate(static_cast<int32_t>(n));
  CHECK(fresh.has_value()) << "AllocateTo without enough free blocks";
  table.insert(table.end(), fresh->begin(), fresh->end());
  return *std::move(fresh);
}

void GroupManager::RemoveSkippedBlocks(RequestId id, int64_t num_computed_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  std::vector<BlockId>& table = it->second;
  Progress& p = progress_[id];
  const int64_t end =
      std::min<int64_t>(NumSkippedBlocks(num_computed_tokens), static_cast<int64_t>(table.size()));
  for (int64_t i = end - 1; i >= p.num_skipped; --i) {  // last first, like Free
    pool_->Free(std::span<const BlockId>(&table[i], 1));
    table[i] = kNullBlock;
  }
  p.num_skipped = std::max(p.num_skipped, end);
}

void GroupManager::CacheFullBlocks(RequestId id, std::span<const BlockHash> hashes,
                                   int64_t num_full_blocks,
                                   std::vector<std::pair<BlockId, BlockHash>>* registered) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  const std::vector<BlockId>& table = it->second;
  Progress& p = progress_[id];
  const int64_t end = std::min<int64_t>(num_full_blocks, static_cast<int64_t>(table.size()));
  CHECK_LE(end, static_cast<int64_t>(hashes.size()));
  for (int64_t i = p.num_cached; i < end; ++i) {
    if (table[i] != kNullBlock && pool_->CacheFullBlock(table[i], hashes[i]) && registered) {
      registered->emplace_back(table[i], hashes[i]);
    }
  }
  p.num_cached = std::max(p.num_cached, end);
}

void GroupManager::TruncateTo(RequestId id, int64_t total_tokens) {
  std::vector<BlockId>& table = tables_.at(id);
  const int64_t keep = CeilBlocks(total_tokens);
  CHECK_GE(keep, progress_.at(id).num_cached) << "truncating cached blocks of request " << id;
  while (static_cast<int64_t>(table.size()) > keep) {
    pool_->Free(std::span<const BlockId>(&table.back(), 1));
    table.pop_back();
  }
}

void GroupManager::Free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  std::vector<BlockId> reversed(it->second.rbegin(), it->second.rend());
  pool_->Free(reversed);
  tables_.erase(it);
  progress_.erase(id);
}

int64_t FullGroupManager::LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                                           const LowerTierLookup& lower) const {
  const int64_t limit = std::min<int64_t>(max_blocks, static_cast<int64_t>(hashes.size()));
  int64_t k = 0;
  while (k < limit && Present(hashes[k], lower)) ++k;
  return k;
}

std::vector<BlockId> FullGroupManager::HitBlocks(std::span<const BlockHash> hashes, int64_t k,
                                                 const LowerTierLookup& lower) const {
  std::vector<BlockId> out;
  out.reserve(k);
  for (int64_t i = 0; i < k; ++i) {
    CHECK(Present(hashes[i], lower)) << "block " << i << " of the hit is gone";
    out.push_back(HitEntry(hashes[i]));
  }
  return out;
}

int64_t SlidingGroupManager::FirstNeededBlock(int64_t k) const {
  return std::max<int64_t>(0, k * block_size_ - window_) / block_size_;
}

// Scans right to left keeping the run of cached blocks [i, end); the first time the run
// reaches FirstNeededBlock(end), `end` is the answer (the largest, since end only shrinks).
// Example: B 4, W 8, cached {1, 2}, max 6: misses at 5, 4, 3 set end = 3; the run [2, 3)
// does not yet reach FirstNeededBlock(3) = 1; [1, 3) does: the hit is 3 blocks (12 tokens).
int64_t SlidingGroupManager::LongestHitBlocks(std::span<const BlockHash> hashes,
                                              int64_t max_blocks,
                                              const LowerTierLookup& lower) const {
  int64_t end = std::min<int64_t>(max_blocks, static_cast<int64_t>(hashes.size()));
  for (int64_t i = end - 1; i >= 0; --i) {
    if (!Present(hashes[i], lower)) {
      end = i;
      continue;
    }
    if (i <= FirstNeededBlock(end)) return end;
  }
  return end;  // 0 here, or a run that reached block 0
}

std::vector<BlockId> SlidingGroupManager::HitBlocks(std::span<const BlockHash> hashes, int64_t k,
                                                    const LowerTierLookup& lower) const {
  std::vector<BlockId> out(k, kNullBlock);
  for (int64_t i = FirstNeededBlock(k); i < k; ++i) {
    CHECK(Present(hashes[i], lower)) << "block " << i << " of the hit is gone";
    out[i] = HitEntry(hashes[i]);
  }
  return out;
}

// Tokens before num_computed - W are never attended again; block i is wholly before that
// when (i + 1) * B <= num_computed - W. Example: B 4, W 8, 21 computed: (21 - 8) / 4 = 3
// blocks (tokens [0, 12)) can go.
int64_t SlidingGroupManager::NumSkippedBlocks(int64_t num_computed_tokens) const {
  return std::max<int64_t>(0, num_computed_tokens - window_) / block_size_;
}

std::unique_ptr<GroupManager> MakeGroupManager(const KvLayoutSpec& spec, int block_size,
                                               BlockPool* pool) {
  if (const auto* s = std::get_if<SlidingWindow>(&spec)) {
    return std::make_unique<SlidingGroupManager>(block_size, pool, s->window);
  }
  return std::make_unique<FullGroupManager>(block_size, pool);
}

}  // namespace kvserve::kv
