// Per-target vector forms of AttentionExp (attention_exp.h) and of a once-rounded fma, shared
// by the attention kernels (attention-inl.h) and SiLU (silu.cc): one definition of the steps,
// so every lane of every target computes AttentionExp's bits. Include after hwy/highway.h in a
// file that is re-included per Highway target (foreach_target.h).
//
// ExactFma(d, a, b, c): fma(a, b, c) rounded once per lane; targets without hardware FMA
// evaluate std::fma lane by lane (slow, exact).
// AttentionExpLanes(d, x): AttentionExp(x) in every lane (NaN stays NaN; x < -87 gives 0).
#if defined(KVSERVE_KERNELS_CPU_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_EXP_INL_H_
#undef KVSERVE_KERNELS_CPU_EXP_INL_H_
#else
#define KVSERVE_KERNELS_CPU_EXP_INL_H_
#endif

#include <cmath>
#include <cstddef>

#include "hwy/highway.h"
#include "kernels/cpu/attention_exp.h"

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {

template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE V ExactFma(D d, V a, V b, V c) {
  namespace hn = hwy::HWY_NAMESPACE;
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulAdd(a, b, c);
#else
  constexpr size_t kMax = hn::MaxLanes(D());
  HWY_ALIGN float x[kMax], y[kMax], z[kMax];
  hn::Store(a, d, x);
  hn::Store(b, d, y);
  hn::Store(c, d, z);
  for (size_t i = 0; i < hn::Lanes(d); ++i) x[i] = std::fma(x[i], y[i], z[i]);
  return hn::Load(d, x);
#endif
}

template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE V AttentionExpLanes(D d, V x) {
  namespace hn = hwy::HWY_NAMESPACE;
  namespace e = attention_exp;
  const hn::RebindToSigned<D> di;
  const V round = hn::Set(d, e::kRound);
  const V n = hn::Sub(hn::Add(hn::Mul(x, hn::Set(d, e::kLog2e)), round), round);
  V r = ExactFma(d, n, hn::Set(d, -e::kC1), x);
  r = ExactFma(d, n, hn::Set(d, -e::kC2), r);
  V p = ExactFma(d, hn::Set(d, e::kP0), r, hn::Set(d, e::kP1));
  p = ExactFma(d, p, r, hn::Set(d, e::kP2));
  p = ExactFma(d, p, r, hn::Set(d, e::kP3));
  p = ExactFma(d, p, r, hn::Set(d, e::kP4));
  p = ExactFma(d, p, r, hn::Set(d, e::kP5));
  const V y = hn::Add(ExactFma(d, p, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  const V result = hn::Mul(y, hn::BitCast(d, bits));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, e::kMin)), result);
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
