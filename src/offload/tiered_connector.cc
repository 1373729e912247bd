#include "offload/tiered_connector.h"

#include <algorithm>

#include "core/check.h"

namespace kvserve::offload {

TieredKvConnector::TieredKvConnector(std::unique_ptr<OffloadManager> manager,
                                     kv::KvCacheManager* kv)
    : manager_(std::move(manager)), kv_(kv) {
  CHECK(manager_ != nullptr && kv_ != nullptr);
  kv_->SetComputedBlockCallback([this](int group, kv::BlockId block, const kv::BlockHash& hash) {
    manager_->WriteThrough(BlockKey{hash, group}, BlockBytes(group, block));
  });
  kv_->SetEvictionCallback([this](int group, kv::BlockId block, const kv::BlockHash& hash) {
    // Stored to the CPU tier, or written through to the file tier / Redis when it was
    // computed: present either way (a failed write only makes a later load come up short).
    const BlockKey key{hash, group};
    manager_->StoreToCpu(key, BlockBytes(group, block));
    Remember(key, true, std::chrono::steady_clock::now());
  });
}

TieredKvConnector::~TieredKvConnector() {
  kv_->SetEvictionCallback(nullptr);
  kv_->SetComputedBlockCallback(nullptr);
}

std::span<std::byte> TieredKvConnector::BlockBytes(int group, kv::BlockId block) const {
  const kv::KvArena& arena = kv_->arena(group);
  return {arena.BlockData(block), static_cast<size_t>(arena.block_bytes())};
}

bool TieredKvConnector::Contains(int group, const kv::BlockHash& hash) {
  const BlockKey key{hash, group};
  const auto now = std::chrono::steady_clock::now();
  if (auto it = memo_.find(key); it != memo_.end() && now - it->second.at < kContainsMemo) {
    return it->second.present;
  }
  const bool present = manager_->CountAvailable(std::span<const BlockKey>(&key, 1)) == 1;
  Remember(key, present, now);
  return present;
}

void TieredKvConnector::Remember(const BlockKey& key, bool present,
                                 std::chrono::steady_clock::time_point now) {
  constexpr size_t kMaxMemo = 1 << 16;
  if (memo_.size() >= kMaxMemo) {
    std::erase_if(memo_, [&](const auto& e) { return now - e.second.at >= kContainsMemo; });
    if (memo_.size() >= kMaxMemo) memo_.clear();
  }
  memo_[key] = {present, now};
}

void TieredKvConnector::StartLoad(kv::RequestId id, std::vector<kv::BlockLoad> loads) {
  std::vector<LoadTarget> targets;
  targets.reserve(loads.size());
  for (const kv::BlockLoad& l : loads) {
    targets.push_back({BlockKey{l.hash, l.group}, BlockBytes(l.group, l.block)});
  }
  pending_.push_back({id, std::move(loads), manager_->LoadAsync(std::move(targets))});
}

std::vector<kv::FinishedLoad> TieredKvConnector::PollLoads(std::chrono::milliseconds wait) {
  std::vector<kv::FinishedLoad> done;
  if (pending_.empty()) return done;
  auto ready = [](const Pending& p) { return p.load.WaitFor(std::chrono::milliseconds(0)); };
  if (wait.count() > 0 && std::none_of(pending_.begin(), pending_.end(), ready)) {
    pending_.front().load.WaitFor(wait);
  }
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    if (!ready(p)) {
      still.push_back(std::move(p));
      continue;
    }
    const LoadResult result = p.load.Get();
    CHECK_LE(result.num_loaded, p.loads.size());
    done.push_back({p.id, result.num_loaded, TokensPerTier(p, result)});
  }
  pending_ = std::move(still);
  return done;
}

std::vector<int64_t> TieredKvConnector::TokensPerTier(const Pending& pending,
                                                      const LoadResult& result) const {
  // loads are ordered by table index, then group: one run of entries per index.
  std::vector<int64_t> tokens(3, 0);
  const int64_t block_size = kv_->config().block_size;
  for (size_t i = 0; i < result.num_loaded;) {
    int slowest = 0;
    size_t j = i;
    for (; j < result.num_loaded && pending.loads[j].index == pending.loads[i].index; ++j) {
      slowest = std::max(slowest, static_cast<int>(result.tiers[j]));
    }
    tokens[static_cast<size_t>(slowest)] += block_size;
    i = j;
  }
  return tokens;
}

void TieredKvConnector::CancelLoad(kv::RequestId id) {
  // PendingLoad's destructor cancels: no read thread writes the request's blocks afterwards.
  std::erase_if(pending_, [id](const Pending& p) { return p.id == id; });
}

}  // namespace kvserve::offload
