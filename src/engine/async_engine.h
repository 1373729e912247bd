// AsyncEngine: the thread-safe front the server uses. A background thread runs Engine::Step()
// while there is work and sleeps otherwise; other threads add requests, read each request's
// outputs from its RequestStream, and abort requests.
//
//   AsyncEngine engine(std::move(loaded_engine));
//   KV_ASSIGN_OR_RETURN(RequestHandle h, engine.AddRequest(std::move(request)));
//   while (std::optional<RequestOutput> out = h.stream->Next()) { ... out->finish ... }
//
// Owns the Engine (touched only by the loop thread after construction, except the
// thread-safe ValidateRequest) and the loop thread. Every stream ends with exactly one output
// carrying a finish reason (stop, length, abort or error), also when the engine shuts down.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_snapshot.h"

namespace kvserve::engine {

// One request's outputs in order. Thread-safe: the loop thread pushes, any thread reads.
class RequestStream {
 public:
  // Blocks until the next output; nullopt once the final output (with a finish) was taken.
  std::optional<RequestOutput> Next();
  // Next without blocking: nullopt when nothing is ready now.
  std::optional<RequestOutput> TryNext();
  // The loop thread's side. note: nothing is pushed after an output with a finish.
  void Push(RequestOutput output);
  // Event-driven readers: `on_push` runs on the loop thread after every later Push (outside
  // the stream's lock; it must be quick and must not block, e.g. post to an event loop).
  // Outputs pushed before the call are not announced: read them with TryNext after setting.
  void SetListener(std::function<void()> on_push);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool closed_ = false;  // the final output was pushed
  std::function<void()> on_push_;  // guarded by mu_
};

struct RequestHandle {
  RequestId id = 0;
  std::shared_ptr<RequestStream> stream;
};

class AsyncEngine {
 public:
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  // Stops the loop; unfinished requests end with kAbort.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates now (InvalidArgument / OutOfRange as Engine::ValidateRequest) and queues the
  // request for the loop. Thread-safe.
  Result<RequestHandle> AddRequest(EngineRequest request);
  // Ends the request with kAbort and frees its blocks (at the loop's next turn). Unknown or
  // finished ids are ignored. Thread-safe.
  void Abort(RequestId id);
  // The metrics after the latest step. Thread-safe.
  MetricsSnapshot Metrics() const;
  // The offload tiers' Prometheus text, read live (their counters move on the I/O threads);
  // empty without tiers. Thread-safe.
  std::string OffloadPrometheus() const;
  int64_t max_model_len() const { return max_model_len_; }
  // Runs `fn` on the loop thread at the next step boundary (at once when idle), where it may
  // read the engine, and waits for it. False when the engine stopped or `timeout` passed first
  // (fn may then still run later, or never: it must own what it touches). Thread-safe.
  bool RunAtStepBoundary(std::function<void(const Engine&)> fn, std::chrono::milliseconds timeout);
  // The KV cache's state (engine/kv_snapshot.h) at the next step boundary; null when
  // RunAtStepBoundary fails. Thread-safe.
  std::shared_ptr<const KvSnapshot> KvState(std::chrono::milliseconds timeout);

 private:
  struct Pending {
    RequestId id;
    ValidRequest request;
    std::shared_ptr<RequestStream> stream;
  };
  void Loop();
  void ApplyInbox(std::vector<Pending> adds, std::vector<RequestId> aborts);
  void Dispatch(std::vector<RequestOutput> outputs);
  void RunBoundaryTasks();  // loop thread

  std::unique_ptr<Engine> engine_;
  const offload::OffloadManager* offload_;  // engine_'s tiers (thread-safe), or null
  const int64_t max_model_len_;
  std::atomic<RequestId> next_id_{1};

  mutable std::mutex mu_;  // guards everything below until thread_
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<RequestId> aborts_;
  bool stop_ = false;
  MetricsSnapshot metrics_;
  std::vector<std::shared_ptr<std::packaged_task<void(const Engine&)>>> boundary_tasks_;
  const KvSettings kv_settings_;  // fixed at construction
  uint64_t kv_snapshot_sequence_ = 0;  // loop thread only
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;  // loop thread only
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace kvserve::engine
