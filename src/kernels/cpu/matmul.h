// MatMul: y = x W^T for weights stored as in GGUF: F32, F16, BF16 and the integer block formats
// of tensor/quant_ints.h (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS, MXFP4).
//
// Numerical scheme (the determinism contract of DESIGN.md section 5):
// every y[t, r] is a fixed function of weight row r and activation row t alone. It does not
// depend on n, on t's position in the batch, on the thread count, on tiling, nor on the SIMD
// target: AVX2, AVX-512 (AVX3), AVX-512 VNNI (AVX3_DL) and AMX run hand-written SIMD code,
// every other target runs portable code with std::fma, and all compute the same bits
// (tests/kernels/matmul_test.cc checks every target the machine supports).
//
//   F32 / F16 / BF16: weights are widened to f32 exactly. 16 "virtual lanes": lane j (0..15)
//     accumulates, with one fused multiply-add per column, the columns c = j, j + 16, ... in
//     increasing order, starting from +0; columns past `cols` count as zero. The 16 lanes are
//     summed by a fixed tree: s8[i] = l[i] + l[i + 8] (i < 8), s4[i] = s8[i] + s8[i + 4],
//     s2[i] = s4[i] + s4[i + 2], y = s2[0] + s2[1].
//     Example (cols = 64): lane 3 = fma(w[51], x[51], fma(w[35], x[35], fma(w[19], x[19],
//     fma(w[3], x[3], +0)))); s2[0] = ((l0 + l8) + (l4 + l12)) + ((l2 + l10) + (l6 + l14)).
//
//   Integer formats: the activation row is quantized first, to blocks aligned with the
//     weight blocks:
//       32-value formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): blocks of 32 with scale
//         dx = amax / 127 (f32) and a = round-half-away(x * (1 / dx)) in [-127, 127];
//       K formats (Q2_K..Q6_K, IQ4_XS): ggml's Q8_K, blocks of 256: max = the value of largest
//         magnitude (first on ties), iscale = -127 / max, a = min(127, round-half-even(iscale
//         x)) and dx = 1 / iscale (an all-zero block: dx = 0, a = 0).
//       NaN activations become a = 0.
//     Weight block b decodes to integers (tensor/quant_ints.h): x_i = (d s_j) q_i [+ dmin m_j]
//     for sub-block j = i / sub_len. Two exact int32 sums per block and activation row:
//       I_b = sum_j s_j sum_{i in j} q_i a_i        M_b = sum_j m_j sum_{i in j} a_i
//     (M_b only for the formats with a min term: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K). Then one f32
//     accumulator per (t, r), starting from +0, over the blocks in increasing order:
//       acc = fma(d_b * dx_b, float(I_b), acc);  then, with a min term,
//       acc = fma(dmin_b * dx_b, float(M_b), acc)
//     with d_b * dx_b and dmin_b * dx_b rounded f32 products and float() rounding to nearest
//     even. y = acc. Because I_b and M_b are exact integers, every target (row tiles with
//     per-group lanes, token-interleaved VNNI tiles, AMX tiles) may form them in any order.
//     Example (Q4_K, cols = 512): I_0 = sum over 8 sub-blocks of 32 of sc_j * (32 products),
//     M_0 = sum_j m_j * (sum of the 32 activations); y = fma(dmin_1 dx_1, M_1, fma(d_1 dx_1, I_1,
//     fma(dmin_0 dx_0, M_0, fma(d_0 dx_0, I_0, +0)))), with dmin = -(the file's f16 dmin).
//
// On AVX-512 VNNI, calls of up to 12 tokens (8 for Q8_0) with Q8_0, Q4_K, Q5_K or Q6_K weights
// read the weight blocks in place, once for all tokens (kernels/cpu/matmul_x86_gemv-inl.h: decode
// steps, and a mixture of experts' experts in a batched step); on a CPU without AMX, calls of 13
// to 64 tokens with Q4_K or Q6_K weights transpose each block of 16 rows once into one row per
// lane and run the tokens over it (kernels/cpu/matmul_x86_lanes-inl.h: a batched decode step's
// dense matrices), and calls of 9 to 64 tokens with Q8_0 weights broadcast each block's codes
// straight from the weights over the token-interleaved activations, with no decoding pass
// (kernels/cpu/matmul_x86_q8rows-inl.h: gpt-oss's dense matrices).
// Batches (n >= 16; Q4_K and Q6_K from 10 tokens, ahead of those VNNI rows) of integer
// formats on a CPU with AMX int8 (Sapphire Rapids and later; Linux grants the tile state per
// process) run AMX tiles (kernels/cpu/matmul_x86_amx-inl.h; up to 16 tokens of Q4_K form I_b
// from per-sub-block tiles, the scales applied in exact f32 sums: matmul_x86_amx16k-inl.h; of
// Q6_K from the bare 6-bit values and offset tiles: matmul_x86_amx16q6-inl.h); the
// environment variable KVSERVE_MATMUL_AMX=0 turns them off (for comparisons), and
// MatMulTargetName() says "AVX3_DL+AMX" when they are on.
//
// Thread safety: MatMul may be called from one thread at a time per scratch object; it uses
// the pool's workers. No allocation per call once each pool thread has run one call of the
// largest shape (kernels keep a per-thread decode buffer).
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

