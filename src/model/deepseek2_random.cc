#include "model/deepseek2_random.h"

#include <fmt/format.h>

#include <cmath>

namespace kvserve::model {
namespace {

constexpr std::string_view kArch = "deepseek2";

Deepseek2Config Tiny(bool lite) {
  Deepseek2Config c;
  c.context_length = 4096;
  c.dim = 128;
  c.num_layers = 3;
  c.vocab_size = 512;
  c.num_heads = 4;
  c.ffn_dim = 256;
  c.leading_dense = 1;
  c.q_lora_rank = lite ? 0 : 64;
  c.kv_lora_rank = 64;
  c.nope_dim = 32;
  c.rope_dim = 32;
  c.v_head_dim = 32;
  c.rms_norm_eps = 1e-6f;
  c.yarn = {lite ? 8.0 : 4.0, 512, 32.0, 1.0};
  c.mscale_all_dim = lite ? 0.707 : 1.0;
  c.moe.num_experts = 8;
  c.moe.top_k = lite ? 3 : 2;
  c.moe.expert_ffn_dim = 64;
  c.moe.shared_ffn_dim = lite ? 128 : 64;  // 2 and 1 shared experts
  c.moe.gating = lite ? ExpertGating::kSoftmax : ExpertGating::kSigmoid;
  c.moe.norm_topk = !lite;
  c.moe.weights_scale = lite ? 1.0f : 2.5f;
  c.moe.selection_bias = !lite;
  return c;
}

Deepseek2Config Published(bool v3) {
  Deepseek2Config c;
  c.context_length = 163840;  // config.json max_position_embeddings
  c.dim = v3 ? 7168 : 2048;
  c.num_layers = v3 ? 61 : 27;
  c.vocab_size = v3 ? 129280 : 102400;
  c.num_heads = v3 ? 128 : 16;
  c.ffn_dim = v3 ? 18432 : 10944;
  c.leading_dense = v3 ? 3 : 1;
  c.q_lora_rank = v3 ? 1536 : 0;
  c.kv_lora_rank = 512;
  c.nope_dim = 128;
  c.rope_dim = 64;
  c.v_head_dim = 128;
  c.yarn = {40.0, 4096, 32.0, 1.0};
  c.mscale_all_dim = v3 ? 1.0 : 0.707;
  c.moe.num_experts = v3 ? 256 : 64;
  c.moe.top_k = v3 ? 8 : 6;
  c.moe.expert_ffn_dim = v3 ? 2048 : 1408;
  c.moe.shared_ffn_dim = v3 ? 2048 : 2816;  // 1 and 2 shared experts
  c.moe.gating = v3 ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  c.moe.norm_topk = v3;
  c.moe.weights_scale = v3 ? 2.5f : 1.0f;
  c.moe.selection_bias = v3;
  return c;
}

// V2-Lite's layout scaled to ~0.5B parameters, every matrix row a multiple of 256 values.
Deepseek2Config Small() {
  Deepseek2Config c = Published(false);
  c.context_length = 8192;
  c.dim = 1024;
  c.num_layers = 8;
  c.vocab_size = 32000;
  c.num_heads = 8;
  c.ffn_dim = 2816;
  c.kv_lora_rank = 256;
  c.nope_dim = 64;
  c.v_head_dim = 64;
  c.yarn = {4.0, 2048, 32.0, 1.0};
  c.moe.num_experts = 32;
  c.moe.top_k = 4;
  c.moe.expert_ffn_dim = 512;
  c.moe.shared_ffn_dim = 1024;
  return c;
}

void SetMetadata(const Deepseek2Spec& s, uint32_t file_type, gguf::GgufWriter& w) {
  using gguf::Value;
  const Deepseek2Config& c = s.config;
  auto key = [](std::string_view k) { return fmt::format("{}.{}", kArch, k); };
  auto u32 = [](int64_t v) { return Value::U32(static_cast<uint32_t>(v)); };
  w.Set("general.architecture", Value::Str(std::string(kArch)));
  w.Set("general.name", Value::Str("kvserve-random-" + s.name));
  w.Set("general.file_type", Value::U32(file_type));
  w.Set(key("vocab_size"), u32(c.vocab_size));
  w.Set(key("context_length"), u32(c.context_length));
  w.Set(key("embedding_length"), u32(c.dim));
  w.Set(key("block_count"), u32(c.num_layers));
  w.Set(key("feed_forward_length"), u32(c.ffn_dim));
  w.Set(key("leading_dense_block_count"), u32(c.leading_dense));
  w.Set(key("attention.head_count"), u32(c.num_heads));
  w.Set(key("attention.head_count_kv"), u32(1));
  w.Set(key("attention.q_lora_rank"), u32(c.q_lora_rank));
  w.Set(key("attention.kv_lora_rank"), u32(c.kv_lora_rank));
  w.Set(key("attention.key_length"), u32(c.latent_dim()));
  w.Set(key("attention.value_length"), u32(c.kv_lora_rank));
  w.Set(key("attention.key_length_mla"), u32(c.qk_head_dim()));
  w.Set(key("attention.value_length_mla"), u32(c.v_head_dim));
  w.Set(key("attention.layer_norm_rms_epsilon"), Value::F32(c.rms_norm_eps));
  w.Set(key("rope.dimension_count"), u32(c.rope_dim));
  w.Set(key("rope.freq_base"), Value::F32(static_cast<float>(c.rope_freq_base)));
  if (c.yarn.factor > 1.0) {
    w.Set(key("rope.scaling.type"), Value::Str("yarn"));
    w.Set(key("rope.scaling.factor"), Value::F32(static_cast<float>(c.yarn.factor)));
    w.Set(key("rope.scaling.original_context_length"), u32(c.yarn.orig_ctx));
    w.Set(key("rope.scaling.yarn_log_multiplier"),
          Value::F32(static_cast<float>(0.1 * c.mscale_all_dim)));
  }
  const MoeConfig& m = c.moe;
  w.Set(key("expert_count"), u32(m.num_experts));
  w.Set(key("expert_used_count"), u32(m.top_k));
  w.Set(key("expert_feed_forward_length"), u32(m.expert_ffn_dim));
  w.Set(key("expert_shared_count"), u32(m.shared_ffn_dim / m.expert_ffn_dim));
  w.Set(key("expert_weights_scale"), Value::F32(m.weights_scale));
  w.Set(key("expert_weights_norm"), Value::Bool(m.norm_topk));
  w.Set(key("expert_gating_func"), u32(static_cast<int>(m.gating)));
}

Status AddLayer(const Deepseek2Config& c, int l, RandomTensorWriter& t) {
  auto scaled = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  const std::string p = fmt::format("blk.{}.", l);
  const int64_t h = c.num_heads;
  KV_RETURN_IF_ERROR(t.Norm(p + "attn_norm.weight", c.dim));
  if (c.q_lora_rank > 0) {
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_q_a.weight", c.dim, c.q_lora_rank, scaled(c.dim)));
    KV_RETURN_IF_ERROR(t.Norm(p + "attn_q_a_norm.weight", c.q_lora_rank));
    KV_RETURN_IF_ERROR(
        t.Matrix(p + "attn_q_b.weight", c.q_lora_rank, h * c.qk_head_dim(), scaled(c.q_lora_rank)));
  } else {
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_q.weight", c.dim, h * c.qk_head_dim(), scaled(c.dim)));
  }
  KV_RETURN_IF_ERROR(t.Matrix(p + "attn_kv_a_mqa.weight", c.dim, c.latent_dim(), scaled(c.dim)));
  KV_RETURN_IF_ERROR(t.Norm(p + "attn_kv_a_norm.weight", c.kv_lora_rank));
  KV_RETURN_IF_ERROR(
      t.Stacked(p + "attn_k_b.weight", c.nope_dim, c.kv_lora_rank, h, scaled(c.kv_lora_rank)));
  KV_RETURN_IF_ERROR(
      t.Stacked(p + "attn_v_b.weight", c.kv_lora_rank, c.v_head_dim, h, scaled(c.kv_lora_rank)));
  KV_RETURN_IF_ERROR(
      t.Matrix(p + "attn_output.weight", h * c.v_head_dim, c.dim, scaled(h * c.v_head_dim)));
  KV_RETURN_IF_ERROR(t.Norm(p + "ffn_norm.weight", c.dim));
  if (!c.IsMoeLayer(l)) {
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim, scaled(c.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim, scaled(c.dim)));
    return t.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim, scaled(c.ffn_dim));
  }
  const MoeConfig& m = c.moe;
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate_inp.weight", c.dim, m.num_experts, 6 * scaled(c.dim)));
  if (m.selection_bias) KV_RETURN_IF_ERROR(t.Bias(p + "exp_probs_b.bias", m.num_experts, 0.05f));
  const int64_t f = m.expert_ffn_dim;
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_gate_exps.weight", c.dim, f, m.num_experts, scaled(c.dim)));
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_up_exps.weight", c.dim, f, m.num_experts, scaled(c.dim)));
  KV_RETURN_IF_ERROR(t.Stacked(p + "ffn_down_exps.weight", f, c.dim, m.num_experts, scaled(f)));
  const int64_t s = m.shared_ffn_dim;
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate_shexp.weight", c.dim, s, scaled(c.dim)));
  KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up_shexp.weight", c.dim, s, scaled(c.dim)));
  return t.Matrix(p + "ffn_down_shexp.weight", s, c.dim, scaled(s));
}

}  // namespace

