#include "model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"
#include "kernels/weight_matrix.h"
#include "model/moe.h"

namespace kvserve::model {
namespace {

using kernels::RopeStyle;

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

// ---- what each architecture changes (llama.cpp's load_hparams and graph builders) ----

// Every layer `l` with l % pattern < pattern - 1 slides over `window` tokens, the others attend
// to everything (llama.cpp's set_swa_pattern). Example: pattern 6 -> layers 5, 11, ... global.
void SetSlidingPattern(ModelConfig& c, int pattern, int64_t window) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    c.layer_window[l] = l % pattern < pattern - 1 ? static_cast<int32_t>(window) : 0;
  }
}

Result<int64_t> WindowKey(const gguf::GgufFile& file, const std::string& arch,
                          std::optional<int64_t> fallback) {
  const std::string key = arch + ".attention.sliding_window";
  KV_ASSIGN_OR_RETURN(int64_t window,
                      fallback ? file.GetIntOr(key, *fallback) : RequiredPositiveInt(file, key));
  if (window <= 0 || window > (int64_t{1} << 30)) {
    return InvalidArgument(fmt::format("'{}' must be in [1, 2^30], got {}", key, window));
  }
  return window;
}

// Gemma's query scale: 1/sqrt(head_dim), or 1/sqrt(dim / heads) for the 27B shapes (gemma2 46
// layers, gemma3 62), as llama.cpp sets f_attention_scale.
float GemmaAttentionScale(const ModelConfig& c, int64_t layers_of_27b) {
  const int64_t d = c.num_layers == layers_of_27b ? c.dim / c.num_heads : c.head_dim;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
}

Status ReadLlama(const gguf::GgufFile&, ModelConfig&) {
  return Status::Ok();
}

Status ReadQwen2(const gguf::GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  return Status::Ok();
}

Status ReadQwen3(const gguf::GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qk_norm = true;
  return Status::Ok();
}

Status ReadPhi3(const gguf::GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.fused_gate_up = true;
  return Status::Ok();  // phi3.attention.sliding_window is ignored, as llama.cpp does
}

Status ReadGemma2(const gguf::GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.activation = FfnActivation::kGeluTanh;
  c.post_norms = true;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  KV_ASSIGN_OR_RETURN(int64_t window, WindowKey(file, c.architecture, 4096));
  SetSlidingPattern(c, 2, window);
  KV_ASSIGN_OR_RETURN(double attn_cap, file.GetFloatOr("gemma2.attn_logit_softcapping", 50.0));
  KV_ASSIGN_OR_RETURN(double final_cap, file.GetFloatOr("gemma2.final_logit_softcapping", 30.0));
  if (!(attn_cap > 0) || !(final_cap > 0)) {
    return InvalidArgument("gemma2 logit soft-capping values must be positive");
  }
  c.attn_softcap = static_cast<float>(attn_cap);
  c.final_softcap = static_cast<float>(final_cap);
  c.attention_scale = GemmaAttentionScale(c, 46);
  return Status::Ok();
}

Status ReadGemma3(const gguf::GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.activation = FfnActivation::kGeluTanh;
  c.post_norms = true;
  c.qk_norm = true;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  KV_ASSIGN_OR_RETURN(int64_t window, WindowKey(file, c.architecture, std::nullopt));
  SetSlidingPattern(c, 6, window);
  c.rope_freq_base_sliding = 10000.0;
  c.rope_linear_scale_sliding = 1.0;
  c.attention_scale = GemmaAttentionScale(c, 62);
  return Status::Ok();
}

// Qwen2-MoE: qwen2's attention (biases optional, see ReadTensorFlags), then on every layer a
// softmax router, top-k not normalised, and a shared expert (expert_shared_feed_forward_length,
// default feed_forward_length) gated by sigmoid(ffn_gate_inp_shexp . n).
Status ReadQwen2Moe(const gguf::GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  KV_ASSIGN_OR_RETURN(MoeConfig moe, ReadMoeConfig(file, c.architecture, c.ffn_dim));
  KV_ASSIGN_OR_RETURN(
      moe.shared_ffn_dim,
      file.GetIntOr(c.architecture + ".expert_shared_feed_forward_length", c.ffn_dim));
  if (moe.shared_ffn_dim <= 0 || moe.shared_ffn_dim > (int64_t{1} << 30)) {
    return InvalidArgument("qwen2moe.expert_shared_feed_forward_length must be positive");
  }
  moe.shared_gate = true;
  moe.gating = ExpertGating::kSoftmax;
  moe.norm_topk = false;
  c.moe = moe;
  return Status::Ok();
}

