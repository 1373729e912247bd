// `kvserve inspect MODEL [--json] [--kv-cache-dtype D] [--block-size B]
// [--kv-cache-memory-bytes SIZE] [--max-model-len L] [--max-num-batched-tokens T]`: what a
// GGUF file holds, what its KV cache costs per token (per group, with the formula) and what a
// KV budget buys: blocks per group, "KV cache: N tokens", "max concurrency at max-model-len
// L: X". The KV lines come from the functions `kvserve serve` runs at startup
// (engine::ResolveKvLayout, kv::ComputeCapacity,
// kv::FormatCapacityReport) with serve's defaults, so for the same flags they print the same
// numbers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/units.h"
#include "engine/engine.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "kv/config.h"
#include "model/deepseek2_config.h"
#include "model/kv_layout.h"
#include "model/v41_config.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

using gguf::Value;
using gguf::ValueType;
using json = nlohmann::json;

constexpr size_t kArrayPreview = 5;    // array elements shown
constexpr size_t kStringPreview = 60;  // characters of a string shown

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s.substr(0, kStringPreview)) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + (s.size() > kStringPreview ? "\"..." : "\"");
}

// One line: scalars as they are; arrays as [type x length] and their first elements.
std::string ValueText(const Value& v) {
  if (const auto* a = std::get_if<gguf::Array>(&v.data)) {
    std::string out =
        fmt::format("[{} x {}]", gguf::ValueTypeName(a->element_type), a->elements.size());
    for (size_t i = 0; i < a->elements.size() && i < kArrayPreview; ++i) {
      out += (i == 0 ? " " : ", ") + ValueText(a->elements[i]);
    }
    return out + (a->elements.size() > kArrayPreview ? ", ..." : "");
  }
  if (const auto* s = std::get_if<std::string>(&v.data)) return Quote(*s);
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return fmt::format("{}", *u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v.data)) return fmt::format("{:g}", *d);
  return std::get<bool>(v.data) ? "true" : "false";
}

