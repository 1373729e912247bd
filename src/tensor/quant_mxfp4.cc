// MXFP4 quantizer: ggml's quantize_row_mxfp4_ref, operation by operation (see quant_internal.h).
//   amax = the block's largest |x|;  e = amax > 0 ? floor(log2(amax)) - 2 + 127 : 0
//   d = Mxfp4Scale(e) = 2^(e - 128);  q_j = the index of kMxfp4Values nearest x_j / d, by
//   |kMxfp4Values[i] * d - x_j| with the first (lowest index) on ties, so +0 over -0.
// Example: amax = 5 -> floor(log2 5) = 2, e = 127, d = 0.5; x = 5 -> 10 d lies between 8 d and
// 12 d at equal distance 1: index 6 (value 8, decoded 4.0).
// The float e is clamped to [0, 255] before the byte cast (ggml's cast is undefined outside it;
// only |x| >= 2^129 or 0 < amax < 2^-125 get there).
#include <algorithm>
#include <cmath>

#include "tensor/quant_internal.h"
#include "tensor/quant_ints.h"

namespace kvserve::tensor::internal {
namespace {

int NearestMxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void QuantizeMxfp4(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 17) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    uint8_t e = 0;
    if (amax > 0.0f) {
      const float exponent = std::floor(std::log2(amax)) - 2.0f + 127.0f;
      e = static_cast<uint8_t>(std::clamp(exponent, 0.0f, 255.0f));
    }
    const float d = Mxfp4Scale(e);
    y[0] = e;
    for (int j = 0; j < 16; ++j) {
      y[1 + j] = static_cast<uint8_t>(NearestMxfp4(x[j], d) | (NearestMxfp4(x[16 + j], d) << 4));
    }
  }
}

}  // namespace kvserve::tensor::internal
