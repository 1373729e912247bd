#include "http/connection.h"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include "core/log.h"

namespace kvserve::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

constexpr size_t kReadSlackBytes = 64u << 10;  // read buffer beyond the head limit
constexpr std::chrono::milliseconds kLingerTime{2000};
constexpr size_t kWatchReadBytes = 4096;

// "HTTP/1.1 200 OK\r\n" + fields + framing + "\r\n".
std::string Head(const Response& r, std::optional<size_t> content_length, bool chunked,
                 bool keep_alive) {
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(r.status));
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", r.status,
                                 std::string_view(reason.data(), reason.size()),
                                 r.content_type);
  for (const auto& [k, v] : r.headers) head += fmt::format("{}: {}\r\n", k, v);
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  } else if (content_length) {
    head += fmt::format("Content-Length: {}\r\n", *content_length);
  }
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, ServerContext& context)
    : context_(context),
      options_(*context.options),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      buffer_(context.options->limits.max_header_bytes + kReadSlackBytes),
      wake_(std::make_shared<WakeTarget>()) {}

Connection::~Connection() {
  ReleaseBody();
  std::lock_guard<std::mutex> lock(context_.mu);
  context_.connections.erase(this);
}

void Connection::Start() {
  wake_->connection = weak_from_this();
  ReadHead();
}

void Connection::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    wake_->connection.reset();
  }
  CancelDeadline();
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  response_.producer.reset();  // e.g. aborts the engine requests of a stream
  ReleaseBody();
}

void Connection::Drain() {
  keep_alive_ = false;
  if (phase_ == Phase::kHead || phase_ == Phase::kBody) Close();
}

bool Connection::GotBytes() const {
  return buffer_.size() > 0 || (parser_ && parser_->got_some());
}

void Connection::ReadHead() {
  phase_ = Phase::kHead;
  parser_ = NewParser(options_.limits);
  timed_out_ = false;
  ArmDeadline(options_.header_timeout);
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](const error_code& ec, size_t) {
                             self->OnHead(ec);
                           });
}

void Connection::OnHead(const error_code& ec) {
  if (phase_ == Phase::kClosed) return;
  CancelDeadline();
  if (ec) {
    if (timed_out_) {
      if (GotBytes()) return SendError({408, "the request head did not arrive in time"});
      return Close();
    }
    if (std::optional<HttpError> e = ErrorForParse(ec, options_.limits, GotBytes())) {
      return SendError(*e);
    }
    return Close();
  }
  if (std::optional<HttpError> e = CheckHead(*parser_)) return SendError(*e);
  if (!ReserveBody()) {
    return SendError({503, "too many request bodies are being received; retry later"});
  }
  const auto& head = parser_->get();
  keep_alive_ = head.keep_alive();
  http11_ = head.version() == 11;
  if (ExpectsContinue(*parser_) && !parser_->is_done()) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    error_code write_ec;  // tiny: the socket's buffer takes it at once
    asio::write(socket_, asio::buffer(kContinue), write_ec);
    if (write_ec) return Close();
  }
  ReadBody();
}

bool Connection::ReserveBody() {
  const boost::optional<uint64_t> length = parser_->content_length();
  const size_t want = length ? static_cast<size_t>(*length)
                              : (parser_->chunked() ? options_.limits.max_body_bytes : 0);
  if (want == 0) return true;
  size_t used = context_.body_bytes_in_use.load();
  do {
    if (used + want > options_.max_total_body_bytes) return false;
  } while (!context_.body_bytes_in_use.compare_exchange_weak(used, used + want));
  body_reserved_ = want;
  return true;
}

void Connection::ReleaseBody() {
  if (body_reserved_ == 0) return;
  context_.body_bytes_in_use.fetch_sub(body_reserved_);
  body_reserved_ = 0;
}

void Connection::ReadBody() {
  phase_ = Phase::kBody;
  if (parser_->is_done()) return OnBody({});
  timed_out_ = false;
  ArmDeadline(options_.body_timeout);
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](const error_code& ec, size_t) {
                      self->OnBody(ec);
                    });
}

