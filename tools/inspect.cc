// `kvserve inspect MODEL [--json] [--kv-type f16]`: what a GGUF file holds, and what its KV
// cache costs per token.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include <CLI/CLI.hpp>

#include "core/units.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "model/v41_config.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

using gguf::Value;
using gguf::ValueType;
using json = nlohmann::json;

constexpr size_t kArrayPreview = 5;     // array elements shown
constexpr size_t kStringPreview = 60;   // characters of a string shown

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
    std::string out = fmt::format("[{} x {}]", gguf::ValueTypeName(a->element_type),
                                  a->elements.size());
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

// KV bytes per token of a transformer whose metadata follows llama.cpp's `{arch}.*` keys.
struct KvPerToken {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t key_dim = 0;    // per head
  int64_t value_dim = 0;  // per head
  int64_t bytes = 0;      // per token, all layers, K and V
  std::string formula;
};

Result<KvPerToken> ComputeKvPerToken(const gguf::GgufFile& file, tensor::DType dtype) {
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  KvPerToken kv;
  KV_ASSIGN_OR_RETURN(kv.num_layers, file.GetInt(arch + ".block_count"));
  KV_ASSIGN_OR_RETURN(int64_t heads, file.GetInt(arch + ".attention.head_count"));
  KV_ASSIGN_OR_RETURN(int64_t dim, file.GetInt(arch + ".embedding_length"));
  KV_ASSIGN_OR_RETURN(kv.num_kv_heads, file.GetIntOr(arch + ".attention.head_count_kv", heads));
  if (heads <= 0 || dim % heads != 0) return Corrupt("head_count does not divide the width");
  KV_ASSIGN_OR_RETURN(kv.key_dim, file.GetIntOr(arch + ".attention.key_length", dim / heads));
  KV_ASSIGN_OR_RETURN(kv.value_dim, file.GetIntOr(arch + ".attention.value_length", kv.key_dim));
  const int64_t k_row = kv.num_kv_heads * kv.key_dim;
  const int64_t v_row = kv.num_kv_heads * kv.value_dim;
  if (!tensor::IsValidRowLength(dtype, k_row) || !tensor::IsValidRowLength(dtype, v_row)) {
    return InvalidArgument(fmt::format("a KV row of {} values is not a whole number of {} blocks",
                                       k_row, tensor::DTypeName(dtype)));
  }
  kv.bytes = kv.num_layers * (tensor::RowBytes(dtype, k_row) + tensor::RowBytes(dtype, v_row));
  const double bytes_per_elem = static_cast<double>(tensor::BlockBytes(dtype)) /
                                static_cast<double>(tensor::BlockElems(dtype));
  const std::string dims = kv.key_dim == kv.value_dim
                               ? fmt::format("2 (K and V) x {} layers x {} KV heads x {} head dim",
                                             kv.num_layers, kv.num_kv_heads, kv.key_dim)
                               : fmt::format("{} layers x {} KV heads x ({} K + {} V) head dims",
                                             kv.num_layers, kv.num_kv_heads, kv.key_dim,
                                             kv.value_dim);
  kv.formula = fmt::format("{} x {:g} B ({}) = {} B", dims, bytes_per_elem,
                           tensor::DTypeName(dtype), kv.bytes);
  return kv;
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

void PrintText(const gguf::GgufFile& file, const Result<KvPerToken>& kv) {
  fmt::print("file: {} ({} bytes)\nGGUF version {}, alignment {}\n", file.path(),
             file.file_size(), file.version(), file.alignment());
  fmt::print("\nmetadata ({} keys):\n", file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    fmt::print("  {:<44} {:<8} {}\n", key, gguf::ValueTypeName(value.type), ValueText(value));
  }
  fmt::print("\ntensors ({}):\n  {:<32} {:<20} {:<6} {:>12} {:>12}\n", file.tensors().size(),
             "name", "dims", "type", "bytes", "offset");
  for (const gguf::TensorInfo& t : file.tensors()) {
    fmt::print("  {:<32} {:<20} {:<6} {:>12} {:>12}\n", t.name,
               fmt::format("[{}]", fmt::join(t.dims, ", ")), TypeName(t), t.size_bytes,
               t.offset);
  }
  const Totals totals = SumTensors(file);
  fmt::print("\nparameters: {} ({:.2f} M)\ntensor bytes: {} ({})\n", totals.num_params,
             totals.num_params / 1e6, totals.tensor_bytes, FormatBytes(totals.tensor_bytes));
  if (kv.ok()) {
    fmt::print("KV cache per token: {} ({})\n", kv->formula, FormatBytes(kv->bytes));
  } else {
    fmt::print("KV cache per token: unknown ({})\n", kv.status().message());
  }
}

json ToJson(const gguf::GgufFile& file, const Result<KvPerToken>& kv, tensor::DType kv_type) {
  json out = {{"path", file.path()},
              {"file_size", file.file_size()},
              {"version", file.version()},
              {"alignment", file.alignment()}};
  json metadata = json::array();
  for (const auto& [key, value] : file.metadata()) {
    metadata.push_back(
        {{"key", key}, {"type", gguf::ValueTypeName(value.type)}, {"value", ValueJson(value, true)}});
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
    out["kv_per_token"] = {{"bytes", kv->bytes},         {"dtype", tensor::DTypeName(kv_type)},
                           {"num_layers", kv->num_layers}, {"num_kv_heads", kv->num_kv_heads},
                           {"key_dim", kv->key_dim},       {"value_dim", kv->value_dim},
                           {"formula", kv->formula}};
  } else {
    out["kv_per_token"] = nullptr;
  }
  return out;
}

struct InspectOptions {
  std::string path;
  bool json = false;
  std::string kv_type = "f16";
};

void RunInspect(const InspectOptions& options) {
  std::optional<tensor::DType> kv_type = tensor::DTypeFromName(options.kv_type);
  if (!kv_type) {
    fmt::print(stderr, "error: inspect: unknown --kv-type '{}'\n", options.kv_type);
    SetExitCode(1);
    return;
  }
  Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(options.path);
  if (!file.ok()) {
    fmt::print(stderr, "error: inspect: {}: {}\n", options.path, file.status().ToString());
    SetExitCode(1);
    return;
  }
  // kvserve-v41 (model/v41_config.h): a hybrid layout with fixed formats, reported apart.
  const Result<model::V41Config> v41 = model::ReadV41Config(**file);
  const Result<KvPerToken> kv =
      v41.ok() ? Result<KvPerToken>(InvalidArgument("hybrid layout: see the kvserve-v41 lines"))
               : ComputeKvPerToken(**file, *kv_type);
  if (options.json) {
    json out = ToJson(**file, kv, *kv_type);
    if (v41.ok()) {
      const model::V41KvBytes b = model::ComputeV41KvBytes(*v41);
      out["v41_kv"] = {{"global_bytes_per_token", b.global_bytes_per_token},
                       {"latent_bytes_per_token", b.latent_bytes_per_token},
                       {"index_bytes_per_token", b.index_bytes_per_token},
                       {"window_row_bytes", b.window_row_bytes},
                       {"window_bytes_per_sequence", b.window_bytes_per_sequence},
                       {"formulas", b.lines}};
    }
    fmt::print("{}\n", out.dump(2));
  } else {
    PrintText(**file, kv);
    if (v41.ok()) {
      for (const std::string& line : model::ComputeV41KvBytes(*v41).lines) {
        fmt::print("{}\n", line);
      }
    }
  }
}

}  // namespace

void RegisterInspect(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata, tensors and KV cost");
  cmd->add_option("model", options->path, "GGUF file")->required();
  cmd->add_flag("--json", options->json, "Print JSON instead of text");
  cmd->add_option("--kv-type", options->kv_type, "KV storage type for the per-token cost")
      ->capture_default_str();
  cmd->callback([options] { RunInspect(*options); });
}

}  // namespace kvserve::tools
