// One source of truth, end to end: for each local model (stories260K, the make-model 110m
// preset, the kvserve-v41 mini preset, the gemma2, gemma3 and gpt-oss tiny presets) and several
// KV budgets, the token capacity and blocks per group that the real `kvserve serve` allocates at
// startup equal what `kvserve plan` and `kvserve inspect` print for the same budget.
//
// Each case starts `kvserve serve MODEL --kv-cache-memory-bytes B` (ServerProcess), waits for
// a 200 from /health, reads the block pools it really built from GET /v1/kv/state, stops it
// with SIGTERM, and parses its startup log (kv::FormatCapacityReport):
//   "KV group G <kind>: ...; N blocks x P B = ..."
//   "KV cache: T tokens (block size 16)"
//   "max concurrency at max-model-len L: C (...)"
// then runs `kvserve plan --model MODEL --gpu cpu --kv-cache-memory-bytes B --max-model-len L
// --json` and `kvserve inspect MODEL --kv-cache-memory-bytes B --json` (inspect resolves L
// itself, as serve does) and compares.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "server/http_client.h"
#include "server/server_process.h"

namespace kvserve::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kBinary = KVSERVE_BINARY_DIR "/tools/kvserve";
constexpr int kChunkTokens = 2048;  // serve's default --max-num-batched-tokens, passed to all

