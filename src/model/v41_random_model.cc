#include "model/v41_random_model.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

void SetMetadata(gguf::GgufWriter& w, const V41Config& c, bool with_weights) {
  auto key = [](std::string_view k) { return fmt::format("{}.{}", kV41Architecture, k); };
  auto u32 = [](int64_t v) { return gguf::Value::U32(static_cast<uint32_t>(v)); };
  w.Set("general.architecture", gguf::Value::Str(kV41Architecture));
  w.Set(key("context_length"), u32(c.context_length));
  w.Set(key("embedding_length"), u32(c.dim));
  w.Set(key("block_count"), u32(c.num_layers));
  w.Set(key("feed_forward_length"), u32(c.ffn_dim));
  if (!with_weights) w.Set(key("vocab_size"), u32(c.vocab_size));
  w.Set(key("attention.head_count"), u32(c.num_heads));
  w.Set(key("attention.key_length"), u32(c.latent_dim));
  w.Set(key("attention.sliding_window"), u32(c.window));
  w.Set(key("attention.layer_norm_rms_epsilon"), gguf::Value::F32(c.rms_norm_eps));
  w.Set(key("rope.dimension_count"), u32(c.rope_dim));
  w.Set(key("rope.freq_base"), gguf::Value::F32(static_cast<float>(c.rope_freq_base)));
  std::vector<int32_t> layers, ratios;
  for (const V41Source& s : c.sources) {
    layers.push_back(s.layer);
    ratios.push_back(s.ratio);
  }
  w.Set(key("compress.source_layers"), gguf::Value::I32Array(layers));
  w.Set(key("compress.ratios"), gguf::Value::I32Array(ratios));
  w.Set(key("indexer.head_count"), u32(c.index_heads));
  w.Set(key("indexer.key_length"), u32(c.index_dim));
  w.Set(key("indexer.top_k"), u32(c.index_top_k));
  w.Set(key("indexer.candidate_blocks"), u32(c.candidate_blocks));
  w.Set(key("indexer.candidate_block_size"), u32(c.candidate_block_size));
}

}  // namespace

Result<V41ModelSpec> FindV41Preset(std::string_view name) {
  V41ModelSpec spec;
  V41Config& c = spec.config;
  if (name == "mini") {
    c.context_length = 2048;
    c.dim = 256;
    c.num_layers = 8;
    c.ffn_dim = 512;
    c.vocab_size = 512;
    c.num_heads = 4;
    c.latent_dim = 64;
    c.rope_dim = 16;
    c.window = 16;
    c.sources = {{2, 2}, {5, 1}};
    c.index_heads = 4;
    c.index_dim = 32;
    c.index_top_k = 32;
    spec.weights.norm_spread = 0.1f;
    return spec;
  }
  if (name == "v41-flash-shape") {
    c.context_length = 1048576;
    c.dim = 5120;
    c.num_layers = 40;
    c.ffn_dim = 12288;  // not published for the dense stand-in; shape metadata only
    c.vocab_size = 129280;
    c.num_heads = 64;
    c.latent_dim = 512;
    c.rope_dim = 64;
    c.window = 128;
    c.sources = {{2, 2}, {8, 2}, {14, 2}, {20, 1}};
    c.index_heads = 32;
    c.index_dim = 128;
    c.index_top_k = 512;
    spec.with_weights = false;
    return spec;
  }
  return InvalidArgument(
      fmt::format("unknown {} preset '{}' (mini, v41-flash-shape)", kV41Architecture, name));
}

Result<gguf::GgufWriter> V41ModelWriter(const V41ModelSpec& spec) {
  const V41Config& c = spec.config;
  gguf::GgufWriter w;
  SetMetadata(w, c, spec.with_weights);
  if (!spec.with_weights) return w;
  if (c.vocab_size >= 260) SetSpmTokenizer(c.vocab_size, w);
  RandomTensorWriter t(w, spec.weights);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return t.Matrix(name, cols, rows, static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols))));
  };
  const int64_t q_dim = c.num_heads * c.latent_dim;
  KV_RETURN_IF_ERROR(matrix("token_embd.weight", c.vocab_size, c.dim));
  KV_RETURN_IF_ERROR(t.Norm("output_norm.weight", c.dim));
  KV_RETURN_IF_ERROR(matrix("output.weight", c.vocab_size, c.dim));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(t.Norm(p + "attn_norm.weight", c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "attn_q.weight", q_dim, c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "attn_kv.weight", c.latent_dim, c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "attn_output.weight", c.dim, q_dim));
    if (std::optional<V41Source> s = c.SourceOf(l)) {
      if (s->layer == l) {
        KV_RETURN_IF_ERROR(matrix(p + "compress.weight", c.latent_dim, s->ratio * c.latent_dim));
        KV_RETURN_IF_ERROR(matrix(p + "indexer_k.weight", c.index_dim, c.latent_dim));
      }
      KV_RETURN_IF_ERROR(matrix(p + "indexer_q.weight", c.index_heads * c.index_dim, c.dim));
      KV_RETURN_IF_ERROR(matrix(p + "indexer_w.weight", c.index_heads, c.dim));
    }
    KV_RETURN_IF_ERROR(t.Norm(p + "ffn_norm.weight", c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", c.ffn_dim, c.dim));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", c.dim, c.ffn_dim));
  }
  return w;
}

}  // namespace kvserve::model
