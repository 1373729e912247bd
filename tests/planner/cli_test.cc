// `kvserve plan` end to end: the real binary, its exit codes and its JSON. Skipped when the
// binary has not been built (the planner library tests above do not need it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout, then stderr when merged
};

std::string Binary() {
  return std::string(KVSERVE_BINARY_DIR) + "/tools/kvserve";
}

RunResult RunPlan(const std::string& args, bool merge_stderr) {
  const std::string command =
      Binary() + " plan " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Binary())) GTEST_SKIP() << "no " << Binary() << " (not built)";
  }
};

TEST_F(PlanCli, SeedExampleJson) {
  const RunResult r = RunPlan(
      "--model deepseek-v4.1-flash --gpu h200 --tp 4 --cpu-offload-weights engram "
      "--gpu-memory-utilization 0.9 --json",
      /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_NEAR(j["device_weight_bytes"].get<double>() / (1ull << 30), 81.2, 0.1);
  EXPECT_NEAR(j["kv_pool_bytes"].get<double>() / (1ull << 30), 38.5, 0.2);
  EXPECT_EQ(j["bytes_per_token"].get<double>(), 890.0);
  EXPECT_EQ(j["options"]["num_gpus"].get<int>(), 4);
}

TEST_F(PlanCli, TextAndSvg) {
  RunResult r = RunPlan("--model llama-3.1-8b --gpu h100", /*merge_stderr=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("KV pool per device"), std::string::npos) << r.output;
  r = RunPlan("--model llama-3.1-70b --gpu h100 --num-gpus 8 --tp 4 --format svg", false);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.rfind("<svg", 0), 0u);
}

TEST_F(PlanCli, BadFlagsExitOneWithAMessage) {
  const char* cases[][2] = {
      {"--gpu h200", "--model is required"},
      {"--model llama-3.1-8b", "--gpu is required"},
      {"--model nope --gpu h200", "no model preset 'nope'"},
      {"--model llama-3.1-8b --gpu tpu9", "no device preset 'tpu9'"},
      {"--model llama-3.1-8b --gpu h200 --tp x", "--tp 'x' is not a number"},
      {"--model llama-3.1-8b --gpu h200 --tp 0", "--tp must be at least 1"},
      {"--model llama-3.1-8b --gpu h200 --gpu-memory-utilization 2", "(0, 1]"},
      {"--model llama-3.1-8b --gpu h200 --cpu-offload-weights engram", "no such part"},
      {"--model llama-3.1-8b --gpu h200 --kv-cache-dtype int2", "--kv-cache-dtype"},
      {"--model llama-3.1-8b --gpu h200 --format png", "--format 'png'"},
      {"--model llama-3.1-8b --gpu h200 --kv-cache-memory-bytes 0", "greater than 0"},
      {"--model llama-3.1-8b --gpu h200 --max-model-len -5", "--max-model-len"},
      {"--model /nonexistent/x.gguf --gpu cpu", "x.gguf"},
  };
  for (const auto& c : cases) {
    const RunResult r = RunPlan(c[0], /*merge_stderr=*/true);
    EXPECT_EQ(r.exit_code, 1) << c[0] << "\n" << r.output;
    EXPECT_NE(r.output.find("error: plan: "), std::string::npos) << c[0] << "\n" << r.output;
    EXPECT_NE(r.output.find(c[1]), std::string::npos) << c[0] << "\n" << r.output;
  }
}

TEST_F(PlanCli, LocalGgufOnCpu) {
  const std::string model = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model;
  const RunResult r =
      RunPlan("--model " + model + " --gpu cpu --kv-cache-memory-bytes 1MiB --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  // 5 layers x 2 x 4 heads x 8 dims x 4 B (f32) = 1280 B per token.
  EXPECT_EQ(j["bytes_per_token"].get<double>(), 1280.0);
  EXPECT_GT(j["kv_tokens"].get<int64_t>(), 0);
}

}  // namespace