// Runs `kvserve ARGS`; returns stdout only (stderr dropped), exit code in `exit_code`.
std::string RunTool(const std::string& args, int& exit_code) {
  const std::string command = kBinary + " " + args + " 2>/dev/null";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// What serve's startup log says about its KV cache.
struct ServeKv {
  std::vector<int64_t> num_blocks;   // per group, null block included
  std::vector<int64_t> block_bytes;  // per group
  int64_t num_tokens = -1;
  int64_t max_model_len = -1;
  double max_concurrency = -1;
  int64_t request_bytes = -1;  // the max-concurrency formula's bytes of one max-length request
  double growing_bytes_per_token = -1;  // the headline: what every token of context adds
  double sliding_bytes_per_token = 0;   // "+ N B per token inside the sliding windows"
};

// The number right after the first `prefix` in `log` that a digit follows; -1 when none.
double NumberAfter(const std::string& log, const std::string& prefix, size_t from = 0) {
  for (size_t at = log.find(prefix, from); at != std::string::npos;
       at = log.find(prefix, at + 1)) {
    const char* number = log.c_str() + at + prefix.size();
    if (*number >= '0' && *number <= '9') return std::strtod(number, nullptr);
  }
  return -1;
}

// The startup log's numbers (plain string search: GCC 12 warns inside std::regex under the
// sanitizers).
ServeKv ParseServeLog(const std::string& log) {
  ServeKv kv;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {  // "KV group G KIND: ...; N blocks x P B"
    const size_t blocks = line.find(" blocks x ");
    if (line.find("KV group ") == std::string::npos || blocks == std::string::npos) continue;
    const size_t count = line.rfind("; ", blocks);
    kv.num_blocks.push_back(static_cast<int64_t>(NumberAfter(line, "; ", count)));
    kv.block_bytes.push_back(static_cast<int64_t>(NumberAfter(line, " blocks x ")));
  }
  kv.num_tokens = static_cast<int64_t>(NumberAfter(log, "KV cache: "));
  const std::string concurrency = "max concurrency at max-model-len ";
  kv.max_model_len = static_cast<int64_t>(NumberAfter(log, concurrency));
  if (const size_t at = log.find(concurrency); at != std::string::npos) {
    kv.max_concurrency = NumberAfter(log, ": ", at);
  }
  kv.request_bytes = static_cast<int64_t>(NumberAfter(log, "B null blocks) / "));
  kv.growing_bytes_per_token = NumberAfter(log, "KV bytes per token: ");
  kv.sliding_bytes_per_token = std::max(0.0, NumberAfter(log, " B (+ "));
  return kv;
}

// A running serve: its startup log and its GET /v1/kv/state (the pools it built).
struct ServeStartup {
  std::string log;
  Json kv_state;
};

// Starts `kvserve serve MODEL --kv-cache-memory-bytes BUDGET` (tests/server/server_process.h:
// a free loopback port, waits for /health so SIGTERM reaches a running accept loop), reads
// /v1/kv/state, stops it, and returns both; an empty log (with a failure) when it never got
// there.
ServeStartup StartAndStopServe(const std::string& model, uint64_t budget, double timeout_s = 120) {
  server::testing::ServerProcess server;
  const bool started = server.Start(model,
                                    {"--kv-cache-memory-bytes", std::to_string(budget),
                                     "--max-num-batched-tokens", std::to_string(kChunkTokens),
                                     "--threads", "1"},
                                    timeout_s);
  EXPECT_TRUE(started) << "kvserve serve " << model << " did not start: " << server.error();
  if (!started) return {};
  const server::testing::Reply state = server::testing::Get(server.port(), "/v1/kv/state");
  EXPECT_EQ(state.status, 200) << state.raw;
  server.Stop(30);
  return {server.Log(), state.body};
}

class CapacityServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "kvserve_capacity_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = new fs::path(pattern);
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(*dir_, ignored);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(fs::exists(kBinary)) << "build the kvserve target first"; }

  // `kvserve make-model ARGS -o dir/NAME` once per suite; returns the path.
  static std::string MakeModel(const std::string& args, const std::string& name) {
    const fs::path path = *dir_ / name;
    if (fs::exists(path)) return path.string();
    int code = -1;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string out = RunTool("make-model " + args + " -o " + path.string(), code);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(code, 0) << out;
    std::printf("make-model %s: %.2f s\n", args.c_str(), seconds);
    return path.string();
  }

  // The three-way check for one model and budget; serve's numbers (empty when it did not
  // start).
  ServeKv ExpectServePlanInspectAgree(const std::string& model, uint64_t budget) {
    SCOPED_TRACE(model + " budget " + std::to_string(budget));
    ServeKv serve;
    ExpectAgreement(model, budget, serve);
    return serve;
  }

  void ExpectAgreement(const std::string& model, uint64_t budget, ServeKv& serve) {
    const ServeStartup startup = StartAndStopServe(model, budget);
    const std::string& log = startup.log;
    if (log.empty()) return;
    serve = ParseServeLog(log);
    ASSERT_GT(serve.num_tokens, 0) << log;
    ASSERT_GT(serve.max_model_len, 0) << log;
    ASSERT_FALSE(serve.num_blocks.empty()) << log;
    // The block pools the running server built: the log's blocks less the null block each.
    const Json& groups = startup.kv_state["groups"];
    ASSERT_EQ(groups.size(), serve.num_blocks.size()) << startup.kv_state.dump();
    for (size_t g = 0; g < groups.size(); ++g) {
      EXPECT_EQ(groups[g]["blocks"]["total"].get<int64_t>(), serve.num_blocks[g] - 1) << g;
      EXPECT_EQ(groups[g]["block_bytes"].get<int64_t>(), serve.block_bytes[g]) << g;
    }

    int code = -1;
    const std::string plan_out = RunTool(
        "plan --model " + model + " --gpu cpu --kv-cache-memory-bytes " + std::to_string(budget) +
            " --max-model-len " + std::to_string(serve.max_model_len) +
            " --max-num-batched-tokens " + std::to_string(kChunkTokens) + " --json",
        code);
    ASSERT_EQ(code, 0) << plan_out;
    const Json plan = Json::parse(plan_out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(plan.is_discarded()) << plan_out;
    EXPECT_EQ(plan["kv_tokens"].get<int64_t>(), serve.num_tokens) << log;
    EXPECT_NEAR(plan["max_concurrency_exact"].get<double>(), serve.max_concurrency, 0.005);
    ASSERT_EQ(plan["kv_groups"].size(), serve.num_blocks.size()) << plan_out;
    for (size_t g = 0; g < serve.num_blocks.size(); ++g) {
      EXPECT_EQ(plan["kv_groups"][g]["num_blocks"].get<int64_t>(), serve.num_blocks[g]) << g;
      EXPECT_EQ(plan["kv_groups"][g]["block_bytes"].get<int64_t>(), serve.block_bytes[g]) << g;
    }

    const std::string inspect_out =
        RunTool("inspect " + model + " --kv-cache-memory-bytes " + std::to_string(budget) +
                    " --max-num-batched-tokens " + std::to_string(kChunkTokens) + " --json",
                code);
    ASSERT_EQ(code, 0) << inspect_out;
    const Json inspect = Json::parse(inspect_out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(inspect.is_discarded()) << inspect_out;
    const Json& kv = inspect["kv_cache"];
    ASSERT_TRUE(kv.is_object()) << inspect_out;
    EXPECT_EQ(kv["max_model_len"].get<int64_t>(), serve.max_model_len);
    EXPECT_EQ(kv["num_tokens"].get<int64_t>(), serve.num_tokens);
    ASSERT_EQ(kv["groups"].size(), serve.num_blocks.size());
    for (size_t g = 0; g < serve.num_blocks.size(); ++g) {
      EXPECT_EQ(kv["groups"][g]["num_blocks"].get<int64_t>(), serve.num_blocks[g]) << g;
    }
  }

  static fs::path* dir_;
};

fs::path* CapacityServeTest::dir_ = nullptr;

TEST_F(CapacityServeTest, Stories260K) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (../shared absent)";
  // f32 KV, 1280 B/token, 20480 B blocks: 1 MiB holds 51 blocks (the kv/config.h example).
  for (uint64_t budget : {uint64_t{1} << 20, (uint64_t{8} << 20) + 7, uint64_t{64} << 20}) {
    ExpectServePlanInspectAgree(path, budget);
  }
}

