#include "http/http_server.h"

#include <fmt/format.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <thread>
#include <vector>

#include "core/log.h"
#include "http/connection.h"

namespace kvserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr int kSendBufferBytes = 256 << 10;

// Lets the process hold as many connections as its hard open-file limit allows.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

struct HttpServer::Impl {
  Impl(HttpServerOptions o, const Router& router)
      : options(std::move(o)),
        workers(static_cast<size_t>(std::max(options.num_worker_threads, 1))),
        guard(asio::make_work_guard(io)),
        acceptor(asio::make_strand(io)),
        retry_timer(acceptor.get_executor()) {
    context.options = &options;
    context.router = &router;
    context.workers = &workers;
  }

  void Accept();
  void OnAccept(const error_code& ec, tcp::socket socket);

  HttpServerOptions options;
  ServerContext context;  // before io and workers: their handlers' connections point into it
  asio::io_context io;
  asio::thread_pool workers;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;  // backs off when accept fails (e.g. out of descriptors)
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](const error_code& ec, tcp::socket s) {
    OnAccept(ec, std::move(s));
  });
}

void HttpServer::Impl::OnAccept(const error_code& ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    // EMFILE / ENFILE / ENOBUFS: the connection stays in the backlog; try again shortly.
    KV_LOG(WARNING, "accept failed: {}; retrying", ec.message());
    retry_timer.expires_after(std::chrono::milliseconds(50));
    retry_timer.async_wait([this](const error_code& e) {
      if (!e) Accept();
    });
    return;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks go out when written
  // A fixed kernel send buffer (no autotuning up to tcp_wmem's 4 MiB): what a client that
  // does not read can hold is this plus max_buffered_bytes, and then it is dropped.
  socket.set_option(asio::socket_base::send_buffer_size(kSendBufferBytes), ignored);
  auto connection = std::make_shared<Connection>(std::move(socket), context);
  {
    std::lock_guard<std::mutex> lock(context.mu);
    if (context.stopping) return;  // the socket closes with the connection
    context.connections.emplace(connection.get(), connection);
  }
  asio::post(connection->executor(), [connection] { connection->Start(); });
  Accept();
}

HttpServer::HttpServer(HttpServerOptions options, const Router& router)
    : impl_(std::make_unique<Impl>(std::move(options), router)) {}

HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Bind() {
  RaiseOpenFileLimit();
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(impl_->options.host, ec);
  if (ec) return InvalidArgument(fmt::format("--host {}: not an IP address", impl_->options.host));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(impl_->options.port));
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  // Backlog SOMAXCONN (the kernel's net.core.somaxconn): bursts wait in the accept queue.
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return IoError(fmt::format("cannot listen on {}:{}: {}", impl_->options.host,
                               impl_->options.port, ec.message()));
  }
  return static_cast<int>(acceptor.local_endpoint().port());
}

void HttpServer::Run() {
  asio::post(impl_->acceptor.get_executor(), [this] { impl_->Accept(); });
  auto run = [this] {
    while (true) {
      try {
        impl_->io.run();
        return;
      } catch (const std::exception& e) {
        KV_LOG(ERROR, "HTTP I/O thread: {}", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < impl_->options.num_io_threads; ++i) threads.emplace_back(run);
  run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::Stop(std::chrono::milliseconds drain_timeout) {
  {
    std::lock_guard<std::mutex> lock(impl_->context.mu);
    if (impl_->context.stopping) return;
    impl_->context.stopping = true;
  }
  asio::post(impl_->acceptor.get_executor(), [this] {
    error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->retry_timer.cancel();
  });
  auto post_to_all = [this](void (Connection::*action)()) {
    std::vector<std::shared_ptr<Connection>> open;
    {
      std::lock_guard<std::mutex> lock(impl_->context.mu);
      for (auto& [ptr, weak] : impl_->context.connections) {
        if (std::shared_ptr<Connection> c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (std::shared_ptr<Connection>& c : open) {
      asio::post(c->executor(), [c, action] { (c.get()->*action)(); });
    }
    return open.size();
  };
  post_to_all(&Connection::Drain);
  const auto deadline = std::chrono::steady_clock::now() + drain_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(impl_->context.mu);
      if (impl_->context.connections.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  post_to_all(&Connection::Close);
  // Handlers still running post their answers to closed connections, which drop them; then
  // nothing is left for the I/O threads and Run returns.
  impl_->workers.join();
  impl_->guard.reset();
}

}  // namespace kvserve::http
