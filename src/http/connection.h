// Connection: one accepted socket of an HttpServer, driven as a state machine on its strand
// (http_server.h describes the behaviour). Internal to src/http.
//
// Owns its socket, read buffer, parser, deadline timer and the producer of the response in
// flight. Every member function runs on the connection's strand, except Wake (any thread).
// Lifetime: shared_ptr held by its pending asynchronous operations; it dies when the last one
// completes after Close().
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "http/http_server.h"

namespace kvserve::http {

class Connection;

// What connections share with their server. The server outlives every connection's handlers.
struct ServerContext {
  const HttpServerOptions* options = nullptr;
  const Router* router = nullptr;
  boost::asio::thread_pool* workers = nullptr;
  std::atomic<size_t> body_bytes_in_use{0};  // reserved by requests whose bodies are held

  std::mutex mu;  // guards the two below
  bool stopping = false;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, ServerContext& context);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Start();
  boost::asio::any_io_executor executor() { return socket_.get_executor(); }
  // Closes the socket and destroys the producer now. Idempotent.
  void Close();
  // Server stopping: closes now when no request is in hand, else after its response.
  void Drain();

 private:
  enum class Phase { kHead, kBody, kHandling, kResponding, kLinger, kClosed };
  // Lets the engine's threads ask for a Pump after the connection may be gone.
  struct WakeTarget {
    std::mutex mu;
    std::weak_ptr<Connection> connection;  // reset by Close
    std::atomic<bool> pending{false};
  };

  void ReadHead();
  void OnHead(const boost::system::error_code& ec);
  void ReadBody();
  void OnBody(const boost::system::error_code& ec);
  bool ReserveBody();
  void ReleaseBody();
  void Dispatch(Request request);
  // The route's response; a handler that throws answers 500 (any thread).
  Response RunHandler(const Router::Route& route, const Request& request) const;
  void OnResponse(Response response);
  void Pump();
  void SendWhole(const Response& response);
  void SendError(const HttpError& error);
  void Enqueue(std::string_view bytes);
  void Flush();
  void OnWrite(const boost::system::error_code& ec);
  void FinishResponse();
  void WatchClient();
  void OnWatch(const boost::system::error_code& ec, size_t n);
  void Linger();
  void LingerRead();
  void ArmDeadline(std::chrono::milliseconds after);
  void CancelDeadline();
  void OnDeadline();
  // Whether the request being read has sent any byte yet.
  bool GotBytes() const;

  ServerContext& context_;
  const HttpServerOptions& options_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;  // bytes read, not yet parsed (bounded: head limit + 64K)
  std::unique_ptr<RequestParser> parser_;
  Phase phase_ = Phase::kHead;
  uint64_t timer_generation_ = 0;
  bool timed_out_ = false;      // the deadline cancelled the read in flight
  bool keep_alive_ = true;
  bool http11_ = true;
  size_t body_reserved_ = 0;    // bytes counted in context_.body_bytes_in_use
  bool watching_ = false;       // a read is out to notice the client hanging up
  bool next_request_waits_on_watch_ = false;

  std::shared_ptr<WakeTarget> wake_;
  Response response_;           // the one being produced
  bool chunked_ = false;        // the response in flight is sent as chunks
  bool response_complete_ = false;  // everything of it is in outbox_ / writing_
  std::string outbox_;          // bytes waiting for the write in flight
  std::string writing_;         // bytes of the write in flight
  bool write_in_flight_ = false;
  std::string scratch_;         // lingering reads land here
};

}  // namespace kvserve::http
