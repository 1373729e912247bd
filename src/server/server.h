// Server: the OpenAI-compatible HTTP front of an AsyncEngine, on the event-driven
// http::HttpServer (src/http/).
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or SSE), GET /v1/models,
// GET /health, GET /metrics (Prometheus), POST /tokenize, POST /detokenize, GET /version.
// /health, /metrics, /v1/models and /version are answered on the I/O threads, ahead of any
// request work; the others parse and tokenize on the worker pool, then their responses are
// produced from the engine's outputs as they arrive (no thread waits on a request).
// Every failure answers an OpenAI-shaped error object (server/api_error.h). Request bodies
// are JSON whatever their Content-Type (as vLLM).
//
// Owns the router, the HTTP server and the admission state (choices in flight, the engine
// ids to abort at shutdown). The engine, tokenizer and chat template are borrowed and must
// outlive the Server.
// Thread safety: Serve() blocks on one thread; Shutdown() may be called from any thread
// (e.g. a signal-handling one).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "core/status.h"
#include "engine/async_engine.h"
#include "http/message.h"
#include "http/router.h"
#include "server/kv_dashboard.h"
#include "server/metrics_text.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::http {
class HttpServer;
}  // namespace kvserve::http

namespace kvserve::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (Bind() says which)
  std::string served_model_name;
  std::string api_key;              // empty: no authentication
  size_t max_body_bytes = 16 << 20;
  // Choices in flight beyond max_num_seqs before new requests get 503 + Retry-After.
  int max_waiting_requests = 1024;
  int max_num_seqs = 256;           // the engine's
  int num_http_threads = 4;         // workers that parse and tokenize (not per connection)
  double header_timeout_s = 10;     // a request head must arrive within this (408 after)
  double body_timeout_s = 60;       // its body within this after the head (408 after)
  RequestLimits request_limits;     // prompt bytes, stop strings (server/protocol.h)
  ReasoningFormat reasoning_parser = ReasoningFormat::kNone;  // --reasoning-parser
  int64_t num_kv_blocks = 0;        // for kvserve:kv_cache_used_blocks
  int dashboard_events_per_s = 200; // all /v1/kv/events streams together; 0: no bound
};

// Admission: choices in flight and their engine ids. Thread-safe.
class Admission {
 public:
  explicit Admission(int64_t limit) : limit_(limit) {}
  // False when draining or when `num_choices` more would pass the limit.
  bool TryAdmit(int64_t num_choices);
  void Release(int64_t num_choices);
  void Track(engine::RequestId id);
  void Untrack(engine::RequestId id);
  // Refuses new requests from now on.
  void StartDraining();
  bool draining() const;
  // Waits until nothing is in flight or `timeout` passed; true when nothing is in flight.
  bool WaitIdle(std::chrono::duration<double> timeout);
  std::set<engine::RequestId> tracked() const;
  int64_t in_flight() const;

 private:
  const int64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  int64_t in_flight_ = 0;
  bool draining_ = false;
  std::set<engine::RequestId> ids_;
};

class Server {
 public:
  Server(ServerOptions options, engine::AsyncEngine& engine,
         const tokenizer::Tokenizer& tokenizer, const tokenizer::ChatTemplate& chat_template);
  ~Server();

  // Binds host:port; returns the bound port. IoError when the address is taken.
  Result<int> Bind();
  // Serves until Shutdown(). note: after a successful Bind().
  Status Serve();
  // Refuses new generation requests (503), waits up to `drain_timeout` for in-flight ones,
  // aborts the rest (their streams end with finish_reason "abort"), then stops the listener.
  // Idempotent.
  void Shutdown(std::chrono::duration<double> drain_timeout);
  // Choices admitted and not yet finished. Thread-safe.
  int64_t num_in_flight() const { return admission_.in_flight(); }

 private:
  void RegisterRoutes();
  // Wraps a handler of a route that needs the API key.
  http::Handler Protected(http::Handler handler) const;
  http::Response HandleGenerate(Endpoint endpoint, const http::Request& req);
  http::Response HandleTokenize(const http::Request& req);
  http::Response HandleDetokenize(const http::Request& req);
  http::Response HandleMetrics();
  bool Authorized(const http::Request& req) const;

  ServerOptions options_;
  engine::AsyncEngine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const tokenizer::ChatTemplate& chat_template_;
  ParseContext parse_context_;
  Admission admission_;
  http::Router router_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<KvDashboard> dashboard_;  // /v1/kv/*, /dashboard
  std::atomic<int64_t> next_request_ = 0;
  std::atomic<int64_t> num_rejected_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // Shutdown() was called (guarded by shutdown_mu_)
};

// The OpenAI-shaped error response.
http::Response ErrorResponse(const ApiError& error);

// Constant-time comparison (no early exit on the first differing byte).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace kvserve::server
