#include "kv/kv_cache_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "core/units.h"

namespace kvserve::kv {

KvCacheManager::KvCacheManager(KvCacheConfig config, KvCapacity capacity,
                               KvCacheManagerOptions options)
    : config_(std::move(config)), capacity_(std::move(capacity)), options_(std::move(options)) {
  root_hash_ = RootHash(options_.fingerprint);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Blocks each group makes resident now (capped by its size): all, or those the first
  // prefault_tokens tokens take, + 1 for the null block (the free queue hands out ids in order).
  int64_t prefault_blocks = 0;
  if (options_.prefault_memory) {
    prefault_blocks = std::numeric_limits<int64_t>::max();
  } else if (options_.prefault_tokens > 0) {
    prefault_blocks = (options_.prefault_tokens + config_.block_size - 1) / config_.block_size + 1;
  }
  for (size_t g = 0; g < config_.groups.size(); ++g) {
    const GroupCapacity& gc = capacity_.groups[g];
    Group group;
    group.arena =
        std::make_unique<KvArena>(gc.block_bytes, gc.num_blocks, options_.allocate_memory);
    if (options_.allocate_memory) {
      const int64_t blocks = std::min<int64_t>(gc.num_blocks, prefault_blocks);
      const auto start = std::chrono::steady_clock::now();
      group.arena->PrefaultBlocks(blocks, threads);
      prefault_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      prefaulted_bytes_ += blocks * gc.block_bytes;
    }
    group.pool = std::make_unique<BlockPool>(static_cast<int32_t>(gc.num_blocks),
                                             options_.enable_prefix_caching);
    group.manager = MakeGroupManager(config_.groups[g].spec, config_.block_size, group.pool.get());
    groups_.push_back(std::move(group));
  }
  if (options_.prefault_memory && prefaulted_bytes_ > 0) {
    KV_LOG(INFO, "KV arenas: {} made resident in {:.0f} ms (prefault for tier loads)",
           FormatBytes(static_cast<uint64_t>(prefaulted_bytes_)), prefault_seconds_ * 1e3);
  }
}

Result<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(
    const KvCacheConfig& config, uint64_t budget_bytes, const KvCacheManagerOptions& options) {
  KV_ASSIGN_OR_RETURN(KvCapacity capacity, ComputeCapacity(config, budget_bytes));
  for (const GroupCapacity& gc : capacity.groups) {
    if (gc.num_blocks > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument(fmt::format("{} blocks exceed the block id range", gc.num_blocks));
    }
  }
  if (options.fingerprint.block_size != config.block_size) {
    return InvalidArgument(fmt::format("fingerprint block size {} != config block size {}",
                                       options.fingerprint.block_size, config.block_size));
  }
  return std::unique_ptr<KvCacheManager>(new KvCacheManager(config, std::move(capacity), options));
}

// Each group lowers L to the longest prefix it can serve; full and latent groups accept any
// shorter prefix of a hit, sliding groups must be asked again, so loop until no group
// lowers it (at most a few rounds: L only decreases).
int64_t KvCacheManager::LongestHitBlocks(std::span<const BlockHash> hashes, int64_t max_blocks,
                                         const std::vector<LowerTierLookup>& lower) const {
  int64_t k = max_blocks;
  bool changed = true;
  while (changed && k > 0) {
    changed = false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int64_t group_k = groups_[g].manager->LongestHitBlocks(hashes, k, lower[g]);
      if (group_k < k) {
        k = group_k;
        changed = true;
      }
    }
  }
  return k;
}

