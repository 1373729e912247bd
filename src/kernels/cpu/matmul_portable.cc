#include "kernels/cpu/matmul_portable.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace kvserve::kernels::internal {
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

// Signed weight value i (0..31) of a Q8_0 / Q4_0 block.
int QuantWeight(DType dtype, const uint8_t* block, int i) {
  if (dtype == DType::kQ8_0) return static_cast<int8_t>(block[2 + i]);
  uint8_t byte = block[2 + (i & 15)];
  return (i < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
}

float FloatDot(DType dtype, const uint8_t* row, const float* x, int64_t cols) {
  float lanes[kVirtualLanes] = {};
  for (int64_t c = 0; c < cols; ++c) {
    float& lane = lanes[c % kVirtualLanes];
    lane = std::fma(FloatWeight(dtype, row, c), x[c], lane);
  }
  return ReduceVirtualLanes(lanes);
}

float QuantDot(DType dtype, const uint8_t* row, const int8_t* qx, const float* dx, int64_t cols) {
  float lanes[kVirtualLanes] = {};
  const int64_t block_bytes = tensor::BlockBytes(dtype);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* block = row + b * block_bytes;
    const float scale = HalfToFloat(ReadU16(block)) * dx[b];
    for (int g = 0; g < 8; ++g) {
      int32_t p = 0;
      for (int i = 4 * g; i < 4 * g + 4; ++i) p += QuantWeight(dtype, block, i) * qx[32 * b + i];
      float& lane = lanes[8 * (b % 2) + g];
      lane = std::fma(scale, static_cast<float>(p), lane);
    }
  }
  return ReduceVirtualLanes(lanes);
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

void PortableRows(const WeightMatrix& w, const float* x, const int8_t* qx, const float* dx,
                  int64_t n, float* y, int64_t row_begin, int64_t row_end) {
  const int64_t row_bytes = tensor::RowBytes(w.dtype, w.cols);
  const bool quant = w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    for (int64_t t = 0; t < n; ++t) {
      y[t * w.rows + r] =
          quant ? QuantDot(w.dtype, row, qx + t * w.cols, dx + t * (w.cols / 32), w.cols)
                : FloatDot(w.dtype, row, x + t * w.cols, w.cols);
    }
  }
}

}  // namespace kvserve::kernels::internal
