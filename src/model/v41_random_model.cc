#include "model/v41_random_model.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

// splitmix64, uniform in [-1, 1).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  float Uniform() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }

 private:
  uint64_t state_;
};

void AddMatrix(gguf::GgufWriter& w, Rng& rng, const std::string& name, int64_t rows, int64_t cols,
               tensor::DType dtype) {
  const int64_t row_bytes = tensor::RowBytes(dtype, cols);
  std::vector<uint8_t> data(static_cast<size_t>(row_bytes * rows));
  std::vector<float> row(cols);
  const float amplitude = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = amplitude * rng.Uniform();
    tensor::QuantizeRow(dtype, row.data(), data.data() + r * row_bytes, cols);
  }
  CHECK(w.AddTensor(name, {cols, rows}, dtype, std::move(data)).ok()) << name;
}

void AddNorm(gguf::GgufWriter& w, Rng& rng, const std::string& name, int64_t n) {
  std::vector<uint8_t> data(n * sizeof(float));
  auto* values = reinterpret_cast<float*>(data.data());
  for (int64_t i = 0; i < n; ++i) values[i] = 1.0f + 0.1f * rng.Uniform();
  CHECK(w.AddTensor(name, {n}, tensor::DType::kF32, std::move(data)).ok()) << name;
}

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

gguf::GgufWriter V41ModelWriter(const V41ModelSpec& spec) {
  const V41Config& c = spec.config;
  gguf::GgufWriter w;
  SetMetadata(w, c, spec.with_weights);
  if (!spec.with_weights) return w;
  Rng rng(spec.seed);
  const tensor::DType t = spec.matrix_dtype;
  const int64_t q_dim = c.num_heads * c.latent_dim;
  AddMatrix(w, rng, "token_embd.weight", c.vocab_size, c.dim, t);
  AddNorm(w, rng, "output_norm.weight", c.dim);
  AddMatrix(w, rng, "output.weight", c.vocab_size, c.dim, t);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    AddNorm(w, rng, p + "attn_norm.weight", c.dim);
    AddMatrix(w, rng, p + "attn_q.weight", q_dim, c.dim, t);
    AddMatrix(w, rng, p + "attn_kv.weight", c.latent_dim, c.dim, t);
    AddMatrix(w, rng, p + "attn_output.weight", c.dim, q_dim, t);
    if (std::optional<V41Source> s = c.SourceOf(l)) {
      if (s->layer == l) {
        AddMatrix(w, rng, p + "compress.weight", c.latent_dim, s->ratio * c.latent_dim, t);
        AddMatrix(w, rng, p + "indexer_k.weight", c.index_dim, c.latent_dim, t);
      }
      AddMatrix(w, rng, p + "indexer_q.weight", c.index_heads * c.index_dim, c.dim, t);
      AddMatrix(w, rng, p + "indexer_w.weight", c.index_heads, c.dim, t);
    }
    AddNorm(w, rng, p + "ffn_norm.weight", c.dim);
    AddMatrix(w, rng, p + "ffn_gate.weight", c.ffn_dim, c.dim, t);
    AddMatrix(w, rng, p + "ffn_up.weight", c.ffn_dim, c.dim, t);
    AddMatrix(w, rng, p + "ffn_down.weight", c.dim, c.ffn_dim, t);
  }
  return w;
}

}  // namespace kvserve::model
