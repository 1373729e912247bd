// ServerProcess: the real `kvserve serve` binary on a free loopback port, for end-to-end tests.
// Starts it with the given flags, waits for /health, and stops it with SIGTERM (SIGKILL after
// a timeout). Its stdout and stderr go to a log file that failures print.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace kvserve::server::testing {

class ServerProcess {
 public:
  // Starts `kvserve serve MODEL --port P extra...`; false (with a message in error()) when it
  // did not become healthy within `timeout_s`.
  bool Start(const std::string& model, const std::vector<std::string>& extra, double timeout_s);
  ~ServerProcess();

  // SIGTERM, then waits up to `timeout_s`; returns the exit code (-1 when it had to be killed
  // or died from a signal).
  int Stop(double timeout_s);
  // Sends SIGTERM without waiting.
  void Terminate();
  int port() const { return port_; }
  int pid() const { return pid_; }
  const std::string& error() const { return error_; }
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  std::string error_;
};

// A port nobody listens on now (bound then released).
int FreePort();
// The model the tests use: ../shared/models/stories260K.gguf, or "" when absent.
std::string TestModelPath();

// A suite whose tests share one server on stories260K, started once with Derived::ServerFlags()
// (a static function returning the flags after the model). Tests skip when ../shared is absent
// and fail when the server did not start; port() is where it listens.
template <typename Derived>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = TestModelPath();
    if (model.empty()) return;
    server_ = new ServerProcess();
    if (!server_->Start(model, Derived::ServerFlags(), 60)) start_error_ = server_->error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }
  int port() const { return server_->port(); }

  inline static ServerProcess* server_ = nullptr;
  inline static std::string start_error_;
};

}  // namespace kvserve::server::testing
