// HttpServer: an event-driven HTTP/1.1 server (Boost.Asio + Boost.Beast from Debian's
// libboost-dev) that serves a Router.
//
// Connections cost memory, not threads: a few I/O threads run every socket through one
// io_context (epoll), and handlers marked kWorker run on a separate worker pool, so thousands
// of idle, slow or streaming connections never starve /health (an inline route).
//
// Per connection, one request at a time (pipelined requests wait in the read buffer):
//   head   must arrive within `header_timeout` of the connection opening or of the previous
//          response (also the keep-alive idle limit); 408 when part of one came, else closed;
//   body   must arrive within `body_timeout` of the head; 408 when late;
//   limits see http/request_reader.h (413 / 415 / 431 / 400, then the connection closes);
//   answer whole, deferred, or streamed as chunks. A streaming client that does not read is
//          dropped once `max_buffered_bytes` wait for it (beyond the socket's fixed 256 KiB
//          kernel send buffer) or a write makes no progress for
//          `write_timeout`: its producer is destroyed (which aborts its engine requests), and
//          nothing ever waits on the client.
// While a response is being produced the connection watches for the client hanging up and
// destroys the producer when it does.
// The listen backlog is SOMAXCONN; the process's open-file soft limit is raised to its hard
// limit at Bind.
//
// Thread safety: Bind, then Run on one thread (it returns after Stop); Stop from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/message.h"
#include "http/request_reader.h"
#include "http/router.h"

namespace kvserve::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  HttpLimits limits;
  int num_io_threads = 2;
  int num_worker_threads = 4;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds write_timeout{30000};
  size_t max_buffered_bytes = 1u << 20;  // per connection, not yet written to the socket
  // Request bodies held at once across all connections (a chunked body counts as the body
  // limit until it ends); past it new requests get 503 before their bodies are read.
  size_t max_total_body_bytes = 1u << 30;
  // Turns a status and message into a response (the server's error format, e.g. OpenAI's).
  std::function<Response(int status, const std::string& message)> error_response;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, const Router& router);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port; returns the bound port. IoError when the address is taken.
  Result<int> Bind();
  // Serves until Stop(); returns when every I/O and worker thread has ended.
  void Run();
  // Stops accepting; lets responses in progress finish for up to `drain_timeout`, then closes
  // every connection (destroying their producers). Idempotent; blocks until done.
  void Stop(std::chrono::milliseconds drain_timeout = std::chrono::milliseconds(5000));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::http
