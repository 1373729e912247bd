#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/rope_yarn.h"
#include "tensor/quant.h"

namespace kvserve::kernels {

void RmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void Rope(const RopeParams& params, float* x, int num_heads, int32_t pos) {
  RopeQk(params, x, num_heads, nullptr, 0, pos);
}

namespace {

// cos and sin (times the magnitude) of every pair's angle at one position, and what they were
// computed for. Every layer of a decode step turns its q and k at the same position with the
// same parameters (or two sets: gemma3's local and global layers), so each thread keeps the
// last one and recomputes only when the position or a parameter the angles use changes.
struct RopeAngles {
  RopeParams params;
  std::vector<float> factors;  // a copy of params.freq_factors' values (the pointer may be reused)
  int32_t pos = -1;
  std::vector<float> cos, sin;

  bool Matches(const RopeParams& p, int32_t at) const {
    return pos == at && params.rope_dim == p.rope_dim && params.freq_base == p.freq_base &&
           params.linear_scale == p.linear_scale && params.attn_factor == p.attn_factor &&
           params.yarn.factor == p.yarn.factor && params.yarn.orig_ctx == p.yarn.orig_ctx &&
           params.yarn.beta_fast == p.yarn.beta_fast &&
           params.yarn.beta_slow == p.yarn.beta_slow &&
           (p.freq_factors == nullptr) == (params.freq_factors == nullptr) &&
           (p.freq_factors == nullptr ||  // same rope_dim: rope_dim / 2 values each
            std::equal(factors.begin(), factors.end(), p.freq_factors));
  }

  void Compute(const RopeParams& p, int32_t at) {
    params = p;
    pos = at;
    factors.clear();
    if (p.freq_factors != nullptr) factors.assign(p.freq_factors, p.freq_factors + p.rope_dim / 2);
    const int half = p.rope_dim / 2;
    cos.resize(half);
    sin.resize(half);
    const double scaled_pos = static_cast<double>(at) / p.linear_scale;
    const bool yarn = p.yarn.factor > 1.0;
    const double magnitude =
        yarn ? p.attn_factor * (1.0 + 0.1 * std::log(p.yarn.factor)) : p.attn_factor;
    const YarnRamp ramp = yarn ? MakeYarnRamp(p.yarn, p.rope_dim, p.freq_base) : YarnRamp{};
    for (int i = 0; i < half; ++i) {
      const double inv_freq = std::pow(p.freq_base, -2.0 * i / static_cast<double>(p.rope_dim));
      double theta = scaled_pos * inv_freq;
      if (p.freq_factors != nullptr) theta /= p.freq_factors[i];
      if (yarn) theta = YarnTheta(p.yarn, ramp, i, theta);
      cos[i] = static_cast<float>(std::cos(theta) * magnitude);
      sin[i] = static_cast<float>(std::sin(theta) * magnitude);
    }
  }
};

// The angles of (params, pos), from this thread's last ones when they match.
const RopeAngles& AnglesOf(const RopeParams& params, int32_t pos) {
  // Two entries: a model with local and global layers alternates two sets per step.
  thread_local RopeAngles cache[2];
  thread_local int next = 0;
  for (const RopeAngles& a : cache) {
    if (a.Matches(params, pos)) return a;
  }
  RopeAngles& slot = cache[next];
  next ^= 1;
  slot.Compute(params, pos);
  return slot;
}

}  // namespace

void RopeQk(const RopeParams& params, float* q, int num_heads, float* k, int num_kv_heads,
            int32_t pos) {
  DCHECK(params.rope_dim % 2 == 0 && params.rope_dim <= params.head_dim);
  const int half = params.rope_dim / 2;
  const RopeAngles& angles = AnglesOf(params, pos);
  // Pair i's two indices within a head.
  const bool neox = params.style == RopeStyle::kNeox;
  for (int i = 0; i < half; ++i) {
    const float c = angles.cos[i];
    const float s = angles.sin[i];
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    for (int h = 0; h < num_heads + num_kv_heads; ++h) {
      float* head = h < num_heads ? q + static_cast<int64_t>(h) * params.head_dim
                                  : k + static_cast<int64_t>(h - num_heads) * params.head_dim;
      const float x0 = head[a];
      const float x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void SwigluOaiMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kSwigluOaiLimit);
    const float u = std::clamp(up[i], -kSwigluOaiLimit, kSwigluOaiLimit);
    gate[i] = g / (1.0f + std::exp(kSwigluOaiAlpha * (-g))) * (u + 1.0f);
  }
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

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
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