// llama 110m shape (12 layers x 12 KV heads x 64 dims, f16 KV = 36864 B/token, context
// 32768), q4_0 matrices to keep the file small. The small budgets make serve lower
// --max-model-len to what fits; plan is given that length, inspect finds it itself.
TEST_F(CapacityServeTest, Preset110m) {
  const std::string path = MakeModel("--preset 110m --type q4_0 --seed 3", "110m-q4_0.gguf");
  for (uint64_t budget : {uint64_t{16} << 20, (uint64_t{100} << 20) + 7, uint64_t{256} << 20}) {
    ExpectServePlanInspectAgree(path, budget);
  }
}

// The hybrid: a sliding FP8 window in every layer plus two latent groups; the split between
// the three arenas depends on max-model-len and the prefill chunk.
TEST_F(CapacityServeTest, V41Mini) {
  const std::string path = MakeModel("--arch kvserve-v41 --preset mini --seed 3", "v41-mini.gguf");
  for (uint64_t budget : {uint64_t{1} << 20, (uint64_t{8} << 20) + 7, uint64_t{64} << 20}) {
    ExpectServePlanInspectAgree(path, budget);
  }
}

// Gemma: the sliding-window layers form one group (blocks for the window and the prefill chunk
// per sequence), the global layers a full group (bytes per token); gemma3 tiny has layers 0-4
// and 6-7 sliding over 16 tokens and layer 5 global, gemma2 tiny alternates them.
TEST_F(CapacityServeTest, GemmaTiny) {
  for (const char* arch : {"gemma3", "gemma2"}) {
    const std::string path = MakeModel(std::string("--arch ") + arch + " --preset tiny --seed 3",
                                       std::string(arch) + "-tiny.gguf");
    for (uint64_t budget : {uint64_t{1} << 20, (uint64_t{8} << 20) + 7}) {
      ExpectServePlanInspectAgree(path, budget);
    }
  }
}

// gpt-oss: the even layers slide over a window (128 tokens published, 16 in tiny), the odd ones
// are global: a sliding group and a full group (model::DenseKvGroups, full first). With F16 KV
// (mxfp4_moe quantizes every matrix) each group's 2 layers hold 2 (K,V) x 2 layers x 2 KV heads
// x 32 dims x 2 B = 512 B per token, 8192 B per 16-token block. The headline bytes per token
// counts the full layers only; the sliding group holds the window plus a prefill chunk (and one
// block) per sequence whatever its length. So one max-length request of L tokens needs
//   M = ceil(L / 16) x 8192 B + min(ceil((16 + 2048) / 16) + 1, ceil(L / 16)) x 8192 B
// and serve's pools, plan and inspect all split the budget by it (kv/config.h):
//   blocks_g = floor((budget - 2 null blocks) x B_g / M) + 1.
TEST_F(CapacityServeTest, GptOssTiny) {
  const std::string path =
      MakeModel("--arch gpt-oss --preset tiny --type mxfp4_moe --seed 3", "gpt-oss-tiny.gguf");
  constexpr int64_t kBlockBytes = 16 * 512;
  for (uint64_t budget : {uint64_t{1} << 20, (uint64_t{8} << 20) + 7, uint64_t{64} << 20}) {
    SCOPED_TRACE(budget);
    const ServeKv serve = ExpectServePlanInspectAgree(path, budget);
    ASSERT_EQ(serve.num_blocks.size(), 2u);
    EXPECT_EQ(serve.growing_bytes_per_token, 512.0);
    EXPECT_EQ(serve.sliding_bytes_per_token, 512.0);
    EXPECT_EQ(serve.block_bytes, (std::vector<int64_t>{kBlockBytes, kBlockBytes}));
    const int64_t full_blocks = (serve.max_model_len + 15) / 16;
    const int64_t window_blocks = std::min<int64_t>((16 + kChunkTokens + 15) / 16 + 1, full_blocks);
    if (budget == uint64_t{64} << 20) {  // the whole context fits: the window is the fixed part
      EXPECT_EQ(serve.max_model_len, 4096);
      EXPECT_EQ(window_blocks, 130);
    }
    const int64_t request_bytes = (full_blocks + window_blocks) * kBlockBytes;
    EXPECT_EQ(serve.request_bytes, request_bytes);
    const uint64_t usable = budget - 2 * kBlockBytes;
    const auto blocks = [&](int64_t per_request) {
      return static_cast<int64_t>(usable * static_cast<uint64_t>(per_request) /
                                  static_cast<uint64_t>(request_bytes)) + 1;
    };
    EXPECT_EQ(serve.num_blocks[0], blocks(full_blocks));
    EXPECT_EQ(serve.num_blocks[1], blocks(window_blocks));
    EXPECT_EQ(serve.num_tokens, (serve.num_blocks[0] - 1) * 16);
  }
}

}  // namespace
}  // namespace kvserve::tools