PrefixHit KvCacheManager::FindLongestCachedPrefix(std::span<const TokenId> prompt,
                                                  std::string_view cache_salt,
                                                  KvConnector* lower) {
  PrefixHit hit;
  hit.cache_salt = std::string(cache_salt);
  hit.blocks_per_group.resize(groups_.size());
  if (!options_.enable_prefix_caching || prompt.empty()) return hit;
  ExtendBlockHashes(root_hash_, prompt, config_.block_size, cache_salt, &hit.block_hashes);
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / config_.block_size;
  std::vector<LowerTierLookup> lookups(groups_.size());
  if (lower != nullptr) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      lookups[g] = [lower, g](const BlockHash& h) { return lower->Contains(static_cast<int>(g), h); };
    }
  }
  const int64_t k = LongestHitBlocks(hit.block_hashes, max_blocks, lookups);
  hit.num_cached_tokens = k * config_.block_size;
  for (size_t g = 0; g < groups_.size(); ++g) {
    hit.blocks_per_group[g] = groups_[g].manager->HitBlocks(hit.block_hashes, k, lookups[g]);
    hit.num_load_blocks += std::count(hit.blocks_per_group[g].begin(),
                                      hit.blocks_per_group[g].end(), kLoadBlock);
  }
  prefix_query_tokens_ += static_cast<int64_t>(prompt.size());
  prefix_hit_tokens_ += hit.num_cached_tokens;
  return hit;
}

std::optional<NewBlocks> KvCacheManager::AllocateNew(RequestId id, PrefixHit hit,
                                                     int64_t num_new_tokens) {
  CHECK(!HasRequest(id)) << "request " << id << " already allocated";
  CHECK_GE(num_new_tokens, 0);
  CHECK_EQ(hit.blocks_per_group.size(), groups_.size());
  const int64_t total = hit.num_cached_tokens + num_new_tokens;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<BlockId>& blocks = hit.blocks_per_group[g];
    for (size_t i = 0; i < blocks.size(); ++i) {
      CHECK(blocks[i] == kNullBlock || blocks[i] == kLoadBlock ||
            groups_[g].pool->HashOf(blocks[i]) == hit.block_hashes[i])
          << "stale PrefixHit: block " << blocks[i] << " was evicted since the lookup";
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t needed = groups_[g].manager->NumBlocksNeeded(id, total, hit.blocks_per_group[g]);
    if (needed > groups_[g].pool->NumFreeBlocks()) return std::nullopt;
  }
  NewBlocks out;
  out.per_group.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [index, block] : groups_[g].manager->AddHitBlocks(id, hit.blocks_per_group[g])) {
      out.loads.push_back({static_cast<int>(g), index, block, hit.block_hashes.at(index)});
      out.per_group[g].push_back(block);
    }
  }
  std::sort(out.loads.begin(), out.loads.end(), [](const BlockLoad& a, const BlockLoad& b) {
    return a.index != b.index ? a.index < b.index : a.group < b.group;
  });
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<BlockId> fresh = groups_[g].manager->AllocateTo(id, total);
    out.per_group[g].insert(out.per_group[g].end(), fresh.begin(), fresh.end());
  }
  requests_[id] = RequestState{std::move(hit.block_hashes), std::move(hit.cache_salt)};
  return out;
}

std::optional<NewBlocks> KvCacheManager::AllocateSlots(RequestId id, int64_t num_computed_tokens,
                                                       int64_t num_new_tokens) {
  CHECK(HasRequest(id)) << "unknown request " << id;
  CHECK_GE(num_new_tokens, 0);
  const int64_t total = num_computed_tokens + num_new_tokens;
  // Releasing blocks that left the window is right whether or not the allocation fits.
  for (Group& g : groups_) g.manager->RemoveSkippedBlocks(id, num_computed_tokens);
  for (Group& g : groups_) {
    if (g.manager->NumBlocksNeeded(id, total, {}) > g.pool->NumFreeBlocks()) return std::nullopt;
  }
  NewBlocks out;
  for (Group& g : groups_) out.per_group.push_back(g.manager->AllocateTo(id, total));
  return out;
}

void KvCacheManager::TruncateSlots(RequestId id, int64_t num_tokens) {
  CHECK(HasRequest(id)) << "unknown request " << id;
  for (Group& g : groups_) g.manager->TruncateTo(id, num_tokens);
}

