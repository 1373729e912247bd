#include "model/llama_random.h"

#include <fmt/format.h>

#include <cmath>

namespace kvserve::model {
namespace {

void SetMetadata(const LlamaSpec& s, tensor::DType type, gguf::GgufWriter& w) {
  using gguf::Value;
  auto u32 = [](int64_t v) { return Value::U32(static_cast<uint32_t>(v)); };
  w.Set("general.architecture", Value::Str("llama"));
  w.Set("general.name", Value::Str("kvserve-random-" + s.name));
  w.Set("general.file_type", Value::U32(LlamaFileType(type)));
  if (type != tensor::DType::kF32 && type != tensor::DType::kF16 && type != tensor::DType::kBF16) {
    w.Set("general.quantization_version", Value::U32(2));
  }
  w.Set("llama.vocab_size", u32(s.vocab_size));
  w.Set("llama.context_length", u32(s.context_length));
  w.Set("llama.embedding_length", u32(s.dim));
  w.Set("llama.block_count", u32(s.num_layers));
  w.Set("llama.feed_forward_length", u32(s.ffn_dim));
  w.Set("llama.attention.head_count", u32(s.num_heads));
  w.Set("llama.attention.head_count_kv", u32(s.num_kv_heads));
  w.Set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5f));
  if (s.rope_freq_base) {
    w.Set("llama.rope.freq_base", Value::F32(static_cast<float>(*s.rope_freq_base)));
  }
  if (s.rope_dim) w.Set("llama.rope.dimension_count", u32(*s.rope_dim));
  if (s.rope_linear_scale) {
    w.Set("llama.rope.scaling.type", Value::Str("linear"));
    w.Set("llama.rope.scaling.factor", Value::F32(static_cast<float>(*s.rope_linear_scale)));
  }
}

Status AddWeights(const LlamaSpec& s, RandomTensorWriter& t) {
  auto scaled = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  KV_RETURN_IF_ERROR(t.Matrix("token_embd.weight", s.dim, s.vocab_size, std::sqrt(3.0f)));
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(t.Norm(p + "attn_norm.weight", s.dim));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_q.weight", s.dim, s.dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_k.weight", s.dim, s.KvDim(), scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_v.weight", s.dim, s.KvDim(), scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "attn_output.weight", s.dim, s.dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Norm(p + "ffn_norm.weight", s.dim));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_up.weight", s.dim, s.ffn_dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(t.Matrix(p + "ffn_down.weight", s.ffn_dim, s.dim, scaled(s.ffn_dim)));
  }
  KV_RETURN_IF_ERROR(t.Norm("output_norm.weight", s.dim));
  if (s.tied_output) return Status::Ok();
  return t.Matrix("output.weight", s.dim, s.vocab_size, 2.0f * scaled(s.dim));
}

}  // namespace

int64_t LlamaSpec::NumParams() const {
  const int64_t per_layer = 2 * dim + 2 * dim * dim + 2 * dim * KvDim() + 3 * dim * ffn_dim;
  return (tied_output ? 1 : 2) * vocab_size * dim + dim + num_layers * per_layer;
}

Result<LlamaSpec> FindLlamaPreset(std::string_view name) {
  LlamaSpec spec;
  if (name == "tiny") {
    spec = LlamaSpec{"tiny", 128, 4, 4, 2, 384, 512, 2048};
  } else if (name == "110m") {
    spec = LlamaSpec{"110m", 768, 12, 12, 12, 2048, 32000, 32768, true};
  } else {
    return InvalidArgument(fmt::format("unknown llama preset '{}' (tiny, 110m)", name));
  }
  spec.rope_freq_base = 10000.0;
  spec.rope_dim = spec.HeadDim();
  return spec;
}

Result<gguf::GgufWriter> LlamaRandomWriter(const LlamaSpec& spec, const RandomWeights& weights) {
  if (spec.dim % spec.num_heads != 0 || spec.num_heads % spec.num_kv_heads != 0) {
    return InvalidArgument("llama spec: heads must divide dim and kv heads must divide heads");
  }
  gguf::GgufWriter w;
  SetMetadata(spec, weights.TypeOf("blk.0.attn_q.weight", spec.dim, spec.dim), w);
  if (spec.vocab_size >= 260) SetSpmTokenizer(spec.vocab_size, w);
  RandomTensorWriter tensors(w, weights);
  KV_RETURN_IF_ERROR(AddWeights(spec, tensors));
  return w;
}

}  // namespace kvserve::model
