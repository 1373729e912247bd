#include "engine/async_engine.h"

namespace kvserve::engine {

std::optional<RequestOutput> RequestStream::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<RequestOutput> RequestStream::TryNext() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

void RequestStream::Push(RequestOutput output) {
  std::function<void()> on_push;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!closed_) << "output pushed after the final one";
    closed_ = output.finish.has_value();
    queue_.push_back(std::move(output));
    on_push = on_push_;
  }
  cv_.notify_all();
  if (on_push) on_push();
}

void RequestStream::SetListener(std::function<void()> on_push) {
  std::lock_guard<std::mutex> lock(mu_);
  on_push_ = std::move(on_push);
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)),
      offload_(engine_->offload()),
      max_model_len_(engine_->max_model_len()),
      kv_settings_(MakeKvSettings(*engine_)) {
  metrics_ = engine_->Metrics();
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<RequestHandle> AsyncEngine::AddRequest(EngineRequest request) {
  KV_ASSIGN_OR_RETURN(ValidRequest valid, engine_->Validate(std::move(request)));
  RequestHandle handle{next_id_.fetch_add(1), std::make_shared<RequestStream>()};
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back({handle.id, std::move(valid), handle.stream});
  }
  cv_.notify_all();
  return handle;
}

void AsyncEngine::Abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

std::string AsyncEngine::OffloadPrometheus() const {
  const offload::OffloadManager* tiers = offload_;
  return tiers ? tiers->PrometheusText() : "";
}

MetricsSnapshot AsyncEngine::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

bool AsyncEngine::RunAtStepBoundary(std::function<void(const Engine&)> fn,
                                    std::chrono::milliseconds timeout) {
  auto task = std::make_shared<std::packaged_task<void(const Engine&)>>(std::move(fn));
  std::future<void> done = task->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    boundary_tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
  if (done.wait_for(timeout) != std::future_status::ready) return false;
  try {
    done.get();
  } catch (const std::future_error&) {  // dropped at shutdown
    return false;
  }
  return true;
}

std::shared_ptr<const KvSnapshot> AsyncEngine::KvState(std::chrono::milliseconds timeout) {
  auto out = std::make_shared<std::shared_ptr<const KvSnapshot>>();
  const bool ran = RunAtStepBoundary(
      [this, out](const Engine& engine) {
        const double uptime_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        *out = std::make_shared<const KvSnapshot>(
            TakeKvSnapshot(engine, kv_settings_, ++kv_snapshot_sequence_, uptime_s));
      },
      timeout);
  return ran ? *out : nullptr;
}

void AsyncEngine::RunBoundaryTasks() {
  std::vector<std::shared_ptr<std::packaged_task<void(const Engine&)>>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(boundary_tasks_);
  }
  for (const auto& task : tasks) (*task)(*engine_);
}

void AsyncEngine::Loop() {
  while (true) {
    std::vector<Pending> adds;
    std::vector<RequestId> aborts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !aborts_.empty() || !boundary_tasks_.empty() ||
               engine_->HasUnfinished();
      });
      if (stop_) break;  // inbox_ is drained below
      adds.swap(inbox_);
      aborts.swap(aborts_);
    }
    ApplyInbox(std::move(adds), std::move(aborts));
    std::vector<RequestOutput> outputs;
    if (engine_->HasUnfinished()) outputs = engine_->Step();
    // Publish the metrics before the outputs: a client that saw its request finish then
    // reads metrics that count it.
    MetricsSnapshot snapshot = engine_->Metrics();
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_ = std::move(snapshot);
    }
    Dispatch(std::move(outputs));
    RunBoundaryTasks();  // between two steps
  }
  // Shutting down: everything still open ends with kAbort; boundary tasks are dropped.
  std::vector<Pending> never_started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    never_started.swap(inbox_);
    boundary_tasks_.clear();
  }
  for (Pending& p : never_started) p.stream->Push({p.id, {}, FinishReason::kAbort, ""});
  for (auto& [id, stream] : streams_) {
    engine_->Abort(id);
    stream->Push({id, {}, FinishReason::kAbort, ""});
  }
  streams_.clear();
}

void AsyncEngine::ApplyInbox(std::vector<Pending> adds, std::vector<RequestId> aborts) {
  for (Pending& p : adds) {
    engine_->AddRequest(p.id, std::move(p.request));
    streams_[p.id] = std::move(p.stream);
  }
  for (RequestId id : aborts) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    engine_->Abort(id);
    it->second->Push({id, {}, FinishReason::kAbort, ""});
    streams_.erase(it);
  }
}

void AsyncEngine::Dispatch(std::vector<RequestOutput> outputs) {
  for (RequestOutput& out : outputs) {
    auto it = streams_.find(out.id);
    if (it == streams_.end()) continue;
    const bool final = out.finish.has_value();
    it->second->Push(std::move(out));
    if (final) streams_.erase(it);
  }
}

}  // namespace kvserve::engine
