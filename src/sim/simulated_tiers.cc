#include "sim/simulated_tiers.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace kvserve::sim {

void SimulatedTiers::KeyTier::Put(const offload::BlockKey& key, int64_t bytes) {
  if (!keys.insert(key).second) return;
  ++stats.stores;
  stats.bytes_stored += bytes;
  stats.usage_bytes += bytes;
  ++stats.num_blocks;
}

Result<std::unique_ptr<SimulatedTiers>> SimulatedTiers::Create(
    const offload::OffloadConfig& config, const HardwareProfile& speed, kv::KvCacheManager* kv) {
  CHECK(kv != nullptr);
  auto need = [&](const char* tier, const TierSpeed& t) -> Status {
    if (t.bandwidth > 0) return Status::Ok();
    return InvalidArgument(fmt::format("hardware profile {} gives no read bandwidth for the {} "
                                       "tier ({}_tier.bandwidth)", speed.name, tier, tier));
  };
  if (config.cpu_bytes_to_use > 0) KV_RETURN_IF_ERROR(need("cpu", speed.cpu_tier));
  if (config.file) KV_RETURN_IF_ERROR(need("file", speed.file_tier));
  if (config.redis) KV_RETURN_IF_ERROR(need("redis", speed.redis_tier));
  return std::unique_ptr<SimulatedTiers>(new SimulatedTiers(config, speed, kv));
}

SimulatedTiers::SimulatedTiers(const offload::OffloadConfig& config, const HardwareProfile& speed,
                               kv::KvCacheManager* kv)
    : config_(config),
      speed_{speed.cpu_tier, speed.file_tier, speed.redis_tier},
      kv_(kv),
      cpu_(std::make_unique<offload::CpuTier>(config.cpu_bytes_to_use)),
      store_bandwidth_(speed.cpu_tier.store_bandwidth) {
  for (const kv::GroupCapacity& g : kv_->capacity().groups) {
    pages_.push_back(std::make_shared<const offload::Bytes>(static_cast<size_t>(g.block_bytes)));
  }
  file_.enabled = config.file.has_value();
  file_.stats.tier = "file";
  redis_.enabled = config.redis.has_value();
  redis_.stats.tier = "redis";
  if (file_.enabled) {
    cpu_->SetEvictionSink([this](const offload::BlockKey& key, offload::SharedBytes bytes) {
      file_.Put(key, static_cast<int64_t>(bytes->size()));
    });
  }
  kv_->SetComputedBlockCallback([this](int group, kv::BlockId, const kv::BlockHash& hash) {
    WriteThrough(offload::BlockKey{hash, group});
  });
  kv_->SetEvictionCallback([this](int group, kv::BlockId, const kv::BlockHash& hash) {
    StoreToCpu(offload::BlockKey{hash, group});
  });
}

SimulatedTiers::~SimulatedTiers() {
  kv_->SetEvictionCallback(nullptr);
  kv_->SetComputedBlockCallback(nullptr);
}

void SimulatedTiers::AddCopy(int group) {
  if (store_bandwidth_ > 0) {
    store_seconds_ += static_cast<double>(BlockBytes(group)) / store_bandwidth_;
  }
}

void SimulatedTiers::StoreToCpu(const offload::BlockKey& key) {
  if (config_.cpu_bytes_to_use == 0 || cpu_->Contains(key)) return;
  cpu_->PutShared(key, pages_.at(key.group));
  AddCopy(key.group);
}

// As OffloadManager::WriteThrough: the bytes are copied for the write threads when some
// secondary tier takes them (the file tier lacks the block, or Redis is configured).
void SimulatedTiers::WriteThrough(const offload::BlockKey& key) {
  const bool to_file = file_.enabled && file_.keys.count(key) == 0;
  if (!to_file && !redis_.enabled) return;
  AddCopy(key.group);
  if (to_file) file_.Put(key, BlockBytes(key.group));
  if (redis_.enabled) redis_.Put(key, BlockBytes(key.group));
}

