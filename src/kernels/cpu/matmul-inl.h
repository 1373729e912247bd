// Per-target MatMul kernels (re-included once per Highway target by matmul.cc).
//
// AVX2 and AVX-512 get hand-tiled intrinsics that follow the 16-virtual-lane scheme of
// matmul.h exactly: an AVX-512 register holds all 16 virtual lanes, an AVX2 pair of
// registers holds lanes 0-7 and 8-15. Every other target calls the portable code.
//
// Tiling: a tile is R weight rows x T tokens; each (row, token) pair owns its accumulator(s),
// so the tile shape never changes the per-element order of operations.
#if defined(KVSERVE_KERNELS_CPU_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSERVE_KERNELS_CPU_MATMUL_INL_H_
#undef KVSERVE_KERNELS_CPU_MATMUL_INL_H_
#else
#define KVSERVE_KERNELS_CPU_MATMUL_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "hwy/highway.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_portable.h"
#include "tensor/quant_ints.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kvserve::kernels::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
#define KVSERVE_MATMUL_SIMD 1
#include "kernels/cpu/matmul_x86-inl.h"
#else
#define KVSERVE_MATMUL_SIMD 0
#endif

// Computes y[t, r] for all t < n and r in [row_begin, row_end) (see PortableRows).
void MatMulRows(const WeightMatrix& w, const float* x, const internal::QuantActivations& act,
                int64_t n, float* y, int64_t row_begin, int64_t row_end) {
#if KVSERVE_MATMUL_SIMD
  X86Rows(w, x, act, n, y, row_begin, row_end);
#else
  internal::PortableRows(w, x, act, n, y, row_begin, row_end);
#endif
}
#undef KVSERVE_MATMUL_SIMD

// QuantizeActivationRow (matmul.h) for this target.
void QuantizeRow(const float* x, int64_t cols, int8_t* q, float* d) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  int64_t b = 0;
  for (; b + 16 <= cols / 32; b += 16) X86Quantize16Blocks(x + 32 * b, q + 32 * b, d + b);
  for (; b < cols / 32; ++b) X86QuantizeBlock(x + 32 * b, q + 32 * b, d + b);
#else
  internal::QuantizeActivationRowPortable(x, cols, q, d);
#endif
}

// QuantizeActivationRowQ8K (matmul.h) for this target.
void QuantizeRowQ8K(const float* x, int64_t cols, int8_t* q, float* d, int16_t* sums) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  for (int64_t b = 0; b < cols / 256; ++b) {
    X86QuantizeBlockQ8K(x + 256 * b, q + 256 * b, d + b, sums + 16 * b);
  }
#else
  internal::QuantizeActivationRowQ8KPortable(x, cols, q, d, sums);
#endif
}

#if HWY_TARGET == HWY_AVX3_DL
// out[m] = dword m of each of the 16 rows (row j in lane j): unpacks within 128-bit lanes, then
// two rounds of 128-bit lane shuffles.
HWY_INLINE void Transpose16x16(const __m512i (&r)[16], __m512i (&out)[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // u[4 k + e], lane L: rows 4 k .. 4 k + 3 of column 4 L + e
    u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i a = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xDD);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xDD);
    out[e] = _mm512_shuffle_i32x4(a, c, 0x88);
    out[8 + e] = _mm512_shuffle_i32x4(a, c, 0xDD);
    out[4 + e] = _mm512_shuffle_i32x4(b, d, 0x88);
    out[12 + e] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}
#endif

// internal::FillTokenGroups (the same bytes) for this target: on AVX3_DL, the codes by 16 x 16
// dword transposes (64 codes of each of 16 tokens at a time) and the code sums the same way.
void FillGroups(const internal::QuantActivations& act, const internal::TokenGroups& layout,
                int64_t n, int64_t g_begin, int64_t g_end, uint8_t* staging) {
#if HWY_TARGET == HWY_AVX3_DL
  const int64_t cols = layout.cols, blocks = cols / layout.block;
  if (cols % 256 != 0) return internal::FillTokenGroups(act, layout, n, g_begin, g_end, staging);
  for (int64_t g = g_begin; g < g_end; ++g) {
    auto* q = staging + layout.QOffset(g);
    auto* d = reinterpret_cast<float*>(staging + layout.DOffset(g));
    auto* sums = reinterpret_cast<int32_t*>(staging + layout.SumsOffset(g));
    const int valid = static_cast<int>(std::clamp<int64_t>(n - 16 * g, 0, 16));
    __m512i r[16], out[16];
    for (int64_t c = 0; c < cols / 64; ++c) {  // codes 64 c .. of each token
      for (int j = 0; j < 16; ++j) {
        r[j] = j < valid ? _mm512_loadu_si512(act.q + (16 * g + j) * cols + 64 * c)
                         : _mm512_setzero_si512();
      }
      Transpose16x16(r, out);
      for (int m = 0; m < 16; ++m) _mm512_storeu_si512(q + 1024 * c + 64 * m, out[m]);
    }
    for (int64_t k = 0; k < cols / 16; k += 16) {  // the sums of codes 16 k ..
      for (int j = 0; j < 16; ++j) {
        r[j] = j < valid ? _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                               act.sums + (16 * g + j) * (cols / 16) + k)))
                         : _mm512_setzero_si512();
      }
      Transpose16x16(r, out);
      for (int m = 0; m < 16; ++m) _mm512_storeu_si512(sums + 16 * (k + m), out[m]);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      for (int j = 0; j < 16; ++j) d[b * 16 + j] = j < valid ? act.d[(16 * g + j) * blocks + b] : 0.0f;
    }
  }
#else
  internal::FillTokenGroups(act, layout, n, g_begin, g_end, staging);
#endif
}

// Batches of weight format t with at least this many tokens use the token-interleaved tiles
// (and MatMul prepares internal::TokenGroups for them); 0: this target has none. Fewer tokens
// of the formats with gemv or lanes rows take those (they read the plain activation rows).
int64_t TokenGroupMinTokens(tensor::DType t) {
#if HWY_TARGET == HWY_AVX3_DL
  return std::max<int64_t>({kTokenGroupMinTokens, GemvMaxTokens(t) + 1, LanesMaxTokens(t) + 1});
#else
  (void)t;
  return 0;
#endif
}

const char* MatMulTarget() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace kvserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
