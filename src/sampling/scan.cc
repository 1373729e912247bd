#include "sampling/scan.h"

#include <algorithm>
#include <functional>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvserve::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The largest value over [begin, n) passing `keep` with `>` (so NaN never wins), folded into
// `best`.
template <bool kFiniteOnly>
float MaxFrom(const float* v, size_t begin, size_t n, float best) {
  for (size_t i = begin; i < n; ++i) {
    const bool keep = !kFiniteOnly || v[i] < kInf;
    best = keep && v[i] > best ? v[i] : best;
  }
  return best;
}

// The first index in [begin, n) holding `value`; n when none does.
size_t FirstEqual(const float* v, size_t begin, size_t n, float value) {
  for (size_t i = begin; i < n; ++i) {
    if (v[i] == value) return i;
  }
  return n;
}

// Divides [begin, n) (kDivide) and appends the finite maxima of its runs of kRun (the last may
// be shorter).
constexpr size_t kRun = 64;
template <bool kDivide>
void DivideRuns(const float* in, size_t begin, size_t n, float divisor, float* out,
                std::vector<float>& maxima) {
  if constexpr (kDivide) {
    for (size_t i = begin; i < n; ++i) out[i] = in[i] / divisor;
  }
  const float* v = kDivide ? out : in;
  for (size_t i = begin; i < n; i += kRun) {
    maxima.push_back(MaxFrom<true>(v, i, std::min(n, i + kRun), -kInf));
  }
}

void AtLeast(const float* v, size_t begin, size_t n, float floor, std::vector<int32_t>& out) {
  for (size_t i = begin; i < n; ++i) {
    if (v[i] >= floor && v[i] > -kInf && v[i] < kInf) out.push_back(static_cast<int32_t>(i));
  }
}

#if defined(__x86_64__)
// (GCC 12 warns about the _mm512_undefined_* inside its intrinsics in a function with a target
// attribute; nothing here is uninitialized.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512: MAXPS(x, acc) is `x > acc ? x : acc` lane by lane, the scalar loop's select (a NaN
// x fails `>`, +0 vs -0 keeps acc); the lanes are then folded with the same select, and the
// tail by the scalar loop. The order of the maxima does not matter: `>` picks one of the
// equal candidates, and they are equal as floats (-0 == +0), which is all callers compare.
template <bool kFiniteOnly>
__attribute__((target("avx512f"))) float MaxAvx512(const float* v, size_t n) {
  __m512 acc = _mm512_set1_ps(-kInf);
  const __m512 inf = _mm512_set1_ps(kInf);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    if constexpr (kFiniteOnly) {
      acc = _mm512_mask_max_ps(acc, _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ), x, acc);
    } else {
      acc = _mm512_max_ps(x, acc);
    }
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float best = -kInf;
  for (float l : lanes) best = l > best ? l : best;
  return MaxFrom<kFiniteOnly>(v, i, n, best);
}

__attribute__((target("avx512f"))) size_t FirstEqualAvx512(const float* v, size_t n,
                                                            float value) {
  const __m512 target = _mm512_set1_ps(value);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + i), target, _CMP_EQ_OQ);
    if (hit != 0) return i + static_cast<size_t>(__builtin_ctz(hit));
  }
  return FirstEqual(v, i, n, value);
}

// Blocks of 32 ids compared at once (unsigned: ids - first <= last - first); the hits of a block
// are appended lowest first.
__attribute__((target("avx512f,avx512bw"))) size_t IndicesInRangeAvx512(
    const uint16_t* ids, size_t n, uint16_t first, uint16_t last, std::vector<int32_t>& out) {
  const __m512i lo = _mm512_set1_epi16(static_cast<int16_t>(first));
  const __m512i span = _mm512_set1_epi16(static_cast<int16_t>(last - first));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i d = _mm512_sub_epi16(_mm512_loadu_si512(ids + i), lo);
    for (__mmask32 hit = _mm512_cmple_epu16_mask(d, span); hit != 0; hit &= hit - 1) {
      out.push_back(static_cast<int32_t>(i + static_cast<size_t>(__builtin_ctz(hit))));
    }
  }
  return i;
}