bool SimulatedTiers::Contains(int group, const kv::BlockHash& hash) {
  const offload::BlockKey key{hash, group};
  return cpu_->Contains(key) || file_.keys.count(key) != 0 || redis_.keys.count(key) != 0;
}

std::optional<SimulatedTiers::Kind> SimulatedTiers::Locate(const offload::BlockKey& key) {
  if (cpu_->Contains(key)) return kCpu;
  if (file_.keys.count(key) != 0) return kFile;
  if (redis_.keys.count(key) != 0) return kRedis;
  return std::nullopt;
}

// Blocks are read in list order; the load covers the leading run some tier holds (like
// OffloadManager::LoadAsync's num_loaded), counting hits and bytes per tier.
void SimulatedTiers::StartLoad(kv::RequestId id, std::vector<kv::BlockLoad> loads) {
  std::array<double, 3> bytes{};
  std::array<int64_t, 3> blocks{};
  // Tokens per tier, as offload::TieredKvConnector reports them: loads come ordered by table
  // index, then group; each index counts block_size tokens for the slowest tier it read from.
  std::vector<int64_t> tokens(3, 0);
  const int64_t block_size = kv_->config().block_size;
  int slowest = 0;
  size_t n = 0;
  for (; n < loads.size(); ++n) {
    const offload::BlockKey key{loads[n].hash, loads[n].group};
    const std::optional<Kind> tier = Locate(key);
    if (!tier) break;
    if (n > 0 && loads[n].index != loads[n - 1].index) {
      tokens[static_cast<size_t>(slowest)] += block_size;
      slowest = 0;
    }
    slowest = std::max(slowest, static_cast<int>(*tier));
    const int64_t size = BlockBytes(key.group);
    bytes[*tier] += static_cast<double>(size);
    ++blocks[*tier];
    if (*tier == kCpu) {
      (void)cpu_->GetShared(key);  // counts the hit and refreshes its LRU place
      continue;
    }
    KeyTier& lower = *tier == kFile ? file_ : redis_;
    ++lower.stats.hits;
    ++lower.stats.loads;
    lower.stats.bytes_loaded += size;
    if (config_.cpu_bytes_to_use > 0) cpu_->PutShared(key, pages_.at(key.group));  // promote
  }
  double seconds = 0;
  for (int t = 0; t < 3; ++t) {
    if (blocks[t] > 0) seconds += speed_[t].latency + bytes[t] / speed_[t].bandwidth;
  }
  if (n > 0) tokens[static_cast<size_t>(slowest)] += block_size;
  const double start = std::max(now_, read_free_at_);
  read_free_at_ = start + seconds;
  pending_.push_back({id, n, read_free_at_, std::move(tokens)});
}

std::vector<kv::FinishedLoad> SimulatedTiers::PollLoads(std::chrono::milliseconds) {
  std::vector<kv::FinishedLoad> done;
  std::erase_if(pending_, [&](const Pending& p) {
    if (p.done > now_) return false;
    done.push_back({p.id, p.num_blocks, p.tokens_per_tier});
    return true;
  });
  return done;
}

void SimulatedTiers::CancelLoad(kv::RequestId id) {
  std::erase_if(pending_, [id](const Pending& p) { return p.id == id; });
}

std::optional<double> SimulatedTiers::NextCompletion() const {
  std::optional<double> next;
  for (const Pending& p : pending_) next = std::min(next.value_or(p.done), p.done);
  return next;
}

double SimulatedTiers::TakeStoreSeconds() {
  const double s = store_seconds_;
  store_seconds_ = 0;
  return s;
}

std::vector<offload::TierStats> SimulatedTiers::Stats() const {
  std::vector<offload::TierStats> out = {cpu_->Stats()};
  if (file_.enabled) out.push_back(file_.stats);
  if (redis_.enabled) out.push_back(redis_.stats);
  return out;
}

}  // namespace kvserve::sim
