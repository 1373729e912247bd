#include "model/deepseek2_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "tensor/dtype.h"

namespace kvserve::model {
namespace {

Result<int64_t> Key(const gguf::GgufFile& file, std::string_view key, int64_t fallback = -1,
                    int64_t min = 1) {
  const std::string name = fmt::format("{}.{}", kDeepseek2Architecture, key);
  Result<int64_t> v = fallback >= 0 ? file.GetIntOr(name, fallback) : file.GetInt(name);
  if (!v.ok()) {
    if (v.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(fmt::format("model metadata lacks required key '{}'", name));
    }
    return v.status();
  }
  if (*v < min || *v > (int64_t{1} << 30)) {
    return InvalidArgument(fmt::format("'{}' must be in [{}, 2^30], got {}", name, min, *v));
  }
  return *v;
}

Status CheckTensor(const gguf::GgufFile& file, const std::string& name,
                   const std::vector<int64_t>& dims) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr) return InvalidArgument(fmt::format("tensor '{}' is missing", name));
  if (t->dims != dims) {
    return InvalidArgument(fmt::format("tensor '{}' has dims [{}], expected [{}]", name,
                                       fmt::join(t->dims, ", "), fmt::join(dims, ", ")));
  }
  if (!t->dtype) {
    return InvalidArgument(
        fmt::format("tensor '{}' has ggml type {}, which kvserve cannot use", name, t->ggml_type));
  }
  if (dims.size() == 1 ? *t->dtype != tensor::DType::kF32
                       : !tensor::IsValidRowLength(*t->dtype, dims[0])) {
    return InvalidArgument(
        fmt::format("tensor '{}' cannot be {}", name, tensor::DTypeName(*t->dtype)));
  }
  return Status::Ok();
}

Status CheckAttentionTensors(const gguf::GgufFile& file, const Deepseek2Config& c, int l) {
  auto name = [l](std::string_view s) { return fmt::format("blk.{}.{}", l, s); };
  const int64_t h = c.num_heads, qk = c.qk_head_dim();
  KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_norm.weight"), {c.dim}));
  if (c.q_lora_rank > 0) {
    KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_q_a.weight"), {c.dim, c.q_lora_rank}));
    KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_q_a_norm.weight"), {c.q_lora_rank}));
    KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_q_b.weight"), {c.q_lora_rank, h * qk}));
  } else {
    KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_q.weight"), {c.dim, h * qk}));
  }
  KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_kv_a_mqa.weight"), {c.dim, c.latent_dim()}));
  KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_kv_a_norm.weight"), {c.kv_lora_rank}));
  if (file.FindTensor(name("attn_k_b.weight")) == nullptr &&
      file.FindTensor(name("attn_kv_b.weight")) != nullptr) {
    return InvalidArgument(fmt::format(
        "tensor '{}' is the unsplit form of older conversions; kvserve reads the MLA form "
        "(attn_k_b / attn_v_b, as current llama.cpp's convert_hf_to_gguf.py writes)",
        name("attn_kv_b.weight")));
  }
  KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_k_b.weight"), {c.nope_dim, c.kv_lora_rank, h}));
  KV_RETURN_IF_ERROR(CheckTensor(file, name("attn_v_b.weight"), {c.kv_lora_rank, c.v_head_dim, h}));
  return CheckTensor(file, name("attn_output.weight"), {h * c.v_head_dim, c.dim});
}

Status CheckTensors(const gguf::GgufFile& file, const Deepseek2Config& c) {
  KV_RETURN_IF_ERROR(CheckTensor(file, "token_embd.weight", {c.dim, c.vocab_size}));
  KV_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {c.dim}));
  if (!c.tied_output) {
    KV_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {c.dim, c.vocab_size}));
  }
  for (int l = 0; l < c.num_layers; ++l) {
    KV_RETURN_IF_ERROR(CheckAttentionTensors(file, c, l));
    if (c.IsMoeLayer(l)) {
      KV_RETURN_IF_ERROR(CheckMoeTensors(file, c.moe, c.dim, l));
      continue;
    }
    auto name = [l](std::string_view s) { return fmt::format("blk.{}.{}", l, s); };
    KV_RETURN_IF_ERROR(CheckTensor(file, name("ffn_norm.weight"), {c.dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, name("ffn_gate.weight"), {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, name("ffn_up.weight"), {c.dim, c.ffn_dim}));
    KV_RETURN_IF_ERROR(CheckTensor(file, name("ffn_down.weight"), {c.ffn_dim, c.dim}));
  }
  return Status::Ok();
}

Status ReadRope(const gguf::GgufFile& file, Deepseek2Config& c) {
  KV_ASSIGN_OR_RETURN(c.rope_freq_base, file.GetFloatOr("deepseek2.rope.freq_base", 10000.0));
  KV_ASSIGN_OR_RETURN(std::string type, file.GetStringOr("deepseek2.rope.scaling.type", "none"));
  if (type == "none") return Status::Ok();
  if (type != "yarn") {
    return InvalidArgument(
        fmt::format("deepseek2.rope.scaling.type '{}' is not supported (none, yarn)", type));
  }
  KV_ASSIGN_OR_RETURN(c.yarn.factor, file.GetFloatOr("deepseek2.rope.scaling.factor", 1.0));
  if (!(c.yarn.factor >= 1.0)) {
    return InvalidArgument("deepseek2.rope.scaling.factor must be >= 1");
  }
  KV_ASSIGN_OR_RETURN(c.yarn.orig_ctx,
                      Key(file, "rope.scaling.original_context_length", c.context_length));
  KV_ASSIGN_OR_RETURN(double log_mul,
                      file.GetFloatOr("deepseek2.rope.scaling.yarn_log_multiplier", 0.0));
  c.mscale_all_dim = log_mul / 0.1;  // the convert script stores 0.1 * mscale_all_dim
  return Status::Ok();
}

}  // namespace