void Connection::OnBody(const error_code& ec) {
  if (phase_ == Phase::kClosed) return;
  CancelDeadline();
  if (ec) {
    if (timed_out_) return SendError({408, "the request body did not arrive in time"});
    if (std::optional<HttpError> e = ErrorForParse(ec, options_.limits, true)) {
      return SendError(*e);
    }
    return Close();
  }
  Request request = TakeRequest(*parser_);
  parser_.reset();
  Dispatch(std::move(request));
}

void Connection::Dispatch(Request request) {
  phase_ = Phase::kHandling;
  const Router::Route* route = context_.router->Find(request.method, request.path);
  if (route == nullptr) {
    ReleaseBody();
    return OnResponse(options_.error_response(
        404, fmt::format("no route for {} {}", request.method, request.path)));
  }
  if (route->where == Router::kInline) {
    Response response = RunHandler(*route, request);
    ReleaseBody();
    return OnResponse(std::move(response));
  }
  WatchClient();
  asio::post(*context_.workers, [self = shared_from_this(), route,
                                 request = std::move(request)]() mutable {
    Response response = self->RunHandler(*route, request);
    request = Request();  // free the body before the response goes out
    asio::post(self->socket_.get_executor(),
               [self, response = std::move(response)]() mutable {
                 self->ReleaseBody();
                 self->OnResponse(std::move(response));
               });
  });
}

Response Connection::RunHandler(const Router::Route& route, const Request& request) const {
  try {
    return route.handler(request);
  } catch (const std::exception& e) {
    KV_LOG(ERROR, "handler for {} failed: {}", request.path, e.what());
    return options_.error_response(500, "internal error");
  }
}

void Connection::OnResponse(Response response) {
  if (phase_ == Phase::kClosed) return;  // the client went away meanwhile
  phase_ = Phase::kResponding;
  if (!response.producer) return SendWhole(response);
  response_ = std::move(response);
  chunked_ = response_.streamed && http11_;
  if (response_.streamed) {
    if (!http11_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
    Enqueue(Head(response_, std::nullopt, chunked_, keep_alive_));
    Flush();
  }
  if (!watching_) WatchClient();
  std::weak_ptr<WakeTarget> weak_target = wake_;
  response_.producer->Start([weak_target] {
    std::shared_ptr<WakeTarget> target = weak_target.lock();
    if (!target || target->pending.exchange(true)) return;
    std::lock_guard<std::mutex> lock(target->mu);
    if (std::shared_ptr<Connection> c = target->connection.lock()) {
      asio::post(c->socket_.get_executor(), [c] { c->Pump(); });
    }
  });
  Pump();
}

void Connection::Pump() {
  wake_->pending.store(false);
  if (phase_ != Phase::kResponding || !response_.producer) return;
  bool done = false;
  try {
    done = response_.producer->Pull(&response_);
  } catch (const std::exception& e) {
    KV_LOG(ERROR, "response producer failed: {}", e.what());
    return Close();
  }
  if (!response_.streamed) {
    if (!done) return;
    response_.producer.reset();
    return SendWhole(response_);
  }
  if (!response_.body.empty()) {
    if (chunked_) Enqueue(fmt::format("{:x}\r\n", response_.body.size()));
    Enqueue(response_.body);
    if (chunked_) Enqueue("\r\n");
    response_.body.clear();
  }
  if (done) {
    if (chunked_) Enqueue("0\r\n\r\n");
    response_.producer.reset();  // frees the request's engine state now, not when written
    response_complete_ = true;
  }
  if (outbox_.size() > options_.max_buffered_bytes) {
    KV_LOG(WARNING, "dropping a client that reads too slowly ({} bytes waiting)",
           outbox_.size());
    return Close();
  }
  Flush();
}

void Connection::SendWhole(const Response& response) {
  phase_ = Phase::kResponding;
  Enqueue(Head(response, response.body.size(), false, keep_alive_));
  Enqueue(response.body);
  response_complete_ = true;
  Flush();
}

void Connection::SendError(const HttpError& error) {
  keep_alive_ = false;
  parser_.reset();
  ReleaseBody();
  SendWhole(options_.error_response(error.status, error.message));
}

void Connection::Enqueue(std::string_view bytes) { outbox_.append(bytes); }

void Connection::Flush() {
  if (write_in_flight_ || phase_ == Phase::kClosed) return;
  if (outbox_.empty()) {
    if (response_complete_) FinishResponse();
    return;
  }
  writing_.swap(outbox_);
  outbox_.clear();
  write_in_flight_ = true;
  ArmDeadline(options_.write_timeout);
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const error_code& ec, size_t) {
                      self->OnWrite(ec);
                    });
}