// Qwen3-MoE: qwen3's attention, then on every layer a softmax router whose top-k weights are
// normalised (llama.cpp's qwen3moe graph passes norm_w = true whatever the metadata says).
Status ReadQwen3Moe(const gguf::GgufFile& file, ModelConfig& c) {
  KV_RETURN_IF_ERROR(ReadQwen3(file, c));
  KV_ASSIGN_OR_RETURN(MoeConfig moe, ReadMoeConfig(file, c.architecture, c.ffn_dim));
  moe.shared_ffn_dim = 0;
  moe.gating = ExpertGating::kSoftmax;
  moe.norm_topk = true;
  c.moe = moe;
  return Status::Ok();
}

// gpt-oss (llama.cpp's openai-moe): see config.h. Layer l slides over attention.sliding_window
// tokens when l % 2 == 0; sliding layers may have their own rope.freq_base_swa.
Status ReadGptOss(const gguf::GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.attn_sinks = true;
  c.output_bias = true;
  KV_ASSIGN_OR_RETURN(int64_t window, WindowKey(file, c.architecture, std::nullopt));
  SetSlidingPattern(c, 2, window);
  KV_ASSIGN_OR_RETURN(c.rope_freq_base_sliding,
                      file.GetFloatOr(c.architecture + ".rope.freq_base_swa", c.rope_freq_base));
  KV_ASSIGN_OR_RETURN(MoeConfig moe, ReadMoeConfig(file, c.architecture));
  moe.shared_ffn_dim = 0;
  moe.gating = ExpertGating::kSoftmaxWeight;
  moe.norm_topk = false;
  moe.weights_scale = 0.0f;
  moe.biases = true;
  moe.activation = ExpertActivation::kSwigluOai;
  moe.norm_tensor = "post_attention_norm";
  c.moe = moe;
  return Status::Ok();
}

struct DenseArchitecture {
  std::string_view name;
  Status (*read)(const gguf::GgufFile& file, ModelConfig& c);
};

constexpr DenseArchitecture kDenseArchitectures[] = {
    {"llama", ReadLlama},       {"qwen2", ReadQwen2},       {"qwen3", ReadQwen3},
    {"phi3", ReadPhi3},         {"gemma2", ReadGemma2},     {"gemma3", ReadGemma3},
    {"qwen2moe", ReadQwen2Moe}, {"qwen3moe", ReadQwen3Moe}, {"gpt-oss", ReadGptOss},
};

