// A real redis-server on 127.0.0.1 for tests: started on a free port with no persistence,
// killed (by its pid) at destruction.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

extern char** environ;

namespace kvserve::offload::testing {

inline constexpr const char* kRedisServerPath = "/usr/bin/redis-server";

class RedisServer {
 public:
  static bool Available() { return ::access(kRedisServerPath, X_OK) == 0; }

  // port 0: a free port.
  explicit RedisServer(int port = 0) {
    port_ = port != 0 ? port : FreePort();
    const std::string port_text = std::to_string(port_);
    const char* argv[] = {kRedisServerPath, "--port", port_text.c_str(), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--loglevel", "warning",
                          nullptr};
    if (::posix_spawn(&pid_, kRedisServerPath, nullptr, nullptr, const_cast<char**>(argv),
                      environ) != 0) {
      pid_ = -1;
      return;
    }
    for (int i = 0; i < 200 && !Accepting(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~RedisServer() { Kill(); }

  bool running() const { return pid_ > 0 && Accepting(); }
  int port() const { return port_; }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }
  bool Accepting() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return ok;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace kvserve::offload::testing
