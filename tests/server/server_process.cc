#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kvserve::server::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string TestModelPath() {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  return std::filesystem::exists(path) ? path : "";
}

bool ServerProcess::Start(const std::string& model, const std::vector<std::string>& extra,
                          double timeout_s) {
  port_ = FreePort();
  const std::string binary = std::string(KVSERVE_BINARY_DIR) + "/tools/kvserve";
  log_path_ = (std::filesystem::temp_directory_path() /
               ("kvserve_server_test_" + std::to_string(getpid()) + "_" +
                std::to_string(port_) + ".log")).string();
  std::vector<std::string> args = {binary, "serve", model, "--port", std::to_string(port_),
                                   "--host", "127.0.0.1"};
  const bool has_budget =
      std::find(extra.begin(), extra.end(), "--kv-cache-memory-bytes") != extra.end();
  if (!has_budget) args.insert(args.end(), {"--kv-cache-memory-bytes", "256MiB"});
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(0, 200000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto res = client.Get("/health"); res && res->status == 200) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "kvserve serve exited early:\n" + Log();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = "kvserve serve did not become healthy:\n" + Log();
  return false;
}

void ServerProcess::Terminate() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

int ServerProcess::Stop(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

ServerProcess::~ServerProcess() {
  Stop(20);
  if (!log_path_.empty()) std::filesystem::remove(log_path_);
}

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kvserve::server::testing
