#include "model/random_model.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

// splitmix64: a small fixed generator, so files are identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Uniform in [-1, 1).
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

// A (rows, cols) matrix stored as `dtype` rows; GGUF dims {cols, rows}.
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

}  // namespace

gguf::GgufWriter RandomModelWriter(const RandomModelSpec& s) {
  gguf::GgufWriter w;
  w.Set("general.architecture", gguf::Value::Str("llama"));
  w.Set("general.name", gguf::Value::Str("random"));
  w.Set("llama.context_length", gguf::Value::U32(static_cast<uint32_t>(s.context_length)));
  w.Set("llama.embedding_length", gguf::Value::U32(static_cast<uint32_t>(s.dim)));
  w.Set("llama.block_count", gguf::Value::U32(static_cast<uint32_t>(s.num_layers)));
  w.Set("llama.feed_forward_length", gguf::Value::U32(static_cast<uint32_t>(s.ffn_dim)));
  w.Set("llama.attention.head_count", gguf::Value::U32(static_cast<uint32_t>(s.num_heads)));
  w.Set("llama.attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(s.num_kv_heads)));
  w.Set("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-5f));
  if (s.rope_dim)
    w.Set("llama.rope.dimension_count", gguf::Value::U32(static_cast<uint32_t>(*s.rope_dim)));
  if (s.rope_freq_base)
    w.Set("llama.rope.freq_base", gguf::Value::F32(static_cast<float>(*s.rope_freq_base)));
  if (s.rope_linear_scale) {
    w.Set("llama.rope.scaling.type", gguf::Value::Str("linear"));
    w.Set("llama.rope.scaling.factor", gguf::Value::F32(static_cast<float>(*s.rope_linear_scale)));
  }
  Rng rng(s.seed);
  const int64_t head_dim = s.dim / s.num_heads;
  const int64_t kv_row = s.num_kv_heads * head_dim;
  AddMatrix(w, rng, "token_embd.weight", s.vocab_size, s.dim, s.matrix_dtype);
  AddNorm(w, rng, "output_norm.weight", s.dim);
  if (!s.tied_output) AddMatrix(w, rng, "output.weight", s.vocab_size, s.dim, s.matrix_dtype);
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    AddNorm(w, rng, p + "attn_norm.weight", s.dim);
    AddMatrix(w, rng, p + "attn_q.weight", s.dim, s.dim, s.matrix_dtype);
    AddMatrix(w, rng, p + "attn_k.weight", kv_row, s.dim, s.matrix_dtype);
    AddMatrix(w, rng, p + "attn_v.weight", kv_row, s.dim, s.matrix_dtype);
    AddMatrix(w, rng, p + "attn_output.weight", s.dim, s.dim, s.matrix_dtype);
    AddNorm(w, rng, p + "ffn_norm.weight", s.dim);
    AddMatrix(w, rng, p + "ffn_gate.weight", s.ffn_dim, s.dim, s.matrix_dtype);
    AddMatrix(w, rng, p + "ffn_up.weight", s.ffn_dim, s.dim, s.matrix_dtype);
    AddMatrix(w, rng, p + "ffn_down.weight", s.dim, s.ffn_dim, s.matrix_dtype);
  }
  return w;
}

}  // namespace kvserve::model
