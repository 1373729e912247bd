// Per-token CPU kernels of the forward pass: RMSNorm, RoPE, SwiGLU and GeGLU, soft-capping,
// softmax, embedding lookup, scaling, residual add.
//
// Every function here works on one row (one token) at a time, in a fixed order, so a token's
// result never depends on which other tokens share the batch or on the thread count
// (DESIGN.md section 5). None allocates.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::kernels {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i in [0, n). x and y may alias.
// The mean is accumulated in double: lane l (0..7) sums x[i]^2 for i = l, l + 8, ... < n in
// increasing order, then sum = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Rotary position embedding as ggml's rope with llama.cpp's two pairings. Within each head the
// first rope_dim values rotate in rope_dim / 2 pairs; pair i turns by the angle
//   theta_i = (pos / linear_scale) * base^(-2i / rope_dim) / freq_factors[i]
// (freq_factors absent = 1: Llama 3's rope_freqs.weight, Phi-3's long/short factors), and the
// rotated values are multiplied by attn_factor (1 unless the file says otherwise).
// With YaRN (yarn.factor > 1; gpt-oss), theta_i is kernels/cpu/rope_yarn.h's blend of the
// unscaled and the interpolated angle, and the magnitude attn_factor * (1 + 0.1 ln(factor)),
// as ggml's rope computes it for rope.scaling.type "yarn" (ext_factor 1).
//   kNormal (llama.cpp LLAMA_ROPE_TYPE_NORM, the `llama` architecture): pair i = (2i, 2i + 1)
//   kNeox (LLAMA_ROPE_TYPE_NEOX: qwen2, qwen3, phi3, gemma*): pair i = (i, i + rope_dim / 2)
// Dimensions >= rope_dim pass through. x: (num_heads, head_dim), modified in place.
// Example: head_dim 8, rope_dim 8, base 10000, pos 3: the angles are 3, 3*10000^-0.25,
// 3*10000^-0.5, 3*10000^-0.75 radians; kNormal turns (0,1),(2,3),(4,5),(6,7), kNeox turns
// (0,4),(1,5),(2,6),(3,7).
enum class RopeStyle { kNormal, kNeox };
// YaRN rotary scaling (kernels/cpu/rope_yarn.h has the angles).
struct YarnParams {
  double factor = 1.0;   // rope.scaling.factor (1 = no scaling: plain angles)
  int64_t orig_ctx = 0;  // rope.scaling.original_context_length
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};
struct RopeParams {
  int head_dim = 0;
  int rope_dim = 0;  // even, <= head_dim
  double freq_base = 10000.0;
  double linear_scale = 1.0;
  RopeStyle style = RopeStyle::kNormal;
  const float* freq_factors = nullptr;  // (rope_dim / 2) divisors of the angles, or null
  double attn_factor = 1.0;             // scales cos and sin (llama.cpp's rope attn_factor)
  YarnParams yarn{};                    // factor > 1: YaRN angles and magnitude
};
void Rope(const RopeParams& params, float* x, int num_heads, int32_t pos);
inline constexpr int kMaxRopeDim = 1024;  // Rope's limit on rope_dim (CHECKed)

// Rope in two steps, for callers that rotate many heads (q and k, every layer) at one position:
// RopeAngles fills cos_sin[rope_dim] with pair i's cos (i < rope_dim / 2) and sin (at
// rope_dim / 2 + i), magnitude included; RopeWith rotates x's heads by them. Together they
// compute exactly what Rope computes.
void RopeAngles(const RopeParams& params, int32_t pos, float* cos_sin);
void RopeWith(const RopeParams& params, const float* cos_sin, float* x, int num_heads);
// Whether a and b rotate every position by the same angles (a shared RopeAngles table).
bool SameRopeAngles(const RopeParams& a, const RopeParams& b);

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i in [0, n), with
// exp = AttentionExp (attention_exp.h: a fixed sequence of float operations) of min(-gate[i], 88),
// evaluated by the attention kernels' vector exp (exp-inl.h), so every SIMD target gives the same
// bits (silu.cc).
void SiluMul(float* gate, const float* up, int64_t n);

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai, alpha 1.702, limit 7) with the expert's gate and
// up biases (null: none) added first, i in [0, n):
//   g = min(gate[i] + gate_bias[i], limit); u = clamp(up[i] + up_bias[i], -limit, limit)
//   gate[i] = g / (1 + exp(min(alpha * (0 - g), 88))) * (u + 1)
// with exp = AttentionExp (attention_exp.h) evaluated by the vector exp as SiluMul's, so every
// SIMD target gives the same bits (silu.cc). note: ggml uses expf; the two differ by <= 2 ulp.
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;
void SwigluOaiMul(float* gate, const float* up, int64_t n, const float* gate_bias = nullptr,
                  const float* up_bias = nullptr);

// gate[i] = gelu(gate[i]) * up[i], i in [0, n), GELU's tanh form as the models define it
// (PyTorch's gelu(approximate="tanh")): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) in f32.
// note: llama.cpp's CPU backend instead looks GELU up in a table of f16 values (ggml's
// GGML_GELU_FP16), which moves Gemma's logprobs by ~1e-4..1e-3 from the exact function;
// kvserve keeps the exact one (docs/models.md has the measured difference).
void GeluMul(float* gate, const float* up, int64_t n);

// x[i] = cap * tanh(x[i] / cap), i in [0, n) (Gemma's logit soft-capping). note: cap > 0.
void SoftCap(float* x, int64_t n, float cap);

// x[i] *= s, i in [0, n).
void Scale(float* x, int64_t n, float s);

// In place: x[i] = exp(x[i] - max) / sum, the sum accumulated in index order in f32.
void Softmax(float* x, int64_t n);

// y[i] += x[i], i in [0, n) (add_rows.cc).
void AddInPlace(float* y, const float* x, int64_t n);

// One term of a weighted sum of rows (MoE's combine), i in [0, n):
//   v = (x[i] + bias[i]) * w (bias null: x[i] * w); y[i] = accumulate ? y[i] + v : v
// One rounding per operation in that order, on every SIMD target (add_rows.cc).
void AddScaledRow(float* y, const float* x, const float* bias, float w, int64_t n,
                  bool accumulate);

// Copies row `token` of an embedding table (num_rows, dim) of `dtype` into out (dim floats),
// dequantizing. note: 0 <= token < num_rows (CHECKed by the caller's validation).
void EmbeddingLookup(const void* table, tensor::DType dtype, int64_t dim, int32_t token,
                     float* out);

// Index of the largest value (the first one on ties). note: n > 0.
int64_t ArgMax(const float* x, int64_t n);

}  // namespace kvserve::kernels
