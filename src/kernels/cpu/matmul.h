// MatMul: y = x W^T for weights stored as in GGUF (F32, F16, BF16, Q8_0, Q4_0).
//
// Numerical scheme (the determinism contract of DESIGN.md section 5):
// every y[t, r] is a fixed function of weight row r and activation row t alone. It does not
// depend on n, on t's position in the batch, on the thread count, on tiling, nor on the
// Highway target: AVX2, AVX-512 (AVX3) and AVX-512 VNNI (AVX3_DL) run hand-tiled SIMD code,
// every other target runs portable code with std::fma, and all compute the same bits
// (tests/kernels/matmul_test.cc checks every target the machine supports). The scheme uses
// 16 "virtual lanes":
//
//   F32 / F16 / BF16: weights are widened to f32 exactly. Lane j (0..15) accumulates, with
//     one fused multiply-add per column, the columns c = j, j + 16, j + 32, ... in increasing
//     order, starting from +0. Columns past `cols` (the tail of the last 16) count as zero.
//   Q8_0 / Q4_0: each activation row is first quantized to Q8 blocks of 32 (scale
//     dx = amax / 127 as f32; q = round-half-away(x * (1 / dx)) in [-127, 127]). For weight
//     block b (scale dw, f16 -> f32) the 32 int8 x int8 products are summed exactly in 8
//     groups of 4 consecutive columns: p[b][g] (int32). Lane j = 8 * (b % 2) + g accumulates
//     fma(dw * dx, float(p[b][g]), lane) over b = (j / 8), (j / 8) + 2, ... in order.
//   Then the 16 lanes are summed by a fixed tree: s8[i] = l[i] + l[i + 8] (i < 8),
//     s4[i] = s8[i] + s8[i + 4], s2[i] = s4[i] + s4[i + 2], y = s2[0] + s2[1].
//
// Example (cols = 64, F32): lane 3 = fma(w[51], x[51], fma(w[35], x[35], fma(w[19], x[19],
// fma(w[3], x[3], +0)))); s2[0] = ((l0 + l8) + (l4 + l12)) + ((l2 + l10) + (l6 + l14)),
// s2[1] the same with lanes + 1, and y = s2[0] + s2[1].
//
// Thread safety: MatMul may be called from one thread at a time per scratch object; it uses
// the pool's workers. No allocation per call.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/dtype.h"

namespace kvserve::kernels {

// A weight matrix as stored in GGUF: `rows` output features, each row RowBytes(dtype, cols)
// bytes at data + r * RowBytes(dtype, cols). `cols` is the input dimension (GGUF ne[0]).
// Does not own `data` (usually mmapped).
struct WeightMatrix {
  const void* data = nullptr;
  tensor::DType dtype = tensor::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Preallocated working memory for MatMul: the quantized activations for Q8_0/Q4_0 weights.
// Owns three buffers sized once at construction:
//   qx_: (max_tokens, max_cols) int8, activation rows quantized to blocks of 32
//   dx_: (max_tokens, max_cols / 32) f32, one scale per block
//   dxv_: (max_tokens, ceil(max_cols / 64) * 16) f32, the scales of block pairs laid out as
//     the AVX-512 VNNI kernel multiplies them ([d_2p x 8, d_2p+1 x 8]); unused elsewhere
// Not thread-safe: one MatMul at a time per scratch.
class MatMulScratch {
 public:
  MatMulScratch(int64_t max_tokens, int64_t max_cols);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_cols() const { return max_cols_; }
  int8_t* qx() { return qx_.data(); }
  float* dx() { return dx_.data(); }
  float* dxv() { return dxv_.data(); }

 private:
  int64_t max_tokens_;
  int64_t max_cols_;
  std::vector<int8_t> qx_;
  std::vector<float> dx_;
  std::vector<float> dxv_;
};

// y[t, r] = sum_c W[r, c] * x[t, c] for t < n, r < w.rows, by the scheme above.
// x: (n, w.cols) f32 row-major; y: (n, w.rows) f32 row-major; x and y must not overlap.
// note: w.dtype is one of F32, F16, BF16, Q8_0, Q4_0; cols is a multiple of 32 for Q8_0 and
// Q4_0; n <= scratch.max_tokens() and cols <= scratch.max_cols() (CHECKed).
void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool,
            MatMulScratch& scratch);

// The same function computed by portable scalar code (one thread, no SIMD). Bit-identical
// to MatMul by the contract above; used by tests as the oracle for that claim.
void MatMulPortable(const WeightMatrix& w, const float* x, int64_t n, float* y);

// Quantizes one activation row of `cols` floats (a multiple of 32) to Q8 blocks as in the
// scheme above: q[cols] int8 and d[cols / 32] f32.
void QuantizeActivationRow(const float* x, int64_t cols, int8_t* q, float* d);

// The weight types MatMul reads, and whether it reads `t`.
std::span<const tensor::DType> MatMulTypes();
bool MatMulSupports(tensor::DType t);

// Name of the SIMD target MatMul dispatches to on this machine, e.g. "AVX3" or "AVX2".
std::string_view MatMulTargetName();

}  // namespace kvserve::kernels
