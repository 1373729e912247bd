#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/check.h"
#include "kernels/cpu/rope_yarn.h"
#include "tensor/quant.h"

namespace kvserve::kernels {

namespace {

// RmsNorm's 1 / sqrt(mean + eps) from its eight lane sums (ops.h's tree).
float RmsInverse(const double (&lane)[8], int64_t n, float eps) {
  const double sum_sq =
      ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
}

#if defined(__x86_64__)
// RmsNorm with AVX-512: the eight chains are the eight lanes of one vector of doubles (a
// product and an add each, as the scalar loop: no fma), then the same tree and the same two
// float multiplies per value, 16 at a time. (GCC 12 warns about the _mm512_undefined_* inside
// its intrinsics in a function with a target attribute; nothing here is uninitialized.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void RmsNormAvx512(const float* x, const float* weight,
                                                      float* y, int64_t n, float eps) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    acc = _mm512_add_pd(acc, _mm512_mul_pd(v, v));
  }
  double lane[8];
  _mm512_storeu_pd(lane, acc);
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<double>(x[i]) * x[i];
  const float inv = RmsInverse(lane, n, eps);
  const __m512 vinv = _mm512_set1_ps(inv);
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(v, _mm512_loadu_ps(weight + i)));
  }
  for (; i < n; ++i) y[i] = x[i] * inv * weight[i];
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return RmsNormAvx512(x, weight, y, n, eps);
#endif
  // Eight independent chains (a dependent add per 8 values, not per value), then ops.h's tree.
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<double>(x[i]) * x[i];
  const float inv = RmsInverse(lane, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void RopeAngles(const RopeParams& params, int32_t pos, float* cos_sin) {
  DCHECK(params.rope_dim % 2 == 0 && params.rope_dim <= params.head_dim);
  const int half = params.rope_dim / 2;
  const double scaled_pos = static_cast<double>(pos) / params.linear_scale;
  const bool yarn = params.yarn.factor > 1.0;
  const double magnitude =
      yarn ? params.attn_factor * (1.0 + 0.1 * std::log(params.yarn.factor)) : params.attn_factor;
  const YarnRamp ramp =
      yarn ? MakeYarnRamp(params.yarn, params.rope_dim, params.freq_base) : YarnRamp{};
  for (int i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(params.freq_base, -2.0 * i / static_cast<double>(params.rope_dim));
    double theta = scaled_pos * inv_freq;
    if (params.freq_factors != nullptr) theta /= params.freq_factors[i];
    if (yarn) theta = YarnTheta(params.yarn, ramp, i, theta);
    cos_sin[i] = static_cast<float>(std::cos(theta) * magnitude);
    cos_sin[half + i] = static_cast<float>(std::sin(theta) * magnitude);
  }
}

void RopeWith(const RopeParams& params, const float* cos_sin, float* x, int num_heads) {
  const int half = params.rope_dim / 2;
  // Pair i's two indices within a head.
  const bool neox = params.style == RopeStyle::kNeox;
  for (int h = 0; h < num_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * params.head_dim;
    for (int i = 0; i < half; ++i) {
      const float c = cos_sin[i];
      const float s = cos_sin[half + i];
      const int a = neox ? i : 2 * i;
      const int b = neox ? i + half : 2 * i + 1;
      const float x0 = head[a];
      const float x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
}

bool SameRopeAngles(const RopeParams& a, const RopeParams& b) {
  return a.rope_dim == b.rope_dim && a.freq_base == b.freq_base &&
         a.linear_scale == b.linear_scale && a.freq_factors == b.freq_factors &&
         a.attn_factor == b.attn_factor && a.yarn.factor == b.yarn.factor &&
         a.yarn.orig_ctx == b.yarn.orig_ctx && a.yarn.beta_fast == b.yarn.beta_fast &&
         a.yarn.beta_slow == b.yarn.beta_slow;
}

void Rope(const RopeParams& params, float* x, int num_heads, int32_t pos) {
  CHECK_LE(params.rope_dim, kMaxRopeDim);
  float cos_sin[kMaxRopeDim];
  RopeAngles(params, pos, cos_sin);
  RopeWith(params, cos_sin, x, num_heads);
}

void GeluMul(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float gelu = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + 0.044715f * g * g)));
    gate[i] = gelu * up[i];
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  DCHECK(cap > 0.0f);
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Softmax(float* x, int64_t n) {
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void EmbeddingLookup(const void* table, tensor::DType dtype, int64_t dim, int32_t token,
                     float* out) {
  const int64_t row_bytes = tensor::RowBytes(dtype, dim);
  const auto* row = static_cast<const std::byte*>(table) + static_cast<int64_t>(token) * row_bytes;
  tensor::DequantizeRow(dtype, row, out, dim);
}

int64_t ArgMax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace kvserve::kernels