json ValueJson(const Value& v, bool summarise) {
  if (const auto* a = std::get_if<gguf::Array>(&v.data)) {
    json first = json::array();
    for (size_t i = 0; i < a->elements.size() && (!summarise || i < kArrayPreview); ++i) {
      first.push_back(ValueJson(a->elements[i], true));
    }
    return {{"element_type", gguf::ValueTypeName(a->element_type)},
            {"length", a->elements.size()},
            {"first", std::move(first)}};
  }
  if (const auto* s = std::get_if<std::string>(&v.data)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  return std::get<bool>(v.data);
}

std::string TypeName(const gguf::TensorInfo& t) {
  if (t.dtype) return std::string(tensor::DTypeName(*t.dtype));
  if (auto info = gguf::FindGgmlType(t.ggml_type)) return std::string(info->name);
  return fmt::format("type{}", t.ggml_type);
}

// The KV accounting for one budget: what `kvserve serve` would allocate with these flags.
struct KvReport {
  uint64_t budget_bytes = 0;
  kv::KvCacheConfig config;
  std::vector<std::string> group_names;
  kv::KvCapacity capacity;
  double growing_bytes_per_token = 0;  // non-sliding groups: what every token adds
  std::string per_token_formula;       // one group: its formula; several: the sum
  std::vector<std::string> lines;      // kv::FormatCapacityReport
};

Result<KvReport> ComputeKvReport(const gguf::GgufFile& file, const engine::EngineConfig& config) {
  KvReport r;
  r.budget_bytes = config.KvBudgetBytes();
  KV_ASSIGN_OR_RETURN(model::ModelKvLayout layout, engine::ResolveKvLayout(file, config));
  KV_ASSIGN_OR_RETURN(r.capacity, kv::ComputeCapacity(layout.config, r.budget_bytes));
  r.config = std::move(layout.config);
  std::vector<std::string> terms;
  for (size_t g = 0; g < r.config.groups.size(); ++g) {
    r.group_names.push_back(layout.groups[g].name);
    if (std::holds_alternative<kv::SlidingWindow>(r.config.groups[g].spec)) continue;
    r.growing_bytes_per_token += r.capacity.groups[g].bytes_per_token.bytes;
    terms.push_back(fmt::format("{:g} B ({})", r.capacity.groups[g].bytes_per_token.bytes,
                                layout.groups[g].name));
  }
  if (r.config.groups.size() == 1) {
    r.per_token_formula = r.capacity.groups[0].bytes_per_token.formula;
  } else {
    r.per_token_formula =
        fmt::format("{} = {:g} B", fmt::join(terms, " + "), r.growing_bytes_per_token);
  }
  r.lines = kv::FormatCapacityReport(r.config, r.capacity);
  return r;
}

struct Totals {
  int64_t num_params = 0;
  uint64_t tensor_bytes = 0;
};

Totals SumTensors(const gguf::GgufFile& file) {
  Totals t;
  for (const gguf::TensorInfo& info : file.tensors()) {
    t.num_params += info.NumElements();
    t.tensor_bytes += info.size_bytes;
  }
  return t;
}

void PrintKvText(const gguf::GgufFile& file, const Result<KvReport>& kv) {
  if (!kv.ok()) {
    fmt::print("KV cache per token: unknown ({})\n", kv.status().message());
    return;
  }
  const uint64_t whole_bytes = static_cast<uint64_t>(kv->growing_bytes_per_token);
  fmt::print("KV cache per token: {}{}\n", kv->per_token_formula,
             whole_bytes >= 1024 ? " (" + FormatBytes(whole_bytes) + ")" : "");
  // kvserve-v41 (model/v41_config.h): the global / window split of the hybrid layout.
  if (const Result<model::V41Config> v41 = model::ReadV41Config(file); v41.ok()) {
    for (const std::string& line : model::ComputeV41KvBytes(*v41).lines) {
      fmt::print("{}\n", line);
    }
  }
  // deepseek2 (model/deepseek2_config.h): the latent against a plain K/V cache of its shape.
  if (const Result<model::Deepseek2Config> ds = model::ReadDeepseek2Config(file); ds.ok()) {
    const auto& latent = std::get<kv::CompressedLatent>(kv->config.groups[0].spec);
    fmt::print("{}\n", model::DescribeDeepseek2PlainKv(*ds, latent.latent_dtype));
  }
  fmt::print("\nKV cache for a budget of {} ({} B), as `kvserve serve` allocates it:\n",
             FormatBytes(kv->budget_bytes), kv->budget_bytes);
  for (const std::string& line : kv->lines) fmt::print("{}\n", line);
}

void PrintText(const gguf::GgufFile& file, const Result<KvReport>& kv) {
  fmt::print("file: {} ({} bytes)\nGGUF version {}, alignment {}\n", file.path(), file.file_size(),
             file.version(), file.alignment());
  fmt::print("\nmetadata ({} keys):\n", file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    fmt::print("  {:<44} {:<8} {}\n", key, gguf::ValueTypeName(value.type), ValueText(value));
  }
  fmt::print("\ntensors ({}):\n  {:<32} {:<20} {:<6} {:>12} {:>12}\n", file.tensors().size(),
             "name", "dims", "type", "bytes", "offset");
  for (const gguf::TensorInfo& t : file.tensors()) {
    fmt::print("  {:<32} {:<20} {:<6} {:>12} {:>12}\n", t.name,
               fmt::format("[{}]", fmt::join(t.dims, ", ")), TypeName(t), t.size_bytes, t.offset);
  }
  const Totals totals = SumTensors(file);
  fmt::print("\nparameters: {} ({:.2f} M)\ntensor bytes: {} ({})\n", totals.num_params,
             totals.num_params / 1e6, totals.tensor_bytes, FormatBytes(totals.tensor_bytes));
  PrintKvText(file, kv);
}

json KvJson(const gguf::GgufFile& file, const KvReport& kv) {
  json groups = json::array();
  for (size_t g = 0; g < kv.config.groups.size(); ++g) {
    const kv::GroupCapacity& gc = kv.capacity.groups[g];
    groups.push_back({{"name", kv.group_names[g]},
                      {"spec", kv::DescribeSpec(kv.config.groups[g].spec)},
                      {"writer_layers", kv.config.groups[g].layers.size()},
                      {"reader_layers", kv.config.groups[g].readers.size()},
                      {"bytes_per_token", gc.bytes_per_token.bytes},
                      {"formula", gc.bytes_per_token.formula},
                      {"num_blocks", gc.num_blocks},
                      {"block_bytes", gc.block_bytes},
                      {"arena_bytes", gc.arena_bytes}});
  }
  json out = {{"budget_bytes", kv.budget_bytes},
              {"block_size", kv.config.block_size},
              {"max_model_len", kv.config.max_model_len},
              {"max_num_batched_tokens", kv.config.max_chunk_tokens},
              {"groups", std::move(groups)},
              {"bytes_per_token", kv.growing_bytes_per_token},
              {"total_arena_bytes", kv.capacity.total_arena_bytes},
              {"num_tokens", kv.capacity.num_tokens},
              {"max_concurrency", kv.capacity.max_concurrency},
              {"formula", kv.capacity.formula},
              {"lines", kv.lines}};
  if (const Result<model::V41Config> v41 = model::ReadV41Config(file); v41.ok()) {
    const model::V41KvBytes b = model::ComputeV41KvBytes(*v41);
    out["v41"] = {{"global_bytes_per_token", b.global_bytes_per_token},
                  {"latent_bytes_per_token", b.latent_bytes_per_token},
                  {"index_bytes_per_token", b.index_bytes_per_token},
                  {"window_row_bytes", b.window_row_bytes},
                  {"window_bytes_per_sequence", b.window_bytes_per_sequence},
                  {"formulas", b.lines}};
  }
  if (const Result<model::Deepseek2Config> ds = model::ReadDeepseek2Config(file); ds.ok()) {
    const auto& latent = std::get<kv::CompressedLatent>(kv.config.groups[0].spec);
    out["deepseek2"] = {{"plain_kv", model::DescribeDeepseek2PlainKv(*ds, latent.latent_dtype)}};
  }
  return out;
}

json ToJson(const gguf::GgufFile& file, const Result<KvReport>& kv) {
  json out = {{"path", file.path()},
              {"file_size", file.file_size()},
              {"version", file.version()},
              {"alignment", file.alignment()}};
  json metadata = json::array();
  for (const auto& [key, value] : file.metadata()) {
    metadata.push_back({{"key", key},
                        {"type", gguf::ValueTypeName(value.type)},
                        {"value", ValueJson(value, true)}});
  }
  out["metadata"] = std::move(metadata);
  json tensors = json::array();
  for (const gguf::TensorInfo& t : file.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"dims", t.dims},
                       {"type", TypeName(t)},
                       {"bytes", t.size_bytes},
                       {"offset", t.offset}});
  }
  out["tensors"] = std::move(tensors);
  const Totals totals = SumTensors(file);
  out["num_params"] = totals.num_params;
  out["tensor_bytes"] = totals.tensor_bytes;
  if (kv.ok()) {
    out["kv_per_token"] = {{"bytes", kv->growing_bytes_per_token},
                           {"formula", kv->per_token_formula}};
    out["kv_cache"] = KvJson(file, *kv);
  } else {
    out["kv_per_token"] = nullptr;
    out["kv_cache"] = nullptr;
    out["kv_error"] = kv.status().message();
  }
  return out;
}

