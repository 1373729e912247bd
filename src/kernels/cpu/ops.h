// Per-token CPU kernels of the forward pass: RMSNorm, RoPE, SwiGLU, softmax, embedding
// lookup, residual add.
//
// Every function here works on one row (one token) at a time, in a fixed order, so a token's
// result never depends on which other tokens share the batch or on the thread count
// (DESIGN.md section 5). None allocates.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::kernels {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i in [0, n). x and y may alias.
// The mean is accumulated in double, in index order.
void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Rotary position embedding, the GGUF/llama.cpp "normal" (LLAMA) convention: within each
// head, adjacent pairs (x[2i], x[2i+1]) for 2i < rope_dim are rotated by the angle
//   theta_i = (pos / scale) * base^(-2i / rope_dim)
// and dimensions >= rope_dim pass through. `scale` is the linear rope scaling factor (1 = none).
// x: (num_heads, head_dim), modified in place.
// Example: head_dim 8, rope_dim 8, base 10000, pos 3: pairs (0,1),(2,3),(4,5),(6,7) rotate by
// 3, 3*10000^-0.25, 3*10000^-0.5, 3*10000^-0.75 radians.
struct RopeParams {
  int head_dim = 0;
  int rope_dim = 0;  // even, <= head_dim
  double freq_base = 10000.0;
  double linear_scale = 1.0;
};
void Rope(const RopeParams& params, float* x, int num_heads, int32_t pos);

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i in [0, n).
void SiluMul(float* gate, const float* up, int64_t n);

// In place: x[i] = exp(x[i] - max) / sum, the sum accumulated in index order in f32.
void Softmax(float* x, int64_t n);

// y[i] += x[i], i in [0, n).
void AddInPlace(float* y, const float* x, int64_t n);

// Copies row `token` of an embedding table (num_rows, dim) of `dtype` into out (dim floats),
// dequantizing. note: 0 <= token < num_rows (CHECKed by the caller's validation).
void EmbeddingLookup(const void* table, tensor::DType dtype, int64_t dim, int32_t token,
                     float* out);

// Index of the largest value (the first one on ties). note: n > 0.
int64_t ArgMax(const float* x, int64_t n);

}  // namespace kvserve::kernels
