#include "compat/anchor.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvserve::compat {
namespace {

namespace fs = std::filesystem;

const std::string kAnchorDir = std::string(KVSERVE_SOURCE_DIR) + "/tests/compat/node";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `command` through the shell with stdout captured and stderr sent to err_path.
Result<std::string> RunShell(const std::string& command, const std::string& err_path) {
  const std::string full = command + " 2> '" + err_path + "'";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return IoError("popen failed: " + command);
  std::string out;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string err = ReadText(err_path);
    if (err.size() > 4000) err = "..." + err.substr(err.size() - 4000);
    return Internal(command + " failed (status " + std::to_string(status) + "):\n" + err);
  }
  return out;
}

}  // namespace

std::string SharedPath(const std::string& relative) {
  return std::string(KVSERVE_SHARED_DIR) + "/" + relative;
}

std::optional<std::string> AnchorUnavailableReason() {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    return "node is not installed (scripts/setup.sh installs it)";
  }
  if (!fs::exists(kAnchorDir + "/node_modules/node-llama-cpp/package.json") ||
      !fs::exists(kAnchorDir + "/node_modules/@node-llama-cpp/linux-x64/package.json")) {
    return "node-llama-cpp@3.21.1 is not installed in " + kAnchorDir +
           " (scripts/test.sh installs it: npm ci --omit=optional there)";
  }
  return std::nullopt;
}

Result<nlohmann::json> RunAnchor(const std::string& command, const nlohmann::json& job,
                                 const std::string& work_dir) {
  const std::string job_path = work_dir + "/" + command + "-job.json";
  std::ofstream(job_path) << job.dump();
  KV_ASSIGN_OR_RETURN(std::string out, RunShell("node '" + kAnchorDir + "/anchor.mjs' " + command +
                                                    " '" + job_path + "'",
                                                work_dir + "/" + command + "-stderr.txt"));
  try {
    return nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception& e) {
    return Internal(std::string("anchor.mjs printed no JSON: ") + e.what());
  }
}

Result<std::string> RunKvserve(const std::string& args, const std::string& work_dir) {
  return RunShell(std::string(KVSERVE_BINARY_DIR) + "/tools/kvserve " + args,
                  work_dir + "/kvserve-stderr.txt");
}

Result<std::vector<GeneratedToken>> ParseGenerateJson(const std::string& output) {
  std::vector<GeneratedToken> tokens;
  std::istringstream lines(output);
  std::string line;
  try {
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      GeneratedToken t{j.at("id").get<int32_t>(), {}};
      for (const nlohmann::json& top : j.at("top_logprobs")) {
        TokenLogprob entry{top.at("id").get<int32_t>(), std::nullopt};
        if (top.at("logprob").is_number()) entry.logprob = top.at("logprob").get<double>();
        t.top.push_back(entry);
      }
      tokens.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    return Internal("bad generate --json line '" + line + "': " + e.what());
  }
  return tokens;
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "kvserve_compat.XXXXXX").string();
  CHECK(::mkdtemp(pattern.data()) != nullptr) << "mkdtemp failed";
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

}  // namespace kvserve::compat
