// Portable scalar implementation of the MatMul scheme (kernels/cpu/matmul.h), shared by the
// non-SIMD dispatch targets and by tests as the bit-exact oracle; the activation quantizers
// every target shares. Internal to kernels/.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace kvserve::kernels::internal {

// Number of virtual accumulator lanes of the float scheme; the SIMD code mirrors these.
inline constexpr int kVirtualLanes = 16;

// Exact f16 / bf16 -> f32 widening (bit manipulation, no FPU rounding).
float HalfToFloat(uint16_t h);
float BF16ToFloat(uint16_t b);

// The fixed 16 -> 1 summation tree of the scheme.
float ReduceVirtualLanes(const float (&lanes)[kVirtualLanes]);

// Quantized activation rows for integer-format weights, as MatMul prepares them (shapes in
// MatMulScratch): q (n, cols) int8; d (n, cols / block) f32; sums (n, cols / 16) int16 with
// sums[t][k] = sum of q[t][16 k .. 16 k + 15].
struct QuantActivations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* sums = nullptr;
};

// Activation block of the scheme for weight format t: 32, or 256 for the K formats.
int64_t ActivationBlock(tensor::DType t);

// y[t, r] for t < n and r in [row_begin, row_end). Float weights read x (n, cols) f32;
// integer formats read act (prepared for w.dtype; x unused). y: (n, w.rows).
void PortableRows(const WeightMatrix& w, const float* x, const QuantActivations& act, int64_t n,
                  float* y, int64_t row_begin, int64_t row_end);

// QuantizeActivationRow in portable scalar code (the non-AVX-512 targets use it).
void QuantizeActivationRowPortable(const float* x, int64_t cols, int8_t* q, float* d);

// sums[k] = sum of q[16 k .. 16 k + 15], k < cols / 16.
void SumActivationCodes(const int8_t* q, int64_t cols, int16_t* sums);

}  // namespace kvserve::kernels::internal
