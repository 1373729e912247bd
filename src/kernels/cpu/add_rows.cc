// AddInPlace and AddScaledRow (ops.h) per Highway target: one add (and one multiply) per value,
// in the scalar definition's order, so every target gives the scalar bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/add_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AddInPlaceLanes(float* y, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

// The four forms of AddScaledRow, chosen once per row.
template <bool kBias, bool kAccumulate>
void AddScaledLanes(float* y, const float* x, const float* bias, float w, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vw = hn::Set(d, w);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto v = hn::LoadU(d, x + i);
    if constexpr (kBias) v = hn::Add(v, hn::LoadU(d, bias + i));
    v = hn::Mul(v, vw);
    if constexpr (kAccumulate) v = hn::Add(hn::LoadU(d, y + i), v);
    hn::StoreU(v, d, y + i);
  }
  for (; i < n; ++i) {
    const float v = (kBias ? x[i] + bias[i] : x[i]) * w;
    y[i] = kAccumulate ? y[i] + v : v;
  }
}

void AddScaledRowLanes(float* y, const float* x, const float* bias, float w, int64_t n,
                       bool accumulate) {
  if (bias != nullptr) {
    return accumulate ? AddScaledLanes<true, true>(y, x, bias, w, n)
                      : AddScaledLanes<true, false>(y, x, bias, w, n);
  }
  return accumulate ? AddScaledLanes<false, true>(y, x, bias, w, n)
                    : AddScaledLanes<false, false>(y, x, bias, w, n);
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/ops.h"

namespace kvserve::kernels {

HWY_EXPORT(AddInPlaceLanes);
HWY_EXPORT(AddScaledRowLanes);

void AddInPlace(float* y, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddInPlaceLanes)(y, x, n);
}

void AddScaledRow(float* y, const float* x, const float* bias, float w, int64_t n,
                  bool accumulate) {
  HWY_DYNAMIC_DISPATCH(AddScaledRowLanes)(y, x, bias, w, n, accumulate);
}

}  // namespace kvserve::kernels
#endif  // HWY_ONCE