void KvCacheManager::CacheFullBlocks(RequestId id, std::span<const TokenId> tokens,
                                     int64_t num_computed_tokens) {
  if (!options_.enable_prefix_caching) return;
  auto it = requests_.find(id);
  CHECK(it != requests_.end()) << "unknown request " << id;
  CHECK_LE(num_computed_tokens, static_cast<int64_t>(tokens.size()));
  RequestState& state = it->second;
  ExtendBlockHashes(root_hash_, tokens.first(num_computed_tokens), config_.block_size,
                    state.cache_salt, &state.block_hashes);
  const int64_t num_full = num_computed_tokens / config_.block_size;
  for (size_t g = 0; g < groups_.size(); ++g) {
    registered_.clear();
    groups_[g].manager->CacheFullBlocks(id, state.block_hashes, num_full,
                                        on_computed_ ? &registered_ : nullptr);
    for (const auto& [block, hash] : registered_) on_computed_(static_cast<int>(g), block, hash);
  }
}

void KvCacheManager::CommitLoadedBlocks(RequestId id, std::span<const BlockLoad> loads) {
  for (const BlockLoad& load : loads) {
    const std::vector<BlockId>& table = BlockTable(id, load.group);
    CHECK(load.index < static_cast<int64_t>(table.size()) && table[load.index] == load.block)
        << "request " << id << " no longer holds loaded block " << load.block;
    groups_.at(load.group).pool->CacheFullBlock(load.block, load.hash);
  }
}

void KvCacheManager::Free(RequestId id) {
  for (Group& g : groups_) g.manager->Free(id);
  requests_.erase(id);
}

KvCacheStats KvCacheManager::Stats() const {
  KvCacheStats stats;
  for (const Group& g : groups_) {
    stats.usage = std::max(stats.usage, g.pool->Usage());
    stats.num_evictions += g.pool->num_evictions();
  }
  stats.prefix_query_tokens = prefix_query_tokens_;
  stats.prefix_hit_tokens = prefix_hit_tokens_;
  stats.num_requests = static_cast<int64_t>(requests_.size());
  return stats;
}

int64_t KvCacheManager::ResetPrefixCache() {
  int64_t n = 0;
  for (Group& g : groups_) n += g.pool->EvictAllFree();
  return n;
}

void KvCacheManager::SetEvictionCallback(GroupEvictionCallback callback) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!callback) {
      groups_[g].pool->SetEvictionCallback(nullptr);
      continue;
    }
    groups_[g].pool->SetEvictionCallback([callback, g](BlockId block, const BlockHash& hash) {
      callback(static_cast<int>(g), block, hash);
    });
  }
}

Status KvCacheManager::CheckIntegrity() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    KV_RETURN_IF_ERROR(group.pool->CheckIntegrity().WithContext(fmt::format("group {}", g)));
    std::vector<int32_t> refs(group.pool->num_blocks(), 0);
    for (const auto& [id, table] : group.manager->tables()) {
      if (!HasRequest(id)) return Internal(fmt::format("group {}: stray table {}", g, id));
      for (BlockId b : table) {
        if (b != kNullBlock) ++refs.at(b);
      }
    }
    for (BlockId b = 1; b < group.pool->num_blocks(); ++b) {
      if (refs[b] != group.pool->RefCount(b)) {
        return Internal(fmt::format("group {} block {}: ref {} but {} table entries", g, b,
                                    group.pool->RefCount(b), refs[b]));
      }
    }
    for (const auto& [id, state] : requests_) {
      if (!group.manager->HasRequest(id)) {
        return Internal(fmt::format("group {}: request {} has no table", g, id));
      }
    }
  }
  return Status::Ok();
}

const std::vector<BlockId>& KvCacheManager::BlockTable(RequestId id, int group) const {
  return groups_.at(group).manager->Table(id);
}

tensor::PagedKvView KvCacheManager::KvView(int group) const {
  return MakeKvView(config_, group, *groups_.at(group).arena);
}

tensor::PagedLatentView KvCacheManager::LatentView(int group) const {
  return MakeLatentView(config_, group, *groups_.at(group).arena);
}

}  // namespace kvserve::kv
