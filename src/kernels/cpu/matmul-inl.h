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

// Batches of weight format t with at least this many tokens use the token-interleaved tiles
// (and MatMul prepares internal::TokenGroups for them); 0: this target has none. Fewer tokens
// of the formats with gemv tiles take those (they read the plain activation rows).
int64_t TokenGroupMinTokens(tensor::DType t) {
#if HWY_TARGET == HWY_AVX3_DL
  return std::max<int64_t>(kTokenGroupMinTokens, GemvMaxTokens(t) + 1);
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