// Per 1,024 values, their quotients (kDivide) and the 16 lanes' finite maxima over its 64
// vectors (lane l: values l, l + 16, ...): 16 groups. Returns where the whole chunks end.
template <bool kDivide>
__attribute__((target("avx512f"))) size_t DivideLaneMaximaAvx512(const float* in, size_t n,
                                                                  float divisor, float* out,
                                                                  std::vector<float>& maxima) {
  constexpr size_t kChunk = 1024;
  const __m512 inf = _mm512_set1_ps(kInf), d = _mm512_set1_ps(divisor);
  size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    __m512 acc = _mm512_set1_ps(-kInf);
    for (size_t j = i; j < i + kChunk; j += 16) {
      __m512 x = _mm512_loadu_ps(in + j);
      if constexpr (kDivide) {
        x = _mm512_div_ps(x, d);
        _mm512_storeu_ps(out + j, x);
      }
      acc = _mm512_mask_max_ps(acc, _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ), x, acc);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc);
    maxima.insert(maxima.end(), lanes, lanes + 16);
  }
  return i;
}

__attribute__((target("avx512f"))) size_t AtLeastAvx512(const float* v, size_t n, float floor,
                                                         std::vector<int32_t>& out) {
  const __m512 lo = _mm512_set1_ps(floor), inf = _mm512_set1_ps(kInf),
               neg_inf = _mm512_set1_ps(-kInf);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    __mmask16 hit = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ) &
                    _mm512_cmp_ps_mask(x, neg_inf, _CMP_GT_OQ);
    for (; hit != 0; hit &= hit - 1) {
      out.push_back(static_cast<int32_t>(i + static_cast<size_t>(__builtin_ctz(hit))));
    }
  }
  return i;
}

#pragma GCC diagnostic pop

bool HasAvx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

bool HasAvx512Bw() {
  static const bool bw = __builtin_cpu_supports("avx512bw");
  return bw;
}
#endif

// FirstEqual over all of `values`, 16 at a time where the CPU allows.
size_t FirstEqualOf(std::span<const float> values, float value) {
#if defined(__x86_64__)
  if (HasAvx512()) return FirstEqualAvx512(values.data(), values.size(), value);
#endif
  return FirstEqual(values.data(), 0, values.size(), value);
}

template <bool kFiniteOnly>
float Max(std::span<const float> values) {
#if defined(__x86_64__)
  if (HasAvx512()) return MaxAvx512<kFiniteOnly>(values.data(), values.size());
#endif
  return MaxFrom<kFiniteOnly>(values.data(), 0, values.size(), -kInf);
}

template <bool kDivide>
void GroupMaximaOf(std::span<const float> in, float divisor, float* out,
                   std::vector<float>& maxima) {
  maxima.clear();
  size_t i = 0;
#if defined(__x86_64__)
  if (HasAvx512()) i = DivideLaneMaximaAvx512<kDivide>(in.data(), in.size(), divisor, out, maxima);
#endif
  DivideRuns<kDivide>(in.data(), i, in.size(), divisor, out, maxima);
}

}  // namespace

void DivideAndGroupMaxima(std::span<const float> in, float divisor, float* out,
                          std::vector<float>& maxima) {
  GroupMaximaOf<true>(in, divisor, out, maxima);
}

void GroupMaxima(std::span<const float> values, std::vector<float>& maxima) {
  GroupMaximaOf<false>(values, 1.0f, nullptr, maxima);
}

float MaxNotNaN(std::span<const float> values) { return Max<false>(values); }

float KthLargestOf(std::vector<float>& maxima, int32_t k) {
  if (k < 1 || static_cast<size_t>(k) > maxima.size()) return -kInf;
  std::nth_element(maxima.begin(), maxima.begin() + (k - 1), maxima.end(), std::greater<float>());
  return maxima[k - 1];  // -inf when fewer than k groups hold a finite value
}

void IndicesAtLeast(std::span<const float> logits, float floor, std::vector<int32_t>& out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasAvx512()) i = AtLeastAvx512(logits.data(), logits.size(), floor, out);
#endif
  AtLeast(logits.data(), i, logits.size(), floor, out);
}

int32_t Argmax(std::span<const float> logits) {
  const float best = Max<false>(logits);
  if (best == -kInf) return 0;
  const size_t at = FirstEqualOf(logits, best);
  return at < logits.size() ? static_cast<int32_t>(at) : 0;
}

float MaxFinite(std::span<const float> logits) { return Max<true>(logits); }

void IndicesInRange(std::span<const uint16_t> ids, uint16_t first, uint16_t last,
                    std::vector<int32_t>& out) {
  size_t i = 0;
#if defined(__x86_64__)
  if (HasAvx512Bw()) i = IndicesInRangeAvx512(ids.data(), ids.size(), first, last, out);
#endif
  for (; i < ids.size(); ++i) {
    if (ids[i] >= first && ids[i] <= last) out.push_back(static_cast<int32_t>(i));
  }
}

}  // namespace kvserve::sampling
