#include "raw_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace kvserve::server::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int64_t MsLeft(std::chrono::steady_clock::time_point deadline) {
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  deadline - std::chrono::steady_clock::now())
                                  .count());
}

}  // namespace

RawConnection::RawConnection(int port, int receive_buffer_bytes) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  if (receive_buffer_bytes > 0) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
  }
  sockaddr_in addr = Loopback(port);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) close(fd_);
}

bool RawConnection::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string RawConnection::ReadAll(std::chrono::milliseconds timeout, size_t max_bytes) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  char buf[65536];
  while (out.size() < max_bytes) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(MsLeft(deadline))) <= 0) break;
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string RawConnection::ReadResponse(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  char buf[65536];
  while (true) {
    const size_t head_end = out.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end) {
        const size_t length = std::stoul(out.substr(cl + 16));
        if (out.size() >= head_end + 4 + length) return out.substr(0, head_end + 4 + length);
      }
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(MsLeft(deadline))) <= 0) return out;
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

bool RawConnection::Readable(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

bool RawConnection::PeerClosed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(MsLeft(deadline))) <= 0) return false;
    if (recv(fd_, buf, sizeof(buf), 0) <= 0) return true;
  }
}

int StatusOf(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

std::string BodyOf(const std::string& response) {
  const size_t head_end = response.find("\r\n\r\n");
  return head_end == std::string::npos ? "" : response.substr(head_end + 4);
}

std::string PostRequest(const std::string& path, const std::string& body,
                        const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

LoadOutcome RunClients(int port, const std::vector<std::string>& requests,
                       std::chrono::milliseconds timeout) {
  struct Client {
    int fd = -1;
    size_t sent = 0;
    std::string received;
    bool done = false;
  };
  LoadOutcome outcome;
  std::vector<Client> clients(requests.size());
  const int ep = epoll_create1(0);
  for (size_t i = 0; i < clients.size(); ++i) {
    Client& c = clients[i];
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr = Loopback(port);
    const int rc = connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (c.fd < 0 || (rc != 0 && errno != EINPROGRESS)) {
      ++outcome.num_connect_failures;
      c.done = true;
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t num_open = 0;
  for (const Client& c : clients) num_open += c.done ? 0 : 1;
  std::vector<epoll_event> events(256);
  char buf[65536];
  auto finish = [&](Client& c, bool reset) {
    c.done = true;
    --num_open;
    if (reset) ++outcome.num_resets;
    epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
  };
  while (num_open > 0 && MsLeft(deadline) > 0) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()),
                             static_cast<int>(std::min<int64_t>(MsLeft(deadline), 100)));
    for (int k = 0; k < n; ++k) {
      const size_t i = events[k].data.u64;
      Client& c = clients[i];
      if (c.done) continue;
      const std::string& req = requests[i];
      if ((events[k].events & EPOLLOUT) && c.sent < req.size()) {
        const ssize_t w = send(c.fd, req.data() + c.sent, req.size() - c.sent, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
          finish(c, true);
          continue;
        }
        if (w > 0) c.sent += static_cast<size_t>(w);
        if (c.sent == req.size()) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = i;
          epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        }
      }
      if (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        while (true) {
          const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
          if (r > 0) {
            c.received.append(buf, static_cast<size_t>(r));
            continue;
          }
          if (r == 0) finish(c, false);
          else if (errno != EAGAIN) finish(c, true);
          break;
        }
      }
    }
  }
  for (Client& c : clients) {
    const int status = StatusOf(c.received);
    outcome.statuses.push_back(status);
    if (status == 0 && c.fd >= 0) ++outcome.num_silent;
    const bool sse = c.received.find("text/event-stream") != std::string::npos;
    if (status == 200 && sse && c.received.find("data: [DONE]") == std::string::npos) {
      ++outcome.num_incomplete_streams;
    }
    if (c.fd >= 0) close(c.fd);
  }
  close(ep);
  return outcome;
}

size_t ResidentBytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace kvserve::server::testing
