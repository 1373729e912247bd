// IQ4_NL and IQ4_XS quantizers: ggml's quantize_row_iq4_nl_impl as quantize_iq4_nl and
// quantize_iq4_xs call it without an imatrix (7 scale trials each way; importance weights x^2),
// which is what llama.cpp's quantize writes. Layouts in tensor/quant_ints.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_ints.h"
#include "tensor/quant_internal.h"

namespace kvserve::tensor::internal {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS
constexpr int kTries = 7;

// Index of the table value nearest to v, as ggml's best_index_int8 of the llama.cpp that
// node-llama-cpp@3.21.1 ships: clamp to the ends, bisect, then compare the two f32 distances
// (a tie goes to the larger value; NaN picks 15). Newer ggml compares 2 v with the exact
// midpoint instead, which can differ only when a distance rounds.
int NearestTableIndex(float v) {
  const int8_t* val = kIq4NlValues;
  if (v <= val[0]) return 0;
  if (v >= val[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < val[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - static_cast<float>(val[hi - 1]) < static_cast<float>(val[hi]) - v ? hi - 1 : hi;
}

// Best scale of one block of 32 (weights x^2) and its codes L; 0 for an all-(near-)zero block.
float BlockScale(const float* xb, uint8_t* L) {
  float weight[32];
  for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, 32);
    return 0.0f;
  }
  const float v0 = static_cast<float>(kIq4NlValues[0]);
  float d = -max / v0;
  float id = 1.0f / d;
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int l = NearestTableIndex(id * xb[j]);
    L[j] = static_cast<uint8_t>(l);
    const float q = static_cast<float>(kIq4NlValues[l]);
    sumqx += weight[j] * q * xb[j];
    sumq2 += weight[j] * q * q;
  }
  d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + kIq4NlValues[0]) / max;
    sumqx = sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kIq4NlValues[NearestTableIndex(id * xb[j])]);
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// 32 codes -> 16 bytes in nibble order.
void PackNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace

void QuantizeIq4Nl(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 18) {
    uint8_t L[32];
    const float scale = BlockScale(x, L);
    StoreF16(y, scale);
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(NearestTableIndex(id * x[j]));
    PackNibbles(L, y + 2);
  }
}

void QuantizeIq4Xs(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += 136) {
    uint8_t L[256];
    float scales[8];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = BlockScale(x + 32 * ib, L + 32 * ib);
      const float abs_d = std::fabs(scales[ib]);
      if (abs_d > amax_scale) {
        amax_scale = abs_d;
        max_scale = scales[ib];
      }
    }
    const float d = -max_scale / 32.0f;
    StoreF16(y, d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t scales_h = 0;
    uint8_t* scales_l = y + 4;
    for (int ib = 0; ib < 8; ++ib) {
      // The block scale rounds with the unrounded d (not its f16), as ggml does.
      int l = std::clamp(NearestInt(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int j = 0; j < 32; ++j) {
        L[32 * ib + j] = static_cast<uint8_t>(NearestTableIndex(idl * x[32 * ib + j]));
      }
      l += 32;
      const int l_l = l & 0xF, l_h = l >> 4;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(l_l);
      } else {
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (l_l << 4));
      }
      scales_h = static_cast<uint16_t>(scales_h | (l_h << (2 * ib)));
    }
    y[2] = static_cast<uint8_t>(scales_h & 0xFF);
    y[3] = static_cast<uint8_t>(scales_h >> 8);
    for (int ib = 0; ib < 8; ++ib) PackNibbles(L + 32 * ib, y + 8 + 16 * ib);
  }
}

}  // namespace kvserve::tensor::internal
