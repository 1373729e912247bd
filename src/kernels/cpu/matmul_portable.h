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
  // Token-interleaved copy (nullptr when the target does not use one; see TokenGroups).
  const uint8_t* staging = nullptr;
  // The AVX3_DL target may use AMX tiles (AmxUsable() and staging prepared; other targets
  // ignore it).
  bool amx = false;
  // Where the AMX tiles of the 32-value formats run: d by groups of 16 tokens, block-major,
  // d_groups[(t / 16) * blocks * 16 + b * 16 + t % 16] = d[t * blocks + b] (blocks = cols / 32;
  // the last group's missing tokens read 0). nullptr otherwise.
  const float* d_groups = nullptr;
  // q the same way: q_groups[(t / 16) * 16 * cols + b * 512 + (t % 16) * 32 + i] =
  // q[t * cols + 32 * b + i] (the 16 tokens' codes of block b in one run; the last group's
  // missing tokens read 0). nullptr where d_groups is.
  const int8_t* q_groups = nullptr;
};

// Q8_0 batches of one token group (n <= 16) on AMX take the weights as the tiles' A operand,
// read in place, and the activations from the token groups (TokenGroups below), not from
// QuantActivations::q_groups / d_groups (kernels/cpu/matmul_x86_amx16-inl.h).
inline bool AmxQ8WeightsAsA(tensor::DType t, int64_t n) {
  return t == tensor::DType::kQ8_0 && n <= 16;
}

// Whether this CPU and OS run AMX int8 tiles (CPUID, and the kernel granted this process the
// tile data state), unless KVSERVE_MATMUL_AMX=0 or SetAmxForTest(false). Thread-safe.
bool AmxUsable();
// Tests: false makes AmxUsable() false from now on; true restores what the machine offers.
void SetAmxForTest(bool enabled);

// The token-interleaved activation copy the AVX-512 VNNI tiles read: tokens in groups of 16
// (group g = tokens 16 g .. 16 g + 15, missing tokens zero), per group three arrays:
//   q: [cols / 4][16][4] int8, token j's codes c .. c + 3 at [c / 4][j]
//   d: [cols / block][16] f32 block scales
//   sums: [cols / 16][16] int32 code sums of 16 values
// Laid out group after group: q of all groups, then d of all groups, then sums.
struct TokenGroups {
  int64_t cols = 0;
  int64_t block = 0;       // ActivationBlock of the weight format
  int64_t num_groups = 0;  // ceil(n / 16)

  static int64_t BytesFor(int64_t n, int64_t cols) {
    const int64_t groups = (n + 15) / 16;
    return groups * 16 * (cols + 4 * (cols / 32) + 4 * (cols / 16));
  }
  int64_t QOffset(int64_t g) const { return g * cols * 16; }
  int64_t DOffset(int64_t g) const { return num_groups * cols * 16 + g * (cols / block) * 64; }
  int64_t SumsOffset(int64_t g) const {
    return num_groups * cols * 16 + num_groups * (cols / block) * 64 + g * (cols / 16) * 64;
  }
};

// Fills groups [g_begin, g_end) of `staging` from the prepared activations of n tokens.
void FillTokenGroups(const QuantActivations& act, const TokenGroups& layout, int64_t n,
                     int64_t g_begin, int64_t g_end, uint8_t* staging);

// Activation block of the scheme for weight format t: 32, or 256 for the K formats.
int64_t ActivationBlock(tensor::DType t);

// y[t, r] for t < n and r in [row_begin, row_end). Float weights read x (n, cols) f32;
// integer formats read act (prepared for w.dtype; x unused). y: (n, w.rows).
void PortableRows(const WeightMatrix& w, const float* x, const QuantActivations& act, int64_t n,
                  float* y, int64_t row_begin, int64_t row_end);

// QuantizeActivationRow in portable scalar code (the non-AVX-512 targets use it).
void QuantizeActivationRowPortable(const float* x, int64_t cols, int8_t* q, float* d);

// QuantizeActivationRowQ8K in portable scalar code (the non-AVX-512 targets and the oracle).
void QuantizeActivationRowQ8KPortable(const float* x, int64_t cols, int8_t* q, float* d,
                                      int16_t* sums);

// sums[k] = sum of q[16 k .. 16 k + 15], k < cols / 16.
void SumActivationCodes(const int8_t* q, int64_t cols, int16_t* sums);

}  // namespace kvserve::kernels::internal
