// Q4_1, Q5_0, Q5_1 quantizers: ggml's quantize_row_{q4_1,q5_0,q5_1}_ref (what llama.cpp's
// quantize writes without an imatrix). Layouts in tensor/quant_ints.h.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace kvserve::tensor::internal {
namespace {

// min and max of a block as ggml finds them (strict compares from +-FLT_MAX; NaN is skipped).
void MinMax(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// The value of largest magnitude with its sign (the first one on ties), as ggml picks it.
float SignedAbsMax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Packs 32 five-bit codes: low nibbles in nibble order at qs, fifth bits into qh (bit j).
void Pack5(const int* codes, uint8_t* qh_out, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0x0F) | (codes[j + 16] & 0x0F) << 4);
    qh |= static_cast<uint32_t>((codes[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((codes[j + 16] & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}

}  // namespace

void QuantizeQ4_1(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 20) {
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreF16(y, d);
    StoreF16(y + 2, min);
    for (int j = 0; j < 16; ++j) {
      // MIN(15, (int8_t)(v + 0.5f)) as ggml; v is in [0, 15] for finite input.
      const int lo = std::min(15, TruncToInt((x[j] - min) * id + 0.5f));
      const int hi = std::min(15, TruncToInt((x[j + 16] - min) * id + 0.5f));
      y[4 + j] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
    }
  }
}

void QuantizeQ5_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 22) {
    const float d = SignedAbsMax(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreF16(y, d);
    int codes[32];
    for (int j = 0; j < 32; ++j) codes[j] = std::min(31, TruncToInt(x[j] * id + 16.5f));
    Pack5(codes, y + 2, y + 6);
  }
}

void QuantizeQ5_1(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 24) {
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreF16(y, d);
    StoreF16(y + 2, min);
    int codes[32];
    // (uint8_t)(v + 0.5f) as ggml: v is in [0, 31] for finite input.
    for (int j = 0; j < 32; ++j) codes[j] = TruncToInt((x[j] - min) * id + 0.5f) & 0xFF;
    Pack5(codes, y + 4, y + 8);
  }
}

}  // namespace kvserve::tensor::internal
