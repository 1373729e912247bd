// Test support: a file name in the temporary directory that no other test process uses.
// ctest runs test binaries side by side (-j2), and each test is its own process, so a fixed
// name like "/tmp/model.gguf" lets one test overwrite the file another is reading.
#pragma once

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace kvserve::testing {

// ::testing::TempDir() + "kvserve_<pid>_" + name. Example: TempPath("ds2_tiny.gguf").
inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/kvserve_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace kvserve::testing