Result<Deepseek2Spec> FindDeepseek2Preset(std::string_view name) {
  if (name == "tiny") return Deepseek2Spec{"deepseek2-tiny", Tiny(false), false};
  if (name == "tiny-lite") return Deepseek2Spec{"deepseek2-tiny-lite", Tiny(true), false};
  if (name == "small") return Deepseek2Spec{"deepseek2-small", Small(), false};
  if (name == "deepseek-v2-lite") return Deepseek2Spec{"deepseek-v2-lite", Published(false), true};
  if (name == "deepseek-v3") return Deepseek2Spec{"deepseek-v3", Published(true), true};
  return InvalidArgument(fmt::format(
      "unknown deepseek2 preset '{}' (tiny, tiny-lite, small, deepseek-v2-lite, deepseek-v3)",
      name));
}

Result<gguf::GgufWriter> Deepseek2RandomWriter(const Deepseek2Spec& spec,
                                               const RandomWeights& weights) {
  const Deepseek2Config& c = spec.config;
  // Routers stay F32 (llama.cpp's quantize keeps ffn_gate_inp unquantized), and so do the
  // per-head up-projections attn_k_b / attn_v_b: llama.cpp's CPU backend runs their batched
  // matmul over the permuted query only for F32 (an F16 or Q8_0 one aborts with
  // "GGML_ASSERT(*cur_backend_id != -1)"); kvserve reads them in any type.
  RandomWeights typed = weights;
  typed.type_of = [&weights](std::string_view name, int64_t row_len, int64_t rows) {
    if (name.find("ffn_gate_inp") != std::string_view::npos) return tensor::DType::kF32;
    if (name.find("attn_k_b") != std::string_view::npos ||
        name.find("attn_v_b") != std::string_view::npos) {
      return tensor::DType::kF32;
    }
    return weights.TypeOf(name, row_len, rows);
  };
  gguf::GgufWriter w;
  // A quantize mix (q4_k_m, ...) names its own file type; a pure type is its matrices' type.
  SetMetadata(spec,
              weights.file_type ? *weights.file_type
                                : LlamaFileType(weights.TypeOf("blk.0.attn_output.weight", c.dim,
                                                               c.dim)),
              w);
  if (spec.shape_only) return w;
  SetSpmTokenizer(c.vocab_size, w);
  RandomTensorWriter t(w, typed);
  KV_RETURN_IF_ERROR(t.Matrix("token_embd.weight", c.dim, c.vocab_size, std::sqrt(3.0f)));
  for (int l = 0; l < c.num_layers; ++l) KV_RETURN_IF_ERROR(AddLayer(c, l, t));
  KV_RETURN_IF_ERROR(t.Norm("output_norm.weight", c.dim));
  KV_RETURN_IF_ERROR(t.Matrix("output.weight", c.dim, c.vocab_size,
                              2.0f * std::sqrt(3.0f / static_cast<float>(c.dim))));
  return w;
}

}  // namespace kvserve::model
