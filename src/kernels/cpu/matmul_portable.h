// Portable scalar implementation of the MatMul scheme (kernels/cpu/matmul.h), shared by the
// non-SIMD dispatch targets and by tests as the bit-exact oracle. Internal to kernels/.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace kvserve::kernels::internal {

// Number of virtual accumulator lanes of the scheme; the SIMD code mirrors these.
inline constexpr int kVirtualLanes = 16;

// Exact f16 / bf16 -> f32 widening (bit manipulation, no FPU rounding).
float HalfToFloat(uint16_t h);
float BF16ToFloat(uint16_t b);

// The fixed 16 -> 1 summation tree of the scheme.
float ReduceVirtualLanes(const float (&lanes)[kVirtualLanes]);

// y[t, r] for t < n and r in [row_begin, row_end). x: (n, cols) f32. For Q8_0/Q4_0 weights
// qx: (n, cols) int8 and dx: (n, cols / 32) f32 hold the quantized activations (x unused);
// otherwise qx and dx are unused. y: (n, w.rows).
void PortableRows(const WeightMatrix& w, const float* x, const int8_t* qx, const float* dx,
                  int64_t n, float* y, int64_t row_begin, int64_t row_end);

// QuantizeActivationRow in portable scalar code (the non-AVX-512 targets use it).
void QuantizeActivationRowPortable(const float* x, int64_t cols, int8_t* q, float* d);

}  // namespace kvserve::kernels::internal