void Connection::OnWrite(const error_code& ec) {
  write_in_flight_ = false;
  if (phase_ == Phase::kClosed) return;
  CancelDeadline();
  if (ec) return Close();  // client gone, or stalled past the write timeout
  writing_.clear();
  Flush();
}

void Connection::FinishResponse() {
  response_complete_ = false;
  response_ = Response();
  if (!keep_alive_) return Linger();
  {
    std::lock_guard<std::mutex> lock(context_.mu);
    if (context_.stopping) return Linger();
  }
  if (watching_) {  // the watch read becomes the next request's first read
    next_request_waits_on_watch_ = true;
    phase_ = Phase::kHead;
    timed_out_ = false;
    ArmDeadline(options_.header_timeout);
    return;
  }
  ReadHead();
}

void Connection::WatchClient() {
  // Bytes already buffered are a pipelined request: the client is there, and its request is
  // read as soon as this response is out (a watch read now would sit behind them).
  if (watching_ || buffer_.size() > 0) return;
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(kWatchReadBytes),
                          [self = shared_from_this()](const error_code& ec, size_t n) {
                            self->OnWatch(ec, n);
                          });
}

void Connection::OnWatch(const error_code& ec, size_t n) {
  watching_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    // The client hung up (or the idle deadline cancelled the read): drop whatever is being
    // produced for it.
    return Close();
  }
  if (phase_ == Phase::kLinger) return LingerRead();
  buffer_.commit(n);
  if (next_request_waits_on_watch_) {
    next_request_waits_on_watch_ = false;
    CancelDeadline();
    ReadHead();
  }
}

// After a response with Connection: close: stop sending, read (and drop) what the client
// still sends for a moment so it sees the response rather than a reset, then close.
void Connection::Linger() {
  phase_ = Phase::kLinger;
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  ArmDeadline(kLingerTime);
  if (!watching_) LingerRead();  // else the watch's completion closes or reads on
}

void Connection::LingerRead() {
  scratch_.resize(kWatchReadBytes);
  socket_.async_read_some(asio::buffer(scratch_),
                          [self = shared_from_this()](const error_code& ec, size_t) {
                            if (ec) return self->Close();
                            if (self->phase_ == Phase::kLinger) self->LingerRead();
                          });
}

void Connection::ArmDeadline(std::chrono::milliseconds after) {
  const uint64_t generation = ++timer_generation_;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (!ec && generation == self->timer_generation_) self->OnDeadline();
  });
}

void Connection::CancelDeadline() {
  ++timer_generation_;
  timer_.cancel();
}

void Connection::OnDeadline() {
  switch (phase_) {
    case Phase::kHead:
      if (next_request_waits_on_watch_) return Close();  // idle keep-alive connection
      [[fallthrough]];
    case Phase::kBody: {
      timed_out_ = true;
      error_code ignored;
      socket_.cancel(ignored);  // the read completes with operation_aborted
      return;
    }
    case Phase::kResponding:  // a write made no progress
    case Phase::kLinger:
      return Close();
    case Phase::kHandling:
    case Phase::kClosed:
      return;
  }
}

}  // namespace kvserve::http
