// AttentionExp: the exp of the attention numerics contract (kernels/cpu/attention.h), defined
// as a fixed sequence of float operations so that every SIMD target (and this scalar form)
// computes the same bits. The kernels evaluate the same steps lane by lane (attention-inl.h).
//
//   x < -87 (or -inf): 0            (exp(-87) = 1.6e-38: below any softmax term that matters)
//   n = (x * log2(e) + 1.5 * 2^23) - 1.5 * 2^23     (x / ln 2 rounded to nearest even)
//   r = fma(n, -C1, x); r = fma(n, -C2, r)           (Cody-Waite: C1 + C2 = ln 2)
//   y = Cephes expf polynomial in r by fma (Horner), y = fma(P(r), r * r, r) + 1
//   exp(x) = y * 2^n                                  (2^n built from its exponent bits)
// Accuracy: within 2 ulp of exp over [-87, 88]; exp(0) = 1 exactly; only x <= 0 is needed.
// Example: AttentionExp(0) = 1, AttentionExp(-inf) = 0, AttentionExp(-1) = 0.36787945.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kvserve::kernels {

namespace attention_exp {
inline constexpr float kMin = -87.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
inline constexpr float kC1 = 0.693359375f;    // ln 2, high part (exact times any |n| <= 2^15)
inline constexpr float kC2 = -2.12194440e-4f;  // ln 2 - kC1
inline constexpr float kP0 = 1.9875691500e-4f;
inline constexpr float kP1 = 1.3981999507e-3f;
inline constexpr float kP2 = 8.3334519073e-3f;
inline constexpr float kP3 = 4.1665795894e-2f;
inline constexpr float kP4 = 1.6666665459e-1f;
inline constexpr float kP5 = 5.0000001201e-1f;
}  // namespace attention_exp

inline float AttentionExp(float x) {
  namespace e = attention_exp;
  if (x != x) return x;
  if (x < e::kMin) return 0.0f;
  const float n = (x * e::kLog2e + e::kRound) - e::kRound;
  float r = std::fma(n, -e::kC1, x);
  r = std::fma(n, -e::kC2, r);
  float p = std::fma(e::kP0, r, e::kP1);
  p = std::fma(p, r, e::kP2);
  p = std::fma(p, r, e::kP3);
  p = std::fma(p, r, e::kP4);
  p = std::fma(p, r, e::kP5);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n) + 127;
  return y * std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
}

}  // namespace kvserve::kernels
