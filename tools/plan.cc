// `kvserve plan --model PRESET|FILE.gguf --gpu PRESET [...]`: the capacity planner
// (docs/capacity-planning.md). Numeric flags are taken as text and parsed here so that every
// bad value is reported the same way: one "error: plan: ..." line and exit code 1.
#include "planner/plan.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/units.h"
#include "planner/gguf_model.h"
#include "planner/presets.h"
#include "planner/report.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

struct PlanFlags {
  std::string model;
  std::string gpu;
  std::string num_gpus;
  std::string tp;
  std::string gpu_memory_utilization = "0.9";
  std::string max_model_len;
  std::string max_num_seqs = "256";
  std::string max_num_batched_tokens = "8192";
  std::string kv_cache_dtype = "auto";
  std::string cpu_offload_weights;
  std::string kv_offloading_size;  // GiB, like vLLM
  std::string kv_cache_memory_bytes;
  std::string runtime_reserve;
  std::string block_size = "16";
  std::string format = "text";
  std::string output;
  bool json = false;
  bool list = false;
};

template <typename T>
Result<T> ParseNumber(const std::string& flag, const std::string& text) {
  T value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgument(fmt::format("{} '{}' is not a number", flag, text));
  }
  return value;
}

Result<double> ParseDouble(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return InvalidArgument(fmt::format("{} '{}' is not a number", flag, text));
  }
  return value;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

Result<planner::PlanOptions> ToOptions(const PlanFlags& f) {
  planner::PlanOptions o;
  if (!f.num_gpus.empty()) {
    KV_ASSIGN_OR_RETURN(o.num_gpus, ParseNumber<int>("--num-gpus", f.num_gpus));
    if (o.num_gpus <= 0) return InvalidArgument("--num-gpus must be at least 1");
  }
  if (!f.tp.empty()) {
    KV_ASSIGN_OR_RETURN(o.tp, ParseNumber<int>("--tp", f.tp));
    if (o.tp <= 0) return InvalidArgument("--tp must be at least 1");
  }
  KV_ASSIGN_OR_RETURN(o.gpu_memory_utilization,
                      ParseDouble("--gpu-memory-utilization", f.gpu_memory_utilization));
  if (!f.max_model_len.empty()) {
    KV_ASSIGN_OR_RETURN(o.max_model_len, ParseNumber<int64_t>("--max-model-len", f.max_model_len));
    if (o.max_model_len <= 0) return InvalidArgument("--max-model-len must be at least 1");
  }
  KV_ASSIGN_OR_RETURN(o.max_num_seqs, ParseNumber<int>("--max-num-seqs", f.max_num_seqs));
  KV_ASSIGN_OR_RETURN(o.max_num_batched_tokens,
                      ParseNumber<int64_t>("--max-num-batched-tokens", f.max_num_batched_tokens));
  KV_ASSIGN_OR_RETURN(o.block_size, ParseNumber<int>("--block-size", f.block_size));
  o.kv_cache_dtype = f.kv_cache_dtype;
  KV_RETURN_IF_ERROR(kv::ParseKvCacheDType(o.kv_cache_dtype, tensor::DType::kF16).status());
  if (f.cpu_offload_weights != "none") o.cpu_offload_parts = SplitCommas(f.cpu_offload_weights);
  if (!f.kv_offloading_size.empty()) {
    KV_ASSIGN_OR_RETURN(double gib, ParseDouble("--kv-offloading-size", f.kv_offloading_size));
    if (gib < 0) return InvalidArgument("--kv-offloading-size must be >= 0 (GiB)");
    o.kv_offloading_bytes = static_cast<uint64_t>(gib * kGiB);
  }
  if (!f.kv_cache_memory_bytes.empty()) {
    KV_ASSIGN_OR_RETURN(o.kv_cache_memory_bytes, kv::ParseKvBudget(f.kv_cache_memory_bytes));
  }
  if (!f.runtime_reserve.empty()) {
    KV_ASSIGN_OR_RETURN(o.runtime_reserve_bytes, ParseBytes(f.runtime_reserve));
  }
  return o;
}

Result<planner::ModelDesc> LoadModel(const std::string& name) {
  if (name.ends_with(".gguf")) return planner::LoadGgufModel(name);
  return planner::LoadModelPreset(name);
}

