#include "offload/offload_manager.h"

#include <fmt/format.h>

#include "core/log.h"

namespace kvserve::offload {

struct OffloadManager::LoadState {
  LoadResult result;
  std::vector<std::optional<TierKind>> found_in;  // per key
  std::atomic<size_t> remaining{0};
  std::promise<LoadResult> promise;
};

OffloadManager::OffloadManager(OffloadConfig config, RecordIdentity identity,
                               OffloadManagerOptions options)
    : config_(std::move(config)), identity_(std::move(identity)), options_(options) {}

std::unique_ptr<OffloadManager> OffloadManager::Create(const OffloadConfig& config,
                                                       RecordIdentity identity,
                                                       OffloadManagerOptions options) {
  std::unique_ptr<OffloadManager> m(new OffloadManager(config, std::move(identity), options));
  m->cpu_ = std::make_unique<CpuTier>(config.cpu_bytes_to_use);
  if (config.file) m->file_ = FileTier::Open(config.file->root_dir, m->identity_);
  if (config.redis) m->redis_ = std::make_unique<RedisTier>(config.redis->address, m->identity_);
  m->readers_ = std::make_unique<IoPool>(config.num_read_threads());
  m->writers_ = std::make_unique<IoPool>(config.num_write_threads());
  if (m->file_) {
    OffloadManager* self = m.get();
    m->cpu_->SetEvictionSink([self](const BlockKey& key, SharedBytes bytes) {
      self->QueueWrite(key, std::move(bytes), /*to_file=*/true, /*to_redis=*/false);
    });
  }
  KV_LOG(INFO, "KV offload: {}", config.Describe());
  return m;
}

OffloadManager::~OffloadManager() {
  readers_->WaitIdle();  // loads may promote into the CPU tier and queue cascaded writes
  Flush();
}

void OffloadManager::CheckBlock(const BlockKey& key, std::span<const std::byte> bytes) const {
  CHECK(key.group >= 0 && static_cast<size_t>(key.group) < identity_.group_block_bytes.size());
  CHECK_EQ(static_cast<int64_t>(bytes.size()), identity_.group_block_bytes[key.group]);
}

void OffloadManager::WriteThrough(const BlockKey& key, std::span<const std::byte> bytes) {
  CheckBlock(key, bytes);
  const bool to_file = file_ != nullptr && !file_->Contains(key);
  const bool to_redis = redis_ != nullptr;
  if (!to_file && !to_redis) return;
  QueueWrite(key, std::make_shared<const Bytes>(bytes.begin(), bytes.end()), to_file, to_redis);
}

void OffloadManager::StoreToCpu(const BlockKey& key, std::span<const std::byte> bytes) {
  CheckBlock(key, bytes);
  if (config_.cpu_bytes_to_use == 0 || cpu_->Contains(key)) return;
  cpu_->PutShared(key, std::make_shared<const Bytes>(bytes.begin(), bytes.end()));
}

void OffloadManager::Store(const BlockKey& key, std::span<const std::byte> bytes) {
  WriteThrough(key, bytes);
  StoreToCpu(key, bytes);
}

bool OffloadManager::QueueWrite(const BlockKey& key, SharedBytes bytes, bool to_file,
                                bool to_redis) {
  const int64_t size = static_cast<int64_t>(bytes->size());
  if (pending_write_bytes_.fetch_add(size) + size >
      static_cast<int64_t>(options_.max_pending_write_bytes)) {
    pending_write_bytes_.fetch_sub(size);
    dropped_stores_.fetch_add(1);
    return false;
  }
  writers_->Submit([this, key, bytes = std::move(bytes), to_file, to_redis, size] {
    if (to_file) (void)file_->Put(key, *bytes);    // failures counted by the tier
    if (to_redis) (void)redis_->Put(key, *bytes);  // failures counted by the tier
    pending_write_bytes_.fetch_sub(size);
  });
  return true;
}

size_t OffloadManager::CountAvailable(std::span<const BlockKey> keys) {
  size_t n = 0;
  while (n < keys.size() && (cpu_->Contains(keys[n]) || (file_ && file_->Contains(keys[n])))) {
    ++n;
  }
  if (n < keys.size() && redis_) n += redis_->CountLeadingPresent(keys.subspan(n));
  return n;
}

std::future<LoadResult> OffloadManager::LoadAsync(std::vector<BlockKey> keys) {
  load_requests_.fetch_add(1);
  auto state = std::make_shared<LoadState>();
  std::future<LoadResult> future = state->promise.get_future();
  const size_t n = keys.size();
  state->result.keys = std::move(keys);
  state->result.payloads.resize(n);
  state->found_in.resize(n);
  if (n == 0) {
    Finish(state.get());
    return future;
  }
  state->remaining.store(n);
  for (size_t i = 0; i < n; ++i) {
    readers_->Submit([this, state, i] { LoadOne(state, i); });
  }
  return future;
}

void OffloadManager::LoadOne(const std::shared_ptr<LoadState>& state, size_t index) {
  const BlockKey& key = state->result.keys[index];
  const size_t expected = static_cast<size_t>(identity_.group_block_bytes.at(key.group));
  SharedBytes bytes = cpu_->GetShared(key);
  std::optional<TierKind> tier;
  if (bytes) tier = TierKind::kCpu;
  for (Tier* lower : {static_cast<Tier*>(file_.get()), static_cast<Tier*>(redis_.get())}) {
    if (bytes || lower == nullptr) continue;
    Result<std::optional<Bytes>> got = lower->Get(key);  // errors are counted by the tier
    if (got.ok() && got->has_value() && (*got)->size() == expected) {
      bytes = std::make_shared<const Bytes>(std::move(**got));
      tier = lower->kind();
      if (config_.cpu_bytes_to_use > 0) cpu_->PutShared(key, bytes);  // promote
    }
  }
  if (bytes && bytes->size() != expected) bytes = nullptr;
  state->result.payloads[index] = std::move(bytes);
  state->found_in[index] = state->result.payloads[index] ? tier : std::nullopt;
  if (state->remaining.fetch_sub(1) == 1) Finish(state.get());
}

void OffloadManager::Finish(LoadState* state) {
  LoadResult& r = state->result;
  r.num_loaded = 0;
  while (r.num_loaded < r.payloads.size() && r.payloads[r.num_loaded]) {
    ++r.blocks_per_tier[static_cast<int>(*state->found_in[r.num_loaded])];
    r.tiers.push_back(*state->found_in[r.num_loaded]);
    ++r.num_loaded;
  }
  for (size_t i = r.num_loaded; i < r.payloads.size(); ++i) r.payloads[i] = nullptr;
  state->promise.set_value(std::move(r));
}

void OffloadManager::Flush() { writers_->WaitIdle(); }

std::vector<TierStats> OffloadManager::Stats() const {
  std::vector<TierStats> out;
  out.push_back(cpu_->Stats());
  if (file_) out.push_back(file_->Stats());
  if (redis_) out.push_back(redis_->Stats());
  return out;
}

std::string OffloadManager::PrometheusText() const {
  std::string out = RenderPrometheus(Stats());
  out += "# TYPE kvserve:offload_dropped_stores_total counter\n";
  out += fmt::format("kvserve:offload_dropped_stores_total {}\n", dropped_stores_.load());
  out += "# TYPE kvserve:offload_load_requests_total counter\n";
  out += fmt::format("kvserve:offload_load_requests_total {}\n", load_requests_.load());
  return out;
}

}  // namespace kvserve::offload
