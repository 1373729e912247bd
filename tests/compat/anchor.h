// The two sides of the compat suite, run as the user would run them: the built `kvserve`
// binary (make-model, generate --json) and llama.cpp through node-llama-cpp@3.21.1
// (tests/compat/node/anchor.mjs, installed by scripts/test.sh). Not thread-safe: one test
// process, one call at a time.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compat/compare.h"
#include "core/status.h"

namespace kvserve::compat {

// ../shared relative to the repository (/work/shared here), and a path inside it.
std::string SharedPath(const std::string& relative);

// Why llama.cpp cannot be run here (node missing, package not installed), or nullopt when it
// can. Tests skip with this message.
std::optional<std::string> AnchorUnavailableReason();

// Runs `node anchor.mjs COMMAND JOB.json` with the job written into work_dir; the JSON it
// prints, or an error carrying its stderr.
Result<nlohmann::json> RunAnchor(const std::string& command, const nlohmann::json& job,
                                 const std::string& work_dir);

// Runs `kvserve ARGS`; its stdout, or an error carrying its exit status and stderr.
Result<std::string> RunKvserve(const std::string& args, const std::string& work_dir);

// One generated token as `kvserve generate --json --logprobs K` prints it.
struct GeneratedToken {
  int32_t id = 0;
  std::vector<TokenLogprob> top;  // K most likely of the raw distribution, most likely first
};

// Parses generate's --json lines.
Result<std::vector<GeneratedToken>> ParseGenerateJson(const std::string& output);

// A unique directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvserve::compat