Result<std::string> Render(const PlanFlags& f) {
  if (f.model.empty()) return InvalidArgument("--model is required (a preset or a .gguf file)");
  if (f.gpu.empty())
    return InvalidArgument("--gpu is required (a device preset, e.g. h200 or cpu)");
  const std::string format = f.json ? "json" : f.format;
  if (format != "text" && format != "json" && format != "svg") {
    return InvalidArgument(fmt::format("--format '{}': expected text, json or svg", f.format));
  }
  KV_ASSIGN_OR_RETURN(planner::PlanOptions options, ToOptions(f));
  KV_ASSIGN_OR_RETURN(planner::ModelDesc model, LoadModel(f.model));
  KV_ASSIGN_OR_RETURN(planner::DeviceDesc device, planner::LoadDevicePreset(f.gpu));
  KV_ASSIGN_OR_RETURN(planner::Plan plan, planner::MakePlan(model, device, options));
  if (format == "json") return planner::PlanToJson(plan).dump(2) + "\n";
  if (format == "svg") return planner::PlanToSvg(plan);
  return planner::FormatPlanText(plan);
}

void RunPlan(const PlanFlags& f) {
  if (f.list) {
    fmt::print("models: {}\ndevices: {}\n", fmt::join(planner::ModelPresetNames(), ", "),
               fmt::join(planner::DevicePresetNames(), ", "));
    return;
  }
  Result<std::string> out = Render(f);
  if (!out.ok()) {
    fmt::print(stderr, "error: plan: {}\n", out.status().message());
    SetExitCode(1);
    return;
  }
  if (f.output.empty()) {
    fmt::print("{}", *out);
    return;
  }
  std::ofstream file(f.output, std::ios::binary);
  file << *out;
  if (!file) {
    fmt::print(stderr, "error: plan: cannot write {}\n", f.output);
    SetExitCode(1);
  }
}

}  // namespace

void RegisterPlan(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd =
      app.add_subcommand("plan", "Capacity planner: weights, KV pool, tokens, concurrency");
  cmd->add_option("--model", flags->model, "Model preset name or a .gguf file");
  cmd->add_option("--gpu", flags->gpu,
                  "Device preset (h200, h100, b200, a100-80gb, l40s, rtx4090, cpu)");
  cmd->add_option("--num-gpus", flags->num_gpus, "Devices in total (replicas x tp); default --tp");
  cmd->add_option("--tp", flags->tp, "Tensor-parallel size; default --num-gpus");
  cmd->add_option("--gpu-memory-utilization", flags->gpu_memory_utilization,
                  "Fraction of device memory to use; default 0.9");
  cmd->add_option("--max-model-len", flags->max_model_len, "Longest request; default the model's");
  cmd->add_option("--max-num-seqs", flags->max_num_seqs, "Concurrent requests; default 256");
  cmd->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                  "Largest prefill chunk per step; default 8192");
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "auto|f32|f16|bf16|q8_0|fp8|fp4 (groups with a trained format keep it)");
  cmd->add_option("--cpu-offload-weights", flags->cpu_offload_weights,
                  "Weight parts to keep in CPU memory, comma-separated (e.g. engram)");
  cmd->add_option("--kv-offloading-size", flags->kv_offloading_size,
                  "CPU KV tier in GiB for the whole TP group");
  cmd->add_option("--kv-cache-memory-bytes", flags->kv_cache_memory_bytes,
                  "Fixed KV budget per device (e.g. 4GiB), instead of utilization maths");
  cmd->add_option("--runtime-reserve", flags->runtime_reserve,
                  "Activation/runtime reserve per device (e.g. 2GiB); default the preset's");
  cmd->add_option("--block-size", flags->block_size, "Tokens per KV block; default 16");
  cmd->add_option("--format", flags->format, "text (default), json or svg");
  cmd->add_flag("--json", flags->json, "Same as --format json");
  cmd->add_option("-o,--output", flags->output, "Write to this file instead of stdout");
  cmd->add_flag("--list", flags->list, "List the model and device presets");
  cmd->callback([flags] { RunPlan(*flags); });
}

}  // namespace kvserve::tools
