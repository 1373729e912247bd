#include "offload/offload_manager.h"

#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/log.h"

namespace kvserve::offload {

namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void AtomicMin(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load();
  while (v < cur && !a.compare_exchange_weak(cur, v)) {
  }
}

void AtomicMax(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load();
  while (v > cur && !a.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace

// One load shared by its read tasks and its PendingLoad. A target's destination is written
// only between BeginWrite (false once cancelled) and EndWrite; Cancel forbids new writes and
// waits for those in flight, so no writer can starve it.
struct LoadState {
  std::vector<LoadTarget> targets;
  std::vector<std::optional<TierKind>> found_in;  // per target
  std::atomic<size_t> remaining{0};                // targets not yet tried
  std::promise<LoadResult> promise;
  std::mutex mu;
  std::condition_variable writes_done;
  int writes_in_flight = 0;  // under mu
  bool cancelled = false;    // under mu
  // Timing for the debug log (steady-clock ns), taken only when it is printed (`timed`):
  // queued in LoadAsync, first copy started, last copy ended, and the read threads' CPU time
  // spent on the targets.
  bool timed = false;
  int64_t queued_ns = 0;
  std::atomic<int64_t> first_start_ns{INT64_MAX};
  std::atomic<int64_t> last_end_ns{0};
  std::atomic<int64_t> cpu_ns{0};

  bool BeginWrite() {
    std::lock_guard<std::mutex> lock(mu);
    if (cancelled) return false;
    ++writes_in_flight;
    return true;
  }
  void EndWrite() {
    std::lock_guard<std::mutex> lock(mu);
    if (--writes_in_flight == 0 && cancelled) writes_done.notify_all();
  }
  void Cancel() {
    std::unique_lock<std::mutex> lock(mu);
    cancelled = true;
    writes_done.wait(lock, [this] { return writes_in_flight == 0; });
  }
};

PendingLoad& PendingLoad::operator=(PendingLoad&& other) noexcept {
  if (this != &other) {
    if (state_) Cancel();
    state_ = std::move(other.state_);
    result_ = std::move(other.result_);
  }
  return *this;
}

PendingLoad::~PendingLoad() {
  if (state_) Cancel();
}

bool PendingLoad::WaitFor(std::chrono::milliseconds wait) const {
  return result_.wait_for(wait) == std::future_status::ready;
}

LoadResult PendingLoad::Get() { return result_.get(); }

void PendingLoad::Cancel() { state_->Cancel(); }

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

PendingLoad OffloadManager::LoadAsync(std::vector<LoadTarget> targets) {
  load_requests_.fetch_add(1);
  PendingLoad pending;
  pending.state_ = std::make_shared<LoadState>();
  pending.result_ = pending.state_->promise.get_future();
  LoadState& state = *pending.state_;
  state.timed = GetLogLevel() <= LogLevel::kDebug;
  if (state.timed) state.queued_ns = SteadyNs();
  const size_t n = targets.size();
  for (const LoadTarget& t : targets) {
    CHECK(t.key.group >= 0 &&
          static_cast<size_t>(t.key.group) < identity_.group_block_bytes.size());
    CHECK_EQ(static_cast<int64_t>(t.dest.size()), identity_.group_block_bytes[t.key.group]);
  }
  state.targets = std::move(targets);
  state.found_in.resize(n);
  if (n == 0) {
    Finish(&state);
    return pending;
  }
  // A few consecutive targets per task: every read thread gets work, and a task costs one
  // queue round trip per batch rather than per block.
  const size_t tasks = std::min(n, static_cast<size_t>(4 * config_.num_read_threads()));
  state.remaining.store(n);
  for (size_t t = 0; t < tasks; ++t) {
    const size_t begin = n * t / tasks, end = n * (t + 1) / tasks;
    readers_->Submit([this, s = pending.state_, begin, end] { LoadRange(s, begin, end); });
  }
  return pending;
}

void OffloadManager::LoadRange(const std::shared_ptr<LoadState>& state, size_t begin,
                               size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (state->BeginWrite()) {
      if (state->timed) {
        const int64_t cpu_start = ThreadCpuNs();
        AtomicMin(state->first_start_ns, SteadyNs());
        state->found_in[i] = LoadOne(state->targets[i]);
        state->cpu_ns.fetch_add(ThreadCpuNs() - cpu_start);
        AtomicMax(state->last_end_ns, SteadyNs());
      } else {
        state->found_in[i] = LoadOne(state->targets[i]);
      }
      state->EndWrite();
    }
    if (state->remaining.fetch_sub(1) == 1) Finish(state.get());
  }
}

std::optional<TierKind> OffloadManager::LoadOne(const LoadTarget& target) {
  Result<bool> hit = cpu_->GetInto(target.key, target.dest);
  if (hit.ok() && *hit) return TierKind::kCpu;
  for (Tier* lower : {static_cast<Tier*>(file_.get()), static_cast<Tier*>(redis_.get())}) {
    if (lower == nullptr) continue;
    hit = lower->GetInto(target.key, target.dest);  // errors are counted by the tier
    if (!hit.ok() || !*hit) continue;
    if (config_.cpu_bytes_to_use > 0) {  // promote
      cpu_->PutShared(target.key,
                      std::make_shared<const Bytes>(target.dest.begin(), target.dest.end()));
    }
    return lower->kind();
  }
  return std::nullopt;
}

void OffloadManager::Finish(LoadState* state) {
  LoadResult r;
  while (r.num_loaded < state->found_in.size() && state->found_in[r.num_loaded]) {
    ++r.blocks_per_tier[static_cast<int>(*state->found_in[r.num_loaded])];
    r.tiers.push_back(*state->found_in[r.num_loaded]);
    ++r.num_loaded;
  }
  if (state->timed && state->last_end_ns.load() > 0) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < r.num_loaded; ++i) bytes += state->targets[i].dest.size();
    const double copy_ms = (state->last_end_ns.load() - state->first_start_ns.load()) / 1e6;
    KV_LOG(DEBUG,
           "KV load: {} of {} blocks ({} bytes) in {:.2f} ms: queued {:.2f} ms, copies {:.2f} "
           "ms wall ({:.2f} GB/s), {:.2f} ms CPU on the read threads",
           r.num_loaded, state->targets.size(), bytes, (SteadyNs() - state->queued_ns) / 1e6,
           (state->first_start_ns.load() - state->queued_ns) / 1e6, copy_ms,
           bytes / std::max(copy_ms, 1e-6) / 1e6, state->cpu_ns.load() / 1e6);
  }
  state->promise.set_value(r);
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
