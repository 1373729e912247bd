// SiluMul (ops.h) per Highway target: AttentionExpLanes (exp-inl.h, the attention kernels'
// exp) on every lane, then the scalar definition's divide and multiply, so every target gives
// the bits of g / (1 + AttentionExp(min(-g, 88))) * u.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/silu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/exp-inl.h"

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

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/ops.h"

namespace kvserve::kernels {

HWY_EXPORT(SiluMulLanes);

void SiluMul(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMulLanes)(gate, up, n);
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
