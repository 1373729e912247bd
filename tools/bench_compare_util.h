// Helpers of `kvserve bench compare` (bench_compare.cc): the machine's facts (CPU, SIMD
// target, measured memory bandwidth, bytes a decode step reads), running the other side's
// processes, and small statistics.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::tools {

struct MachineFacts {
  std::string cpu_model;             // /proc/cpuinfo "model name"
  std::string simd_target;           // kernels::MatMulTargetName()
  std::string llama_cpp;             // node-llama-cpp and llama.cpp versions, llama.cpp's CPU flags
  double bandwidth_bytes_per_s = 0;  // MeasureReadBandwidth with the run's threads
  double weight_bytes_per_token = 0;  // every weight tensor a decode step reads
  // Of those, a mixture of experts' stacked expert tensors (*_exps) in full, and how many experts
  // there are and a token uses (0 and 0 for a dense model).
  double expert_bytes = 0;
  int64_t experts = 0, experts_used = 0;
  double kv_bytes_per_token = 0;      // KV bytes per token of context (--kv-cache-dtype auto)
  int vocab_size = 0;
  std::string model_summary;  // "117.1 MB, llama, 12 layers"
};

// Best of three multi-threaded passes summing a 1 GiB buffer (larger than any cache here),
// in bytes per second.
double MeasureReadBandwidth(int threads);

// Gathers everything above (runs `node anchor.mjs info` in llama_cpp_dir for llama.cpp's).
Result<MachineFacts> GatherFacts(const gguf::GgufFile& file, int threads,
                                 const std::string& llama_cpp_dir);
// The header: date, CPU, threads and load average, versions, bandwidth and roof.
void PrintFacts(const MachineFacts& m, int threads);

// Bytes a decode step of `sequences` sequences at `context` tokens each reads: every weight
// tensor but the experts, the experts the step's tokens touch (each token's experts taken as
// independent and uniform: a given expert is missed by all of them with probability
// (1 - used / experts)^sequences), and every sequence's KV.
double StepBytes(const MachineFacts& m, int sequences, double context);
// The load average now ("1.52 1.31 0.90"), for the record of the conditions.
std::string LoadAverage();

// Installs node-llama-cpp@3.21.1 into llama_cpp_dir (npm ci from its package-lock.json) when
// it is not there yet; Unavailable with the reason when node or npm fail.
Status EnsureLlamaCpp(const std::string& llama_cpp_dir);

// Runs a shell command; its stdout, or Internal with the exit status when it fails.
Result<std::string> RunCommand(const std::string& command);

// The number right after the first `prefix` in text (before `suffix` when given, searched
// from the prefix): NumberAfter("x, 12.5 tokens/s", ", ", " tokens/s") == 12.5.
std::optional<double> NumberAfter(std::string_view text, std::string_view prefix,
                                  std::string_view suffix = "");

double Median(std::vector<double> values);
std::string JoinRates(const std::vector<double>& values);  // "431.2 / 527.0"

}  // namespace kvserve::tools