struct InspectOptions {
  std::string path;
  bool json = false;
  EngineFlags engine_flags;
};

void RunInspect(const InspectOptions& options) {
  // Flag errors (not model errors) come first: exit 1 before opening the model.
  const Result<engine::EngineConfig> config = ResolveEngineFlags(options.engine_flags);
  if (!config.ok()) {
    fmt::print(stderr, "error: inspect: {}\n", config.status().message());
    SetExitCode(1);
    return;
  }
  Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(options.path);
  if (!file.ok()) {
    fmt::print(stderr, "error: inspect: {}: {}\n", options.path, file.status().ToString());
    SetExitCode(1);
    return;
  }
  const Result<KvReport> kv = ComputeKvReport(**file, *config);
  if (options.json) {
    fmt::print("{}\n", ToJson(**file, kv).dump(2));
  } else {
    PrintText(**file, kv);
  }
}

}  // namespace

void RegisterInspect(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata, tensors and KV cost");
  cmd->add_option("model", options->path, "GGUF file")->required();
  cmd->add_flag("--json", options->json, "Print JSON instead of text");
  AddEngineFlags(cmd, options->engine_flags, EngineFlagSet::kKvLayout);
  cmd->callback([options] { RunInspect(*options); });
}

}  // namespace kvserve::tools
