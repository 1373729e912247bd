#include "tools/bench_compare_util.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "kernels/cpu/matmul.h"
#include "kv/config.h"
#include "model/kv_layout.h"

namespace kvserve::tools {
namespace {

namespace fs = std::filesystem;

// Sums n 64-bit words with 8 independent accumulators (one pass of reads).
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t SumWords(const uint64_t* p,
                                                                               size_t n) {
  uint64_t s[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) s[k] += p[i + k];
  }
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

}  // namespace

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

double MeasureReadBandwidth(int threads) {
  constexpr size_t kBytes = size_t{1} << 30;
  const size_t words = kBytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  const size_t per_thread = words / threads;
  auto parallel = [&](auto&& body) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
    for (std::thread& th : pool) th.join();
  };
  parallel([&](int t) {  // touch every page from the thread that will read it
    std::fill(buffer.get() + t * per_thread, buffer.get() + (t + 1) * per_thread,
              static_cast<uint64_t>(t + 1));
  });
  double best = 0;
  std::vector<uint64_t> sums(threads);
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    parallel([&](int t) { sums[t] = SumWords(buffer.get() + t * per_thread, per_thread); });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(per_thread * threads * sizeof(uint64_t)) / seconds);
  }
  CHECK_GT(sums[0], 0u);  // the sums are used, so the reads are not optimised away
  return best;
}

Result<MachineFacts> GatherFacts(const gguf::GgufFile& file, int threads,
                                 const std::string& llama_cpp_dir) {
  MachineFacts m;
  m.cpu_model = CpuModel();
  m.simd_target = std::string(kernels::MatMulTargetName());
  KV_ASSIGN_OR_RETURN(std::string info, RunCommand("node '" + llama_cpp_dir + "/anchor.mjs' info"));
  try {
    const nlohmann::json j = nlohmann::json::parse(info);
    m.llama_cpp = fmt::format(
        "node-llama-cpp {} (llama.cpp {} {}; {})", j.at("node_llama_cpp").get<std::string>(),
        j.at("llama_cpp").at("repo").get<std::string>(),
        j.at("llama_cpp").at("release").get<std::string>(), j.at("system_info").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return Internal(std::string("anchor.mjs info: ") + e.what());
  }
  // A decode step reads every weight matrix once; the embedding table only when the output
  // is tied to it (else one row); of a mixture of experts' stacked expert tensors (*_exps),
  // the expert_used_count experts a token is routed to.
  const bool tied = file.FindTensor("output.weight") == nullptr;
  KV_ASSIGN_OR_RETURN(std::string arch_name, file.GetStringOr("general.architecture", "?"));
  KV_ASSIGN_OR_RETURN(int64_t experts, file.GetIntOr(arch_name + ".expert_count", 0));
  KV_ASSIGN_OR_RETURN(int64_t used, file.GetIntOr(arch_name + ".expert_used_count", 0));
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    const bool stacked = experts > 0 && t.name.find("_exps.") != std::string::npos;
    m.weight_bytes_per_token += stacked ? static_cast<double>(t.size_bytes) *
                                              static_cast<double>(std::min(used, experts)) /
                                              static_cast<double>(experts)
                                        : static_cast<double>(t.size_bytes);
    if (stacked) m.expert_bytes += static_cast<double>(t.size_bytes);
  }
  if (m.expert_bytes > 0) {
    m.experts = experts;
    m.experts_used = std::min(used, experts);
  }
  KV_ASSIGN_OR_RETURN(model::ModelKvLayout layout, model::MakeModelKvLayout(file, {}));
  KV_ASSIGN_OR_RETURN(kv::KvCapacity capacity, kv::ComputeCapacity(layout.config, 1ull << 32));
  m.kv_bytes_per_token = capacity.bytes_per_token;
  KV_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                      file.GetStringArray("tokenizer.ggml.tokens"));
  m.vocab_size = static_cast<int>(tokens.size());
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetStringOr("general.architecture", "?"));
  m.model_summary =
      fmt::format("{:.1f} MB, {}, vocabulary {}", file.file_size() / 1e6, arch, m.vocab_size);
  m.bandwidth_bytes_per_s = MeasureReadBandwidth(threads);
  return m;
}

void PrintFacts(const MachineFacts& m, int threads) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  fmt::print("date: {}\nCPU: {}, {} threads for both sides; load average {}\n", date, m.cpu_model,
             threads, LoadAverage());
  fmt::print("kvserve SIMD target: {}\nllama.cpp: {}\nmodel: {}\n", m.simd_target, m.llama_cpp,
             m.model_summary);
  fmt::print("memory read bandwidth ({} threads, 1 GiB, best of 3): {:.1f} GB/s\n", threads,
             m.bandwidth_bytes_per_s / 1e9);
  fmt::print(
      "decode roof: {:.0f} tokens/s at context 0 ({:.1f} MB of weights read per token; "
      "each token of context adds {:.0f} B of KV)\n",
      m.bandwidth_bytes_per_s / m.weight_bytes_per_token, m.weight_bytes_per_token / 1e6,
      m.kv_bytes_per_token);
}

double StepBytes(const MachineFacts& m, int sequences, double context) {
  double weights = m.weight_bytes_per_token;
  if (m.experts > 0) {
    const double one = m.expert_bytes * static_cast<double>(m.experts_used) /
                       static_cast<double>(m.experts);
    const double missed = std::pow(1.0 - static_cast<double>(m.experts_used) /
                                             static_cast<double>(m.experts), sequences);
    weights += m.expert_bytes * (1.0 - missed) - one;
  }
  return weights + sequences * context * m.kv_bytes_per_token;
}

Status EnsureLlamaCpp(const std::string& dir) {
  if (fs::exists(dir + "/node_modules/node-llama-cpp/package.json") &&
      fs::exists(dir + "/node_modules/@node-llama-cpp/linux-x64/package.json")) {
    return Status::Ok();
  }
  if (!fs::exists(dir + "/package-lock.json")) {
    return NotFound("no package-lock.json in " + dir + " (--llama-cpp-dir)");
  }
  fmt::print(stderr, "installing node-llama-cpp@3.21.1 into {} (npm ci)\n", dir);
  const std::string command = "cd '" + dir +
                              "' && npm ci --omit=optional --ignore-scripts "
                              "--no-audit --no-fund --silent >&2";
  if (std::system(command.c_str()) != 0) {
    return Unavailable("npm ci failed in " + dir + ": llama.cpp (node-llama-cpp) is needed");
  }
  return Status::Ok();
}

Result<std::string> RunCommand(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return IoError("popen failed: " + command);
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(fmt::format("`{}` failed (status {}):\n{}", command, status, out));
  }
  return out;
}

std::optional<double> NumberAfter(std::string_view text, std::string_view prefix,
                                  std::string_view suffix) {
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string_view::npos) {
    pos += prefix.size();
    const size_t end = suffix.empty() ? text.find_first_of(" ,)\n", pos) : text.find(suffix, pos);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string number(text.substr(pos, end - pos));
    char* parse_end = nullptr;
    const double value = std::strtod(number.c_str(), &parse_end);
    if (!number.empty() && parse_end == number.c_str() + number.size()) return value;
  }
  return std::nullopt;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string JoinRates(const std::vector<double>& values) {
  std::string out;
  for (double v : values) out += fmt::format("{}{:.1f}", out.empty() ? "" : " / ", v);
  return out;
}

}  // namespace kvserve::tools
