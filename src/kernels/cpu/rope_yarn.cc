#include "kernels/cpu/rope_yarn.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace kvserve::kernels {
namespace {

double CorrectionDim(int rope_dim, int64_t orig_ctx, double beta, double base) {
  return rope_dim * std::log(static_cast<double>(orig_ctx) / (beta * 2 * std::numbers::pi)) /
         (2 * std::log(base));
}

}  // namespace

YarnRamp MakeYarnRamp(const YarnParams& yarn, int rope_dim, double base) {
  YarnRamp r;
  r.low = std::max(0.0, std::floor(CorrectionDim(rope_dim, yarn.orig_ctx, yarn.beta_fast, base)));
  r.high = std::min(static_cast<double>(rope_dim - 1),
                    std::ceil(CorrectionDim(rope_dim, yarn.orig_ctx, yarn.beta_slow, base)));
  return r;
}

double YarnTheta(const YarnParams& yarn, const YarnRamp& ramp, int i, double extrap) {
  const double y = (i - ramp.low) / std::max(0.001, ramp.high - ramp.low);
  const double mix = 1.0 - std::min(1.0, std::max(0.0, y));
  return extrap / yarn.factor * (1.0 - mix) + extrap * mix;
}

void RopeYarnAngles(const RopeParams& rope, const YarnParams& yarn, int32_t pos, float* cs) {
  DCHECK(rope.rope_dim % 2 == 0);
  DCHECK(rope.linear_scale == 1.0);
  const bool scaled = yarn.factor > 1.0;
  const YarnRamp ramp = scaled ? MakeYarnRamp(yarn, rope.rope_dim, rope.freq_base) : YarnRamp{};
  for (int i = 0; i < rope.rope_dim / 2; ++i) {
    const double extrap =
        pos * std::pow(rope.freq_base, -2.0 * i / static_cast<double>(rope.rope_dim));
    const double theta = scaled ? YarnTheta(yarn, ramp, i, extrap) : extrap;
    cs[2 * i] = static_cast<float>(std::cos(theta));
    cs[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
}

void RopeYarn(const RopeParams& rope, const YarnParams& yarn, float* x, int num_heads,
              int32_t pos) {
  CHECK_LE(rope.rope_dim, kMaxRopeDim);
  float cs[kMaxRopeDim];
  RopeYarnAngles(rope, yarn, pos, cs);
  RopeRotate(rope, cs, x, num_heads);
}

void RopeRotate(const RopeParams& rope, const float* cs, float* x, int num_heads) {
  DCHECK(rope.rope_dim % 2 == 0 && rope.rope_dim <= rope.head_dim);
  for (int i = 0; i < rope.rope_dim / 2; ++i) {
    const float c = cs[2 * i];
    const float s = cs[2 * i + 1];
    for (int h = 0; h < num_heads; ++h) {
      float* pair = x + static_cast<int64_t>(h) * rope.head_dim + 2 * i;
      const float x0 = pair[0];
      const float x1 = pair[1];
      pair[0] = x0 * c - x1 * s;
      pair[1] = x0 * s + x1 * c;
    }
  }
}

float YarnAttentionScale(const YarnParams& yarn, double mscale_all_dim, int qk_head_dim) {
  const double mscale =
      yarn.factor > 1.0 ? 1.0 + 0.1 * mscale_all_dim * std::log(yarn.factor) : 1.0;
  return static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(qk_head_dim)));
}

}  // namespace kvserve::kernels