const DenseArchitecture* FindDense(std::string_view name) {
  for (const DenseArchitecture& a : kDenseArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

Status ReadRopeScaling(const gguf::GgufFile& file, const std::string& arch, ModelConfig& c) {
  KV_ASSIGN_OR_RETURN(std::string scaling, file.GetStringOr(arch + ".rope.scaling.type", "none"));
  if (scaling == "linear") {
    KV_ASSIGN_OR_RETURN(c.rope_linear_scale, file.GetFloatOr(arch + ".rope.scaling.factor", 1.0));
    if (c.rope_linear_scale == 0.0) c.rope_linear_scale = 1.0;  // llama.cpp: 0 = unset
    if (!(c.rope_linear_scale > 0.0)) {
      return InvalidArgument(
          fmt::format("rope.scaling.factor {} must be positive", c.rope_linear_scale));
    }
  } else if (scaling == "yarn") {
    KV_ASSIGN_OR_RETURN(c.yarn.factor, file.GetFloatOr(arch + ".rope.scaling.factor", 1.0));
    KV_ASSIGN_OR_RETURN(c.yarn.beta_fast,
                        file.GetFloatOr(arch + ".rope.scaling.yarn_beta_fast", 32.0));
    KV_ASSIGN_OR_RETURN(c.yarn.beta_slow,
                        file.GetFloatOr(arch + ".rope.scaling.yarn_beta_slow", 1.0));
    if (!(c.yarn.factor >= 1.0) || !(c.yarn.beta_fast > 0.0) || !(c.yarn.beta_slow > 0.0)) {
      return InvalidArgument("yarn rope.scaling.factor must be >= 1 and its betas positive");
    }
  } else if (scaling != "none" && scaling != "longrope") {
    return InvalidArgument(fmt::format(
        "rope.scaling.type '{}' is not supported (none, linear, yarn, longrope)", scaling));
  }
  KV_ASSIGN_OR_RETURN(c.rope_attn_factor, file.GetFloatOr(arch + ".rope.scaling.attn_factor", 1.0));
  KV_ASSIGN_OR_RETURN(
      c.rope_original_context,
      file.GetIntOr(arch + ".rope.scaling.original_context_length", c.context_length));
  if (!(c.rope_attn_factor > 0.0)) {
    return InvalidArgument("rope.scaling.attn_factor must be positive");
  }
  c.yarn.orig_ctx = c.rope_original_context;
  if (c.yarn.factor > 1.0 && c.yarn.orig_ctx <= 0) {
    return InvalidArgument("yarn needs a positive rope.scaling.original_context_length");
  }
  return Status::Ok();
}

Status ReadCommon(const gguf::GgufFile& file, const std::string& arch, ModelConfig& c) {
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
  if (c.num_layers > 100000) return InvalidArgument("block_count is implausibly large");
  // The head size: attention.key_length, by default dim / heads (which must then divide).
  if (c.dim % c.num_heads != 0 && file.Find(arch + ".attention.key_length") == nullptr) {
    return InvalidArgument(
        fmt::format("head_count {} does not divide embedding_length {}", c.num_heads, c.dim));
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(
        fmt::format("head_count_kv {} does not divide head_count {}", c.num_kv_heads, c.num_heads));
  }
  KV_ASSIGN_OR_RETURN(c.head_dim,
                      file.GetIntOr(arch + ".attention.key_length", c.dim / c.num_heads));
  KV_ASSIGN_OR_RETURN(int64_t value_dim,
                      file.GetIntOr(arch + ".attention.value_length", c.head_dim));
  if (c.head_dim <= 0 || c.head_dim > 4096 || value_dim != c.head_dim) {
    return InvalidArgument(
        fmt::format("attention.key_length {} must be in [1, 4096] and equal value_length {}",
                    c.head_dim, value_dim));
  }
  KV_ASSIGN_OR_RETURN(c.rope_dim, file.GetIntOr(arch + ".rope.dimension_count", c.head_dim));
  if (c.rope_dim <= 0 || c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim) {
    return InvalidArgument(
        fmt::format("rope.dimension_count {} must be even and in (0, {}]", c.rope_dim, c.head_dim));
  }
  if (!(c.rms_norm_eps > 0.0f) || !(c.rope_freq_base > 0.0)) {
    return InvalidArgument("layer_norm_rms_epsilon and rope.freq_base must be positive");
  }
  KV_RETURN_IF_ERROR(ReadRopeScaling(file, arch, c));
  c.rope_freq_base_sliding = c.rope_freq_base;
  c.rope_linear_scale_sliding = c.rope_linear_scale;
  c.attention_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  c.layer_window.assign(c.num_layers, 0);
  return Status::Ok();
}

// ---- tensors ----

bool Has(const gguf::GgufFile& file, const std::string& name) {
  return file.FindTensor(name) != nullptr;
}

// The flags the tensors imply (fused projections, optional biases, rope factors, tied output).
Status ReadTensorFlags(const gguf::GgufFile& file, ModelConfig& c) {
  if (file.tensors().empty()) {
    return InvalidArgument(fmt::format(
        "this {} file has no weights (a shape-only preset for plan and inspect)", c.architecture));
  }
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return InvalidArgument("model lacks tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) return InvalidArgument("token_embd.weight must be 2-D");
  c.vocab_size = embd->dims[1];
  c.tied_output = !Has(file, "output.weight");
  c.fused_qkv = c.architecture == "phi3" && Has(file, "blk.0.attn_qkv.weight");
  if (c.architecture == "llama" || c.architecture == "qwen2moe" || c.architecture == "gpt-oss") {
    c.qkv_bias = Has(file, "blk.0.attn_q.bias");
    c.output_bias = c.output_bias || Has(file, "blk.0.attn_output.bias");  // gpt-oss: required
  }
  if (Has(file, "rope_freqs.weight")) {
    c.rope_factors_short = c.rope_factors_long = "rope_freqs.weight";
  } else if (Has(file, "rope_factors_long.weight") || Has(file, "rope_factors_short.weight")) {
    c.rope_factors_short = "rope_factors_short.weight";
    c.rope_factors_long = "rope_factors_long.weight";
  }
  return Status::Ok();
}

Status CheckAttentionTensors(const gguf::GgufFile& file, const ModelConfig& c,
                             const std::string& p) {
  const int64_t q = c.q_row_elems(), kv = c.kv_row_elems();
  KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_norm.weight", {c.dim}));
  if (c.fused_qkv) {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_qkv.weight", {c.dim, q + 2 * kv}));
  } else {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_q.weight", {c.dim, q}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_k.weight", {c.dim, kv}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_v.weight", {c.dim, kv}));
  }
  if (c.qkv_bias) {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_q.bias", {q}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_k.bias", {kv}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_v.bias", {kv}));
  }
  if (c.qk_norm) {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_q_norm.weight", {c.head_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_k_norm.weight", {c.head_dim}));
  }
  KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_output.weight", {q, c.dim}));
  if (c.output_bias) KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_output.bias", {c.dim}));
  if (c.attn_sinks) KV_RETURN_IF_ERROR(CheckTensor(file, p + "attn_sinks.weight", {c.num_heads}));
  if (c.post_norms)
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "post_attention_norm.weight", {c.dim}));
  return Status::Ok();
}

