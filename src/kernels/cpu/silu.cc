// SiluMul and SwigluOaiMul (ops.h) per Highway target: AttentionExpLanes (exp-inl.h, the
// attention kernels' exp) on every lane, then the scalar definition's divide and multiply, so
// every target gives the bits of g / (1 + AttentionExp(min(-g, 88))) * u (and of SwigluOaiMul's
// definition).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/silu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/exp-inl.h"
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The exp argument of SiLU: -g, at most kSiluExpMax (exp stays finite; there silu(g) is -0 or a
// value of magnitude < 1e-36 either way).
constexpr float kSiluExpMax = 88.0f;

// silu(g) * u in every lane. The clamp is std::min(-g, 88)'s select (a NaN gate keeps its NaN);
// -g as 0 - g, which AttentionExp maps to the same bits as -g.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V SiluMulVec(D d, V g, V u) {
  const V limit = hn::Set(d, kSiluExpMax);
  const V neg = hn::Sub(hn::Zero(d), g);
  const V ex = AttentionExpLanes(d, hn::IfThenElse(hn::Lt(limit, neg), limit, neg));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), ex)), u);
}

// gate[i] = silu(gate[i]) * up[i] for i < n; the last partial vector through a zero-padded copy.
void SiluMulLanes(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(SiluMulVec(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, gate + i);
  }
  if (i == n) return;
  HWY_ALIGN float g[hn::MaxLanes(d)] = {}, u[hn::MaxLanes(d)] = {};
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  hn::Store(SiluMulVec(d, hn::Load(d, g), hn::Load(d, u)), d, g);
  std::copy(g, g + (n - i), gate + i);
}

// gpt-oss's clamped SwiGLU in every lane (ops.h's definition, step by step): g = min(gate + bg,
// limit), u = clamp(up + bu, -limit, limit) as std::min / std::clamp select (a NaN stays), the
// exp argument alpha * (0 - g) at most kSiluExpMax, then g / (1 + e) * (u + 1).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V SwigluOaiVec(D d, V g, V u) {
  const V limit = hn::Set(d, kSwigluOaiLimit);
  const V neg_limit = hn::Set(d, -kSwigluOaiLimit);
  g = hn::IfThenElse(hn::Lt(limit, g), limit, g);
  u = hn::IfThenElse(hn::Lt(u, neg_limit), neg_limit, hn::IfThenElse(hn::Lt(limit, u), limit, u));
  const V exp_max = hn::Set(d, kSiluExpMax);
  const V arg = hn::Mul(hn::Set(d, kSwigluOaiAlpha), hn::Sub(hn::Zero(d), g));
  const V ex = AttentionExpLanes(d, hn::IfThenElse(hn::Lt(exp_max, arg), exp_max, arg));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), ex)), hn::Add(u, hn::Set(d, 1.0f)));
}

// gate[i] + gate_bias[i] (0 when null) and up[i] + up_bias[i] through SwigluOaiVec; the last
// partial vector through zero-padded copies.
void SwigluOaiMulLanes(float* gate, const float* up, int64_t n, const float* gate_bias,
                       const float* up_bias) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto step = [&](float* gp, const float* up_p, const float* bg, const float* bu) {
    hn::Vec<decltype(d)> g = hn::LoadU(d, gp), u = hn::LoadU(d, up_p);
    if (gate_bias != nullptr) g = hn::Add(g, hn::LoadU(d, bg));
    if (up_bias != nullptr) u = hn::Add(u, hn::LoadU(d, bu));
    hn::StoreU(SwigluOaiVec(d, g, u), d, gp);
  };
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    step(gate + i, up + i, gate_bias + (gate_bias ? i : 0), up_bias + (up_bias ? i : 0));
  }
  if (i == n) return;
  HWY_ALIGN float g[hn::MaxLanes(d)] = {}, u[hn::MaxLanes(d)] = {};
  HWY_ALIGN float bg[hn::MaxLanes(d)] = {}, bu[hn::MaxLanes(d)] = {};
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  if (gate_bias != nullptr) std::copy(gate_bias + i, gate_bias + n, bg);
  if (up_bias != nullptr) std::copy(up_bias + i, up_bias + n, bu);
  step(g, u, bg, bu);
  std::copy(g, g + (n - i), gate + i);
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvserve::kernels {

HWY_EXPORT(SiluMulLanes);
HWY_EXPORT(SwigluOaiMulLanes);

void SiluMul(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMulLanes)(gate, up, n);
}

void SwigluOaiMul(float* gate, const float* up, int64_t n, const float* gate_bias,
                  const float* up_bias) {
  HWY_DYNAMIC_DISPATCH(SwigluOaiMulLanes)(gate, up, n, gate_bias, up_bias);
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
