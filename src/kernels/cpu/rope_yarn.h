// YaRN rotary scaling (DeepSeek-V2/V3's `rope.scaling.type = yarn`), as ggml's rope computes it
// for llama.cpp's deepseek2 graph, in the "normal" pairing (adjacent pairs (2i, 2i + 1)).
//
// For pair i of rope_dim / 2 (theta_scale = base^(-2 / rope_dim)):
//   theta_extrap = pos * theta_scale^i              (the unscaled angle)
//   theta_interp = theta_extrap / factor             (linear interpolation)
//   ramp(i)      = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
//   theta        = theta_interp * (1 - ramp(i)) + theta_extrap * ramp(i)
// with low = max(0, floor(d(beta_fast))), high = min(rope_dim - 1, ceil(d(beta_slow))),
//   d(beta) = rope_dim * ln(orig_ctx / (beta * 2 pi)) / (2 ln(base)).
// RopeYarn's rotation is pure (cos, sin; no magnitude change): llama.cpp's deepseek2 graph cancels
// ggml's YaRN magnitude factor in the rope and folds mscale^2 into the attention scale instead
// (YarnAttentionScale).
// Example: rope_dim 64, base 10000, factor 40, orig_ctx 4096: low = 10, high = 23; pairs below
// 10 keep their angle, pairs above 23 are divided by 40, pairs between blend linearly.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace kvserve::kernels {

// YarnParams (kernels/cpu/ops.h): factor, orig_ctx, beta_fast, beta_slow.

// The ramp's [low, high] pair range for a rope of rope_dim values at `base`.
struct YarnRamp {
  double low = 0;
  double high = 0;
};
YarnRamp MakeYarnRamp(const YarnParams& yarn, int rope_dim, double base);
// The YaRN angle of pair i whose unscaled angle is `extrap` (theta above).
double YarnTheta(const YarnParams& yarn, const YarnRamp& ramp, int i, double extrap);

// Rotates the first rope.rope_dim values of each of num_heads heads (head stride
// rope.head_dim) of x by the YaRN angles above at `pos`. rope.linear_scale must be 1,
// rope.rope_dim <= kMaxRopeDim (ops.h).
// Equals RopeYarnAngles then RopeRotate (as Rope equals RopeAngles then RopeWith), which a
// model uses to compute a position's angles once for all its layers.
void RopeYarn(const RopeParams& rope, const YarnParams& yarn, float* x, int num_heads, int32_t pos);

// cs[2 i] = cos(theta_i), cs[2 i + 1] = sin(theta_i) as floats: the YaRN angles above at `pos`
// for the rope.rope_dim / 2 pairs (cs: rope_dim floats).
void RopeYarnAngles(const RopeParams& rope, const YarnParams& yarn, int32_t pos, float* cs);

// RopeYarn's rotation of x (num_heads heads, stride rope.head_dim) with the cos/sin pairs of
// RopeYarnAngles (the same bits as RopeYarn at that position).
void RopeRotate(const RopeParams& rope, const float* cs, float* x, int num_heads);

// DeepSeek's attention scale with YaRN: mscale^2 / sqrt(qk_head_dim), mscale = 1 + 0.1 *
// mscale_all_dim * ln(factor) (mscale_all_dim = llama.cpp's yarn_log_multiplier / 0.1; 1 when
// factor <= 1).
float YarnAttentionScale(const YarnParams& yarn, double mscale_all_dim, int qk_head_dim);

}  // namespace kvserve::kernels