Status CheckFfnTensors(const gguf::GgufFile& file, const ModelConfig& c, int64_t layer) {
  if (c.moe) return CheckMoeTensors(file, *c.moe, c.dim, static_cast<int>(layer));
  const std::string p = fmt::format("blk.{}.", layer);
  KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_norm.weight", {c.dim}));
  if (c.fused_gate_up) {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_up.weight", {c.dim, 2 * c.ffn_dim}));
  } else {
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_gate.weight", {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_up.weight", {c.dim, c.ffn_dim}));
  }
  KV_RETURN_IF_ERROR(CheckTensor(file, p + "ffn_down.weight", {c.ffn_dim, c.dim}));
  if (c.post_norms) KV_RETURN_IF_ERROR(CheckTensor(file, p + "post_ffw_norm.weight", {c.dim}));
  return Status::Ok();
}

Status CheckTensors(const gguf::GgufFile& file, const ModelConfig& c) {
  KV_RETURN_IF_ERROR(CheckTensor(file, "token_embd.weight", {c.dim, c.vocab_size}));
  KV_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {c.dim}));
  if (!c.tied_output) KV_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {c.dim, c.vocab_size}));
  for (const std::string& factors : {c.rope_factors_short, c.rope_factors_long}) {
    if (!factors.empty()) KV_RETURN_IF_ERROR(CheckTensor(file, factors, {c.rope_dim / 2}));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(CheckAttentionTensors(file, c, p));
    KV_RETURN_IF_ERROR(CheckFfnTensors(file, c, l));
  }
  return Status::Ok();
}

}  // namespace

bool IsDenseArchitecture(std::string_view architecture) {
  return FindDense(architecture) != nullptr;
}

Result<ModelConfig> ReadModelHyperparameters(const gguf::GgufFile& file) {
  ModelConfig c;
  auto arch = file.GetString("general.architecture");
  if (!arch.ok()) return InvalidArgument("model metadata lacks 'general.architecture'");
  const DenseArchitecture* dense = FindDense(*arch);
  if (dense == nullptr) {
    return Unimplemented(fmt::format("architecture '{}' is not a dense architecture", *arch));
  }
  c.architecture = *arch;
  KV_RETURN_IF_ERROR(ReadCommon(file, c.architecture, c));
  KV_RETURN_IF_ERROR(dense->read(file, c));
  return c;
}

Result<ModelConfig> ReadModelConfig(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(ModelConfig c, ReadModelHyperparameters(file));
  KV_RETURN_IF_ERROR(ReadTensorFlags(file, c));
  KV_RETURN_IF_ERROR(CheckTensors(file, c));
  return c;
}

}  // namespace kvserve::model
