// Test support: a file name in the temporary directory that no other test process uses.
// ctest runs test binaries side by side (-j2), and each test is its own process, so a fixed
// name like "/tmp/model.gguf" lets one test overwrite the file another is reading.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvserve::testing {

namespace internal {
// The names TempPath gave out; the files are removed when the test process exits normally
// (a test that dies on a CHECK leaves its files, which no later process reuses: the pid).
class TempFiles {
 public:
  ~TempFiles() {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }
  void Add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(path);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> paths_;
};

inline TempFiles& GivenTempFiles() {
  static TempFiles files;
  return files;
}
}  // namespace internal

// ::testing::TempDir() + "kvserve_<pid>_" + name, removed at exit. Example:
// TempPath("ds2_tiny.gguf").
inline std::string TempPath(const std::string& name) {
  std::string path = ::testing::TempDir() + "/kvserve_" + std::to_string(::getpid()) + "_" + name;
  internal::GivenTempFiles().Add(path);
  return path;
}

}  // namespace kvserve::testing
