#include "kernels/cpu/matmul_portable.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "tensor/quant_ints.h"

namespace kvserve::kernels {
namespace internal {
namespace {

using tensor::DType;

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t ReadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Weight element c of a float-typed row (F32, F16, BF16), widened exactly.
float FloatWeight(DType dtype, const uint8_t* row, int64_t c) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * c, sizeof(f));
      return f;
    }
    case DType::kF16: return HalfToFloat(ReadU16(row + 2 * c));
    case DType::kBF16: return BF16ToFloat(ReadU16(row + 2 * c));
    default: CHECK(false) << "not a float dtype"; return 0;
  }
}

float FloatDot(DType dtype, const uint8_t* row, const float* x, int64_t cols) {
  float lanes[kVirtualLanes] = {};
  for (int64_t c = 0; c < cols; ++c) {
    float& lane = lanes[c % kVirtualLanes];
    lane = std::fma(FloatWeight(dtype, row, c), x[c], lane);
  }
  return ReduceVirtualLanes(lanes);
}

// The scheme's f32 accumulation for one weight row and one activation row of an integer
// format: exact I_b and M_b per block from the integer form, then the fma chain.
float QuantDot(DType dtype, const uint8_t* row, const QuantActivations& act, int64_t t,
               int64_t cols) {
  const tensor::QuantLayout layout = tensor::GetQuantLayout(dtype);
  const int64_t block = tensor::BlockElems(dtype);
  const int64_t block_bytes = tensor::BlockBytes(dtype);
  const int8_t* a = act.q + t * cols;
  const float* dx = act.d + t * (cols / block);
  tensor::QuantBlockInts w;
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / block; ++b) {
    tensor::DecodeBlockInts(dtype, row + b * block_bytes, &w);
    int32_t sum_i = 0, sum_m = 0;
    for (int s = 0; s < layout.num_subs; ++s) {
      int32_t p = 0, sa = 0;
      for (int j = s * layout.sub_len; j < (s + 1) * layout.sub_len; ++j) {
        p += static_cast<int32_t>(w.q[j]) * a[b * block + j];
        sa += a[b * block + j];
      }
      sum_i += w.scale[s] * p;
      sum_m += w.min[s] * sa;
    }
    acc = std::fma(w.d * dx[b], static_cast<float>(sum_i), acc);
    if (layout.has_min) acc = std::fma(w.dmin * dx[b], static_cast<float>(sum_m), acc);
  }
  return acc;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in f32.
  const float magnitude = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

float BF16ToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

float ReduceVirtualLanes(const float (&lanes)[kVirtualLanes]) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  const float s2_0 = s4[0] + s4[2];
  const float s2_1 = s4[1] + s4[3];
  return s2_0 + s2_1;
}

int64_t ActivationBlock(tensor::DType t) {
  return tensor::BlockElems(t) == 256 ? 256 : 32;
}

void PortableRows(const WeightMatrix& w, const float* x, const QuantActivations& act, int64_t n,
                  float* y, int64_t row_begin, int64_t row_end) {
  const int64_t row_bytes = tensor::RowBytes(w.dtype, w.cols);
  const bool quant = tensor::IsIntegerQuant(w.dtype);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    for (int64_t t = 0; t < n; ++t) {
      y[t * w.rows + r] = quant ? QuantDot(w.dtype, row, act, t, w.cols)
                                : FloatDot(w.dtype, row, x + t * w.cols, w.cols);
    }
  }
}

void SumActivationCodes(const int8_t* q, int64_t cols, int16_t* sums) {
  for (int64_t k = 0; k < cols / 16; ++k) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[16 * k + i];
    sums[k] = static_cast<int16_t>(sum);
  }
}

void FillTokenGroups(const QuantActivations& act, const TokenGroups& layout, int64_t n,
                     int64_t g_begin, int64_t g_end, uint8_t* staging) {
  const int64_t cols = layout.cols, blocks = cols / layout.block;
  for (int64_t g = g_begin; g < g_end; ++g) {
    auto* q = reinterpret_cast<int8_t*>(staging + layout.QOffset(g));
    auto* d = reinterpret_cast<float*>(staging + layout.DOffset(g));
    auto* sums = reinterpret_cast<int32_t*>(staging + layout.SumsOffset(g));
    for (int j = 0; j < 16; ++j) {
      const int64_t t = 16 * g + j;
      const bool valid = t < n;
      // 4 codes at a time (a 32-bit copy): token j's codes c .. c + 3 go to [c / 4][j].
      for (int64_t c4 = 0; c4 < cols / 4; ++c4) {
        uint32_t four = 0;
        if (valid) std::memcpy(&four, act.q + t * cols + 4 * c4, 4);
        std::memcpy(q + (c4 * 16 + j) * 4, &four, 4);
      }
      for (int64_t b = 0; b < blocks; ++b) d[b * 16 + j] = valid ? act.d[t * blocks + b] : 0.0f;
      for (int64_t k = 0; k < cols / 16; ++k) {
        sums[k * 16 + j] = valid ? act.sums[t * (cols / 16) + k] : 0;
      }
    }
  }
}

}  // namespace internal

namespace {

// ggml's nearest_int: round half to even via the 1.5 * 2^23 trick (|v| <= 2^22 here).
int NearestEven(float v) {
  return (std::bit_cast<int32_t>(v + 12582912.0f) & 0x007FFFFF) - 0x00400000;
}

}  // namespace

void internal::QuantizeActivationRowQ8KPortable(const float* x, int64_t cols, int8_t* q, float* d,
                                                int16_t* sums) {
  CHECK_EQ(cols % 256, 0);
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    int8_t* qb = q + 256 * b;
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, 256);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      const float v = iscale * xb[j];
      qb[j] = v == v ? static_cast<int8_t>(std::clamp(NearestEven(v), -127, 127)) : 0;
    }
    d[b] = 1.0f / iscale;
  }
  internal::SumActivationCodes(q, cols, sums);
}

}  // namespace kvserve::kernels