Result<Deepseek2Config> ReadDeepseek2Config(const gguf::GgufFile& file) {
  Deepseek2Config c;
  KV_ASSIGN_OR_RETURN(c.num_layers, Key(file, "block_count"));
  KV_ASSIGN_OR_RETURN(c.context_length, Key(file, "context_length"));
  KV_ASSIGN_OR_RETURN(c.dim, Key(file, "embedding_length"));
  KV_ASSIGN_OR_RETURN(c.num_heads, Key(file, "attention.head_count"));
  KV_ASSIGN_OR_RETURN(c.leading_dense, Key(file, "leading_dense_block_count", 0, 0));
  KV_ASSIGN_OR_RETURN(c.ffn_dim, Key(file, "feed_forward_length", c.leading_dense > 0 ? -1 : 0, 0));
  KV_ASSIGN_OR_RETURN(c.q_lora_rank, Key(file, "attention.q_lora_rank", 0, 0));
  KV_ASSIGN_OR_RETURN(c.kv_lora_rank, Key(file, "attention.kv_lora_rank"));
  KV_ASSIGN_OR_RETURN(c.rope_dim, Key(file, "rope.dimension_count"));
  KV_ASSIGN_OR_RETURN(int64_t key_length_mla, Key(file, "attention.key_length_mla"));
  KV_ASSIGN_OR_RETURN(c.v_head_dim, Key(file, "attention.value_length_mla"));
  KV_ASSIGN_OR_RETURN(double eps,
                      file.GetFloatOr("deepseek2.attention.layer_norm_rms_epsilon", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  if (key_length_mla <= c.rope_dim || c.rope_dim % 2 != 0) {
    return InvalidArgument(
        fmt::format("deepseek2: key_length_mla {} must exceed an even rope.dimension_count {}",
                    key_length_mla, c.rope_dim));
  }
  c.nope_dim = key_length_mla - c.rope_dim;
  if (c.latent_dim() % 32 != 0) {
    return InvalidArgument(fmt::format(
        "deepseek2: kv_lora_rank + rope dim = {} must be a multiple of 32", c.latent_dim()));
  }
  if (c.leading_dense > c.num_layers) {
    return InvalidArgument("deepseek2.leading_dense_block_count exceeds block_count");
  }
  KV_RETURN_IF_ERROR(ReadRope(file, c));
  if (c.leading_dense < c.num_layers) {
    KV_ASSIGN_OR_RETURN(c.moe, ReadMoeConfig(file, kDeepseek2Architecture));
    c.moe.selection_bias =
        file.FindTensor(fmt::format("blk.{}.exp_probs_b.bias", c.leading_dense)) != nullptr;
  }
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  c.has_weights = embd != nullptr;
  if (!c.has_weights) {
    KV_ASSIGN_OR_RETURN(c.vocab_size, Key(file, "vocab_size"));
    return c;
  }
  if (embd->dims.size() != 2) return InvalidArgument("token_embd.weight must be 2-D");
  c.vocab_size = embd->dims[1];
  c.tied_output = file.FindTensor("output.weight") == nullptr;
  KV_RETURN_IF_ERROR(CheckTensors(file, c));
  return c;
}

std::string DescribeDeepseek2PlainKv(const Deepseek2Config& c, tensor::DType dtype) {
  const int64_t k_row = c.num_heads * c.qk_head_dim(), v_row = c.num_heads * c.v_head_dim;
  if (!tensor::IsValidRowLength(dtype, k_row) || !tensor::IsValidRowLength(dtype, v_row)) {
    return "";
  }
  const int64_t per_token =
      c.num_layers * (tensor::RowBytes(dtype, k_row) + tensor::RowBytes(dtype, v_row));
  return fmt::format(
      "plain K/V cache would be {} layers x {} heads x ({} K + {} V) dims in {} = {} B per token",
      c.num_layers, c.num_heads, c.qk_head_dim(), c.v_head_dim, tensor::DTypeName(dtype),
      per_token);
}

}  // namespace kvserve::model
