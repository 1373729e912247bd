// KvDashboard: the live KV dashboard's routes, independent of the HTTP library (a route is a
// function from a DashboardRequest to a DashboardResponse, or an event stream), so they move
// with the HTTP front. docs/dashboard.md describes the page and the JSON.
//
//   GET /v1/kv/state[?sequence=N]   the KV state as JSON (server/kv_state_json.h), taken at the
//                                   next step boundary; with sequence, one of the last few
//                                   published (404 once gone): the frame a page is showing
//   GET /v1/kv/block?group=G&id=B   one block now (at the next step boundary): state, reference
//                                   count, prefix hash, the requests holding it
//   GET /v1/kv/events               SSE: the same JSON every `interval` (4 a second; less
//                                   often with many streams, see below), as
//                                   "id: N\ndata: {...}\n\n" events
//   GET /dashboard, /dashboard/F    the page, from files compiled into the binary
//                                   (web/dashboard/), under a strict Content-Security-Policy
// /v1/kv/* need the API key like every /v1 route (the front checks it); the page asks for it.
//
// Events: one publisher thread asks the engine for a snapshot each interval while anyone
// listens, encodes it once, and hands the same string to every subscriber. A subscriber's
// queue holds at most max_queued_events; a client that falls that far behind is dropped (its
// stream ends), so a slow or stalled client costs memory bounded by that queue and never
// blocks the engine or the other clients.
//
// Rate: each event written to a stream wakes that stream's reader, and on the server's own
// machine (loopback readers) that wake-up is what an open dashboard costs the engine's threads
// (docs/PERFORMANCE.md). So all streams together get at most max_events_per_s events a
// second: with more than max_events_per_s * interval streams, the interval grows to
// streams / max_events_per_s (200 a second: 4 a second up to 50 streams, 1 a second at 200).
// Every event is still a whole, consistent state.
//
// Thread safety: every method may be called from any thread. Stop() ends every stream and the
// publisher; the front calls it before it stops (a stream never ends by itself otherwise).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "engine/async_engine.h"
#include "server/kv_state_json.h"

namespace kvserve::server {

struct DashboardRequest {
  std::string path;   // e.g. "/v1/kv/state"
  std::string query;  // after '?', e.g. "group=0&id=17"; empty when none
};

struct DashboardResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type
  std::string body;
};

// One client's event stream. The front calls Start once with a wake function, then Pull
// whenever woken (or Wait then Pull, for a thread-per-connection front) until Pull returns
// true; destroying the subscription unsubscribes.
class KvEventStream {
 public:
  // `wake` is called (from the publisher thread) whenever Pull has something new.
  void Start(std::function<void()> wake);
  // Appends every event that is ready to *out; true when the stream is over (the client was
  // too slow and dropped, or the dashboard stopped): send what was appended, then end.
  bool Pull(std::string* out);
  // Waits up to `timeout` until Pull has something (an event or the end).
  void Wait(std::chrono::milliseconds timeout);
  bool dropped() const;

 private:
  friend class KvDashboard;
  // The publisher's side: queues an event, or drops the stream when max_queued are waiting.
  void Push(std::shared_ptr<const std::string> event, size_t max_queued);
  void End();
  void Wake();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  bool ended_ = false;
  bool dropped_ = false;
  std::function<void()> wake_;
};

struct KvDashboardOptions {
  std::string model_name;                        // shown on the page
  std::chrono::milliseconds interval{250};       // between events (the shortest)
  size_t max_events_per_s = 200;                 // all streams together; 0: no bound
  size_t max_subscribers = 1024;                 // more: 503
  size_t max_queued_events = 8;                  // per stream: 2 s behind at 4 a second
  std::chrono::milliseconds state_timeout{5000}; // for a snapshot from the engine
};

class KvDashboard {
 public:
  KvDashboard(engine::AsyncEngine& engine, KvDashboardOptions options);
  ~KvDashboard();  // Stop()
  KvDashboard(const KvDashboard&) = delete;
  KvDashboard& operator=(const KvDashboard&) = delete;

  DashboardResponse State(const DashboardRequest& request);
  DashboardResponse Block(const DashboardRequest& request);
  // GET /dashboard and /dashboard/<file>.
  DashboardResponse Page(const DashboardRequest& request) const;
  // GET /v1/kv/events: a started-to-be stream, or the error to answer (503: too many).
  std::variant<std::shared_ptr<KvEventStream>, DashboardResponse> Subscribe();
  // The response head of an event stream (status 200, text/event-stream, no caching).
  static DashboardResponse EventStreamHead();
  // Ends every stream and the publisher. Idempotent.
  void Stop();

  int64_t num_dropped() const;  // streams dropped for being slow, since start
  size_t num_subscribers() const;
  // The time between events with `streams` streams open: interval, or longer beyond
  // max_events_per_s.
  std::chrono::milliseconds EventInterval(size_t streams) const;

 private:
  struct Published {
    std::shared_ptr<const engine::KvSnapshot> snapshot;
    std::shared_ptr<const std::string> json;
  };
  // A fresh snapshot, encoded and kept in recent_; null when the engine did not answer.
  std::optional<Published> Take();
  void Run();  // the publisher thread
  // Drops expired subscribers; true when any is left. note: mu_ held.
  bool HasSubscribersLocked();

  engine::AsyncEngine& engine_;
  const KvDashboardOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  RateMeter rates_;
  std::deque<Published> recent_;  // the last few, oldest first
  std::vector<std::weak_ptr<KvEventStream>> subscribers_;
  int64_t num_dropped_ = 0;
  std::thread publisher_;  // last: starts after everything above exists
};

}  // namespace kvserve::server