// Preallocated working memory for MatMul: the quantized activations for integer-format
// weights. Owns buffers sized once at construction (block = 32 or 256 by weight format):
//   qx_: (max_tokens, max_cols) int8, activation rows quantized as in the scheme above
//   dx_: (max_tokens, max_cols / 32) f32, one scale per block (the first cols / block used)
//   sums_: (max_tokens, max_cols / 16) int16, the sums of the codes of each 16 consecutive
//     activations (ggml's Q8_K bsums)
//   staging_: the token-interleaved copy of the three that the AVX-512 VNNI tiles read
//     (internal::TokenGroups in matmul_portable.h; max_tokens rounded up to 16)
//   qx_groups_, dx_groups_: qx_ and dx_ of block 32 by token groups for the AMX tiles
//     (internal::QuantActivations::q_groups, d_groups; max_tokens rounded up to 16)
// Not thread-safe: one MatMul at a time per scratch.
class MatMulScratch {
 public:
  MatMulScratch(int64_t max_tokens, int64_t max_cols);

  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_cols() const { return max_cols_; }
  int8_t* qx() { return qx_.data(); }
  float* dx() { return dx_.data(); }
  int16_t* sums() { return sums_.data(); }
  uint8_t* staging() { return staging_.data(); }
  int8_t* qx_groups() { return qx_groups_.data(); }
  float* dx_groups() { return dx_groups_.data(); }

 private:
  int64_t max_tokens_;
  int64_t max_cols_;
  std::vector<int8_t> qx_;
  std::vector<float> dx_;
  std::vector<int16_t> sums_;
  std::vector<uint8_t> staging_;
  std::vector<int8_t> qx_groups_;
  std::vector<float> dx_groups_;
};

// y[t, r] = sum_c W[r, c] * x[t, c] for t < n, r < w.rows, by the scheme above.
// x: (n, w.cols) f32 row-major; y: (n, w.rows) f32 row-major; x and y must not overlap.
// note: MatMulSupports(w.dtype); cols is a whole number of the format's blocks;
// n <= scratch.max_tokens() and cols <= scratch.max_cols() (CHECKed).
// then: the weight bytes the caller reads next (the next expert matrix), or null; a hint with
// no effect on y: a one-thread pool's few-token rows prefetch its start during w's last rows.
void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool,
            MatMulScratch& scratch, const void* then = nullptr);

// One product of MatMulMany: y = x W^T. y: (n, w->rows) f32; does not own either.
struct MatMulOutput {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
};

// MatMul(*o.w, x, n, o.y) for every o in `outputs`, in order (the same bits), with x quantized
// once for consecutive weights of the same columns and activation block (q, k and v of one
// input; gate and up). The outputs must not overlap x. then: as MatMul's, after the last output
// (each output's rows prefetch the next output's weights).
void MatMulMany(std::span<const MatMulOutput> outputs, const float* x, int64_t n,
                ThreadPool& pool, MatMulScratch& scratch, const void* then = nullptr);

// Activation rows already quantized as a matmul of some integer format quantizes them
// (QuantizeRowsForMatMul): row t's codes at q + t * cols, its block scales at
// d + t * (cols / block), its codes summed per 16 at sums + t * (cols / 16). Rows of a batch
// quantized once and gathered (a mixture of experts' experts) give the same y as the gathered
// float rows: a row's quantization depends on that row alone.
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* sums = nullptr;
  int64_t cols = 0;
  int64_t block = 0;  // MatMulActivationBlock of the formats it was made for
};

// The activation block (32 or 256) a matmul of an integer format quantizes x to; 0 for the
// float formats, which read x as it is.
int64_t MatMulActivationBlock(tensor::DType dtype);

// Quantizes n rows of x (cols floats each) as MatMul of `dtype` (an integer format) does:
// q[n * cols], d[n * cols / block], sums[n * cols / 16].
void QuantizeRowsForMatMul(tensor::DType dtype, const float* x, int64_t n, int64_t cols,
                           int8_t* q, float* d, int16_t* sums);

// Whether MatMulManyQuantized can multiply w by n rows quantized for its activation block: every
// path but the AMX tiles of the 32-value formats, which quantize into their own layout.
bool MatMulTakesQuantizedRows(const WeightMatrix& w, int64_t n);

// MatMulMany from rows quantized once (QuantizeRowsForMatMul): the same y as MatMulMany of the
// float rows. Every output must take them (MatMulTakesQuantizedRows), with x.cols columns and
// activation block x.block (CHECKed).
void MatMulManyQuantized(std::span<const MatMulOutput> outputs, const QuantizedRows& x, int64_t n,
                         ThreadPool& pool, MatMulScratch& scratch, const void* then = nullptr);

namespace internal {
// Where the few-token rows of a one-thread matmul look ahead past the matrix (MatMul's `then`):
// the matrix's end and the bytes read next; then == nullptr: the memory past the matrix. Set by
// the matmul entry around its rows, per thread.
struct GemvLookahead {
  const void* end = nullptr;
  const void* then = nullptr;
};
extern thread_local GemvLookahead gemv_lookahead;
}  // namespace internal

// The same function computed by portable scalar code (one thread, no SIMD). Bit-identical
// to MatMul by the contract above; used by tests as the oracle for that claim.
void MatMulPortable(const WeightMatrix& w, const float* x, int64_t n, float* y);

// Quantizes one activation row of `cols` floats (a multiple of 32) to Q8 blocks of 32 as in the
// scheme above: q[cols] int8 and d[cols / 32] f32.
void QuantizeActivationRow(const float* x, int64_t cols, int8_t* q, float* d);

// Quantizes one activation row of `cols` floats (a multiple of 256) to ggml's Q8_K as in the
// scheme above: q[cols] int8, d[cols / 256] f32 and sums[cols / 16] (codes summed per 16).
void QuantizeActivationRowQ8K(const float* x, int64_t cols, int8_t* q, float* d, int16_t* sums);

// The weight types MatMul reads, and whether it reads `t`.
std::span<const tensor::DType> MatMulTypes();
bool MatMulSupports(tensor::DType t);

// Name of the SIMD target MatMul dispatches to on this machine, e.g. "AVX3" or "AVX2".
std::string_view MatMulTargetName();

}  // namespace kvserve::kernels
