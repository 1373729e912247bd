#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "gguf/ggml_types.h"
#include "kernels/weight_matrix.h"

namespace kvserve::model {
namespace {

Result<int64_t> RequiredPositiveInt(const gguf::GgufFile& file, const std::string& key) {
  auto value = file.GetInt(key);
  if (!value.ok()) {
    if (value.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(fmt::format("model metadata lacks required key '{}'", key));
    }
    return value.status();
  }
  if (*value <= 0)
    return InvalidArgument(fmt::format("'{}' must be positive, got {}", key, *value));
  return *value;
}

// Checks that tensor `name` exists with dims `dims` (ne[0] first). Matrices may be any dtype
// the matmul reads whose blocks tile a row (kernels::MatrixFromTensor); vectors (norm
// weights) must be F32.
Status CheckTensor(const gguf::GgufFile& file, const std::string& name,
                   const std::vector<int64_t>& dims) {
  const gguf::TensorInfo* info = file.FindTensor(name);
  if (info == nullptr) return InvalidArgument(fmt::format("model lacks tensor '{}'", name));
  if (info->dims != dims) {
    return InvalidArgument(fmt::format("tensor '{}' has shape [{}], config expects [{}]", name,
                                       fmt::join(info->dims, ", "), fmt::join(dims, ", ")));
  }
  if (dims.size() == 2) return kernels::MatrixFromTensor(*info).status();
  if (info->dtype != tensor::DType::kF32) {
    const std::optional<gguf::GgmlTypeInfo> type = gguf::FindGgmlType(info->ggml_type);
    return InvalidArgument(fmt::format("tensor '{}' must be f32, not ggml type {}", name,
                                       type ? type->name : "unknown"));
  }
  return Status::Ok();
}

Status ReadHyperparameters(const gguf::GgufFile& file, const std::string& arch, ModelConfig& c) {
  KV_ASSIGN_OR_RETURN(c.context_length, RequiredPositiveInt(file, arch + ".context_length"));
  KV_ASSIGN_OR_RETURN(c.dim, RequiredPositiveInt(file, arch + ".embedding_length"));
  KV_ASSIGN_OR_RETURN(c.num_layers, RequiredPositiveInt(file, arch + ".block_count"));
  KV_ASSIGN_OR_RETURN(c.ffn_dim, RequiredPositiveInt(file, arch + ".feed_forward_length"));
  KV_ASSIGN_OR_RETURN(c.num_heads, RequiredPositiveInt(file, arch + ".attention.head_count"));
  KV_ASSIGN_OR_RETURN(c.num_kv_heads,
                      file.GetIntOr(arch + ".attention.head_count_kv", c.num_heads));
  KV_ASSIGN_OR_RETURN(double eps,
                      file.GetFloatOr(arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c.rms_norm_eps = static_cast<float>(eps);
  KV_ASSIGN_OR_RETURN(c.rope_freq_base, file.GetFloatOr(arch + ".rope.freq_base", 10000.0));
  if (c.dim % c.num_heads != 0) {
    return InvalidArgument(
        fmt::format("head_count {} does not divide embedding_length {}", c.num_heads, c.dim));
  }
  c.head_dim = c.dim / c.num_heads;
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(
        fmt::format("head_count_kv {} does not divide head_count {}", c.num_kv_heads, c.num_heads));
  }
  KV_ASSIGN_OR_RETURN(c.rope_dim, file.GetIntOr(arch + ".rope.dimension_count", c.head_dim));
  if (c.rope_dim <= 0 || c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim) {
    return InvalidArgument(
        fmt::format("rope.dimension_count {} must be even and in (0, {}]", c.rope_dim, c.head_dim));
  }
  if (!(c.rms_norm_eps > 0.0f) || !(c.rope_freq_base > 0.0)) {
    return InvalidArgument("layer_norm_rms_epsilon and rope.freq_base must be positive");
  }
  KV_ASSIGN_OR_RETURN(std::string scaling, file.GetStringOr(arch + ".rope.scaling.type", "none"));
  if (scaling == "linear") {
    KV_ASSIGN_OR_RETURN(c.rope_linear_scale, file.GetFloatOr(arch + ".rope.scaling.factor", 1.0));
    if (!(c.rope_linear_scale > 0.0)) {
      return InvalidArgument(
          fmt::format("rope.scaling.factor {} must be positive", c.rope_linear_scale));
    }
  } else if (scaling != "none") {
    return InvalidArgument(fmt::format("rope.scaling.type '{}' is not supported", scaling));
  }
  return Status::Ok();
}

Status CheckTensors(const gguf::GgufFile& file, const ModelConfig& c) {
  const int64_t kv = c.kv_row_elems();
  KV_RETURN_IF_ERROR(CheckTensor(file, "token_embd.weight", {c.dim, c.vocab_size}));
  KV_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {c.dim}));
  if (!c.tied_output) KV_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {c.dim, c.vocab_size}));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_norm.weight", {c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_q.weight", {c.dim, c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_k.weight", {c.dim, kv}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_v.weight", {c.dim, kv}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_output.weight", {c.dim, c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_norm.weight", {c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_gate.weight", {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_up.weight", {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_down.weight", {c.ffn_dim, c.dim}));
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ReadModelConfig(const gguf::GgufFile& file) {
  ModelConfig c;
  auto arch = file.GetString("general.architecture");
  if (!arch.ok()) return InvalidArgument("model metadata lacks 'general.architecture'");
  if (*arch != "llama") {
    return Unimplemented(fmt::format("architecture '{}' is not supported (only llama)", *arch));
  }
  c.architecture = *arch;
  KV_RETURN_IF_ERROR(ReadHyperparameters(file, c.architecture, c));
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return InvalidArgument("model lacks tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) return InvalidArgument("token_embd.weight must be 2-D");
  c.vocab_size = embd->dims[1];
  c.tied_output = file.FindTensor("output.weight") == nullptr;
  KV_RETURN_IF_ERROR(CheckTensors(file, c));
  return c;
}

}  // namespace kvserve::model
