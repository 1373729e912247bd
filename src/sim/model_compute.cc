#include "sim/model_compute.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "planner/model.h"
#include "planner/presets.h"
#include "planner/json_fields.h"
#include "tensor/dtype.h"

namespace kvserve::sim {
namespace {

using planner::BoolField;
using planner::IntField;
using planner::Json;
using planner::NumberField;
using planner::ParseJsonText;
using planner::StringField;

// Bytes per stored value of a dtype name, e.g. q8_0: 34 / 32. Also accepts "fp8" and "fp4"
// (the preset shorthands for the E8M0/32 FP8 and E4M3/16 FP4 formats).
Result<double> BytesPerValue(std::string_view name) {
  std::optional<tensor::DType> dtype = tensor::DTypeFromName(name);
  if (name == "fp8") dtype = tensor::DType::kFP8_E4M3_E8M0_32;
  if (name == "fp4") dtype = tensor::DType::kFP4_E2M1_E4M3_16;
  if (!dtype) return InvalidArgument(fmt::format("unknown dtype '{}'", name));
  return static_cast<double>(tensor::BlockBytes(*dtype)) /
         static_cast<double>(tensor::BlockElems(*dtype));
}

Result<Matrix> ParseMatrix(const Json& m) {
  if (!m.is_object()) return InvalidArgument("each matrix must be an object");
  Matrix out;
  KV_ASSIGN_OR_RETURN(out.name, StringField(m, "name", std::nullopt));
  KV_ASSIGN_OR_RETURN(std::string layers, StringField(m, "layers", std::string()));
  if (!layers.empty()) {
    Result<std::vector<int>> list = planner::ParseLayerList(layers);
    if (!list.ok()) return list.status().WithContext("matrix " + out.name);
    out.num_layers = static_cast<int>(list->size());
  }
  KV_ASSIGN_OR_RETURN(out.params, NumberField(m, "params", std::nullopt, /*positive=*/true));
  KV_ASSIGN_OR_RETURN(out.dtype, StringField(m, "dtype", std::nullopt));
  Result<double> per_value = BytesPerValue(out.dtype);
  if (!per_value.ok()) return per_value.status().WithContext("matrix " + out.name);
  out.bytes = out.params * *per_value;
  KV_ASSIGN_OR_RETURN(out.replicated, BoolField(m, "replicated", false));
  KV_ASSIGN_OR_RETURN(out.logits_only, BoolField(m, "logits_only", false));
  KV_ASSIGN_OR_RETURN(int64_t experts, IntField(m, "num_experts", 0));
  KV_ASSIGN_OR_RETURN(int64_t per_token, IntField(m, "experts_per_token", 0));
  if (experts < 0 || per_token < 0 || per_token > experts || (experts > 0) != (per_token > 0)) {
    return InvalidArgument(fmt::format("matrix {}: experts_per_token {} must be in [1, "
                                       "num_experts {}]", out.name, per_token, experts));
  }
  out.num_experts = static_cast<int>(experts);
  out.experts_per_token = static_cast<int>(per_token);
  return out;
}

Status ParseCompute(const Json& c, ModelCompute& out) {
  if (!c.is_object()) return InvalidArgument("'compute' must be an object");
  KV_ASSIGN_OR_RETURN(out.hidden_size, IntField(c, "hidden_size", std::nullopt));
  KV_ASSIGN_OR_RETURN(out.vocab_size, IntField(c, "vocab_size", std::nullopt));
  KV_ASSIGN_OR_RETURN(int64_t q_heads, IntField(c, "q_heads", std::nullopt));
  KV_ASSIGN_OR_RETURN(int64_t index_heads, IntField(c, "index_heads", 0));
  KV_ASSIGN_OR_RETURN(int64_t top_k, IntField(c, "index_top_k", 0));
  if (out.hidden_size < 1 || out.vocab_size < 1 || q_heads < 1 || index_heads < 0 || top_k < 0) {
    return InvalidArgument("hidden_size, vocab_size and q_heads must be positive");
  }
  out.num_q_heads = static_cast<int>(q_heads);
  out.index_heads = static_cast<int>(index_heads);
  out.index_top_k = static_cast<int>(top_k);
  auto matrices = c.find("matrices");
  if (matrices == c.end() || !matrices->is_array() || matrices->empty()) {
    return InvalidArgument("'compute.matrices' must be a non-empty array");
  }
  for (const Json& m : *matrices) {
    KV_ASSIGN_OR_RETURN(Matrix matrix, ParseMatrix(m));
    out.matrices.push_back(std::move(matrix));
  }
  return Status::Ok();
}

}  // namespace

double ModelCompute::ActiveParamsPerToken() const {
  double sum = 0;
  for (const Matrix& m : matrices) {
    const double per_layer = m.num_experts > 0 ? m.params * m.experts_per_token : m.params;
    sum += per_layer * m.num_layers;
  }
  return sum;
}

double ModelCompute::TotalWeightBytes() const {
  double sum = 0;
  for (const Matrix& m : matrices) sum += m.bytes * std::max(1, m.num_experts) * m.num_layers;
  return sum;
}

Result<ModelCompute> ParseComputePreset(std::string_view preset_text) {
  KV_ASSIGN_OR_RETURN(Json j, ParseJsonText(preset_text, "model preset"));
  ModelCompute out;
  KV_ASSIGN_OR_RETURN(out.name, StringField(j, "name", std::string("model")));
  KV_ASSIGN_OR_RETURN(int64_t layers, IntField(j, "num_layers", std::nullopt));
  out.num_layers = static_cast<int>(layers);
  auto compute = j.find("compute");
  if (compute == j.end()) {
    return NotFound(fmt::format("model preset '{}' has no \"compute\" section (the simulator "
                                "needs its matrices)", out.name));
  }
  Status s = ParseCompute(*compute, out);
  if (!s.ok()) return s.WithContext(fmt::format("model preset '{}' compute", out.name));
  return out;
}

Result<ModelCompute> LoadComputePreset(std::string_view name) {
  const std::string path = fmt::format("models/{}.jsonc", name);
  for (const planner::PresetFile& f : planner::EmbeddedPresetFiles()) {
    if (f.path == path) return ParseComputePreset(f.text);
  }
  return NotFound(fmt::format("no model preset '{}' (known: {})", name,
                              fmt::join(planner::ModelPresetNames(), ", ")));
}

namespace {

// "blk.12.attn_q.weight" -> ("attn_q", true); "output.weight" -> ("output", false).
std::pair<std::string, bool> MatrixName(std::string_view tensor) {
  std::string_view name = tensor;
  if (name.ends_with(".weight")) name.remove_suffix(7);
  if (!name.starts_with("blk.")) return {std::string(name), false};
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return {std::string(name), false};
  return {std::string(name.substr(dot + 1)), true};
}

std::string DTypeNameOf(const gguf::TensorInfo& t) {
  return t.dtype ? std::string(tensor::DTypeName(*t.dtype)) : fmt::format("ggml{}", t.ggml_type);
}

}  // namespace

Result<ModelCompute> ComputeFromGguf(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  ModelCompute out;
  KV_ASSIGN_OR_RETURN(out.name, file.GetStringOr("general.name", arch));
  KV_ASSIGN_OR_RETURN(int64_t layers, file.GetInt(arch + ".block_count"));
  out.num_layers = static_cast<int>(layers);
  KV_ASSIGN_OR_RETURN(out.hidden_size, file.GetInt(arch + ".embedding_length"));
  KV_ASSIGN_OR_RETURN(int64_t heads, file.GetInt(arch + ".attention.head_count"));
  out.num_q_heads = static_cast<int>(heads);
  KV_ASSIGN_OR_RETURN(int64_t index_heads, file.GetIntOr(arch + ".indexer.head_count", 0));
  KV_ASSIGN_OR_RETURN(int64_t top_k, file.GetIntOr(arch + ".indexer.top_k", 0));
  KV_ASSIGN_OR_RETURN(int64_t experts_used, file.GetIntOr(arch + ".expert_used_count", 0));
  out.index_heads = static_cast<int>(index_heads);
  out.index_top_k = static_cast<int>(top_k);
  // (suffix, params, dtype) -> index in out.matrices
  std::map<std::tuple<std::string, int64_t, std::string>, size_t> index;
  const gguf::TensorInfo* embedding = file.FindTensor("token_embd.weight");
  if (embedding != nullptr && embedding->dims.size() == 2) out.vocab_size = embedding->dims[1];
  bool has_head = false;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.dims.size() < 2 || t.name == "token_embd.weight") continue;
    auto [name, in_block] = MatrixName(t.name);
    Matrix m;
    m.name = name;
    m.dtype = DTypeNameOf(t);
    m.params = static_cast<double>(t.NumElements());
    m.bytes = static_cast<double>(t.size_bytes);
    if (t.dims.size() == 3) {  // routed experts: (in, out, experts)
      m.num_experts = static_cast<int>(t.dims[2]);
      m.experts_per_token = static_cast<int>(std::min<int64_t>(experts_used, m.num_experts));
      if (m.experts_per_token < 1) {
        return InvalidArgument(fmt::format("{}: expert tensor {} but no {}.expert_used_count",
                                           file.path(), t.name, arch));
      }
      m.params /= m.num_experts;
      m.bytes /= m.num_experts;
    }
    if (!in_block) {
      m.logits_only = name == "output";
      has_head = has_head || m.logits_only;
      if (out.vocab_size == 0 && m.logits_only) out.vocab_size = t.dims[1];
      out.matrices.push_back(std::move(m));
      continue;
    }
    const auto key = std::make_tuple(name, t.NumElements(), m.dtype);
    if (auto it = index.find(key); it != index.end()) {
      ++out.matrices[it->second].num_layers;
      continue;
    }
    index[key] = out.matrices.size();
    out.matrices.push_back(std::move(m));
  }
  if (out.matrices.empty()) {
    return InvalidArgument(fmt::format("{} has no weight tensors (a shape-only file?): the "
                                       "simulator needs the matrices; use a model preset",
                                       file.path()));
  }
  if (!has_head && embedding != nullptr) {  // tied output: the embedding is the LM head
    Matrix head{"output (tied token_embd)", 1, static_cast<double>(embedding->NumElements()),
                static_cast<double>(embedding->size_bytes), DTypeNameOf(*embedding)};
    head.logits_only = true;
    out.matrices.push_back(std::move(head));
  }
  if (out.vocab_size == 0) {
    KV_ASSIGN_OR_RETURN(out.vocab_size, file.GetInt(arch + ".vocab_size"));
  }
  return out;
}

}  // namespace kvserve::sim
