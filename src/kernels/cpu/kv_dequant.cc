#include "kernels/cpu/kv_dequant.h"

#include <array>
#include <bit>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/kv_quantize.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

// Compiled for AVX-512, AVX2 and baseline x86-64 (exact conversions: same bits everywhere).
#if defined(__x86_64__) && !defined(__clang__)
#define KVSERVE_DEQUANT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVSERVE_DEQUANT_CLONES
#endif

// Half -> float without branches: the 15 magnitude bits shifted into an f32 are the value
// times 2^-112 (normals and subnormals alike, exactly), so one multiply by 2^112 rescales;
// exponent 31 (inf / NaN) is rebuilt with the f32 all-ones exponent, payload kept.
// Example: 0x3C00 (1.0) -> bits 0x07800000 = 2^-112 -> times 2^112 = 1.0.
inline __attribute__((always_inline)) void F16ToF32(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t em = static_cast<uint32_t>(h & 0x7FFF) << 13;
    const uint32_t scaled = std::bit_cast<uint32_t>(std::bit_cast<float>(em) * 0x1p112f);
    const uint32_t u = em >= 0x0F800000u ? (em | 0x7F800000u) : scaled;  // a select: vectorises
    dst[i] = std::bit_cast<float>(u | sign);
  }
}

KVSERVE_DEQUANT_CLONES void F16Row(const uint8_t* src, float* dst, int64_t n) {
  F16ToF32(src, dst, n);
}

// Elements [first, first + count) of n F16 rows: one call for a whole chunk of keys, so the
// per-row cost is the conversion alone (a call per 64-value head slice cost more than it).
KVSERVE_DEQUANT_CLONES void F16Slices(const std::byte* const* rows, int n, int64_t first,
                                      int64_t count, float* dst, int64_t dst_stride) {
  for (int i = 0; i < n; ++i) {
    F16ToF32(reinterpret_cast<const uint8_t*>(rows[i]) + 2 * first, dst + i * dst_stride, count);
  }
}

void BF16Row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  }
}

KVSERVE_DEQUANT_CLONES void Q8_0Row(const uint8_t* y, float* x, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 34) {
    uint16_t dh;
    std::memcpy(&dh, y, 2);
    const float d = tensor::F16ToF32(dh);
    for (int j = 0; j < 32; ++j) x[j] = d * static_cast<float>(static_cast<int8_t>(y[2 + j]));
  }
}

// E4M3 byte -> float, all 256 codes.
const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = tensor::E4M3ToF32(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

void Fp8Row(const uint8_t* y, float* x, int64_t n) {
  const std::array<float, 256>& table = E4M3Table();
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 33) {
    const float s = tensor::E8M0ToF32(y[0]);
    for (int j = 0; j < 32; ++j) x[j] = s * table[y[1 + j]];
  }
}

}  // namespace

void DequantizeKvRow(tensor::DType t, const void* src, float* dst, int64_t n) {
  DCHECK(tensor::IsValidRowLength(t, n));
  const auto* y = static_cast<const uint8_t*>(src);
  switch (t) {
    case tensor::DType::kF32: std::memcpy(dst, y, static_cast<size_t>(n) * 4); return;
    case tensor::DType::kF16: return F16Row(y, dst, n);
    case tensor::DType::kBF16: return BF16Row(y, dst, n);
    case tensor::DType::kQ8_0: return Q8_0Row(y, dst, n);
    case tensor::DType::kFP8_E4M3_E8M0_32: return Fp8Row(y, dst, n);
    default: return tensor::DequantizeRow(t, src, dst, n);
  }
}

void DequantizeKvSlices(tensor::DType t, const std::byte* const* rows, int n, int64_t first,
                        int64_t count, float* dst, int64_t dst_stride, float* staging) {
  if (t == tensor::DType::kF16) return F16Slices(rows, n, first, count, dst, dst_stride);
  const int64_t block_elems = tensor::BlockElems(t);
  const int64_t block_lo = first / block_elems;
  const int64_t block_hi = (first + count + block_elems - 1) / block_elems;
  const int64_t offset = block_lo * tensor::BlockBytes(t);
  const bool aligned = first % block_elems == 0 && count % block_elems == 0;
  for (int i = 0; i < n; ++i) {
    float* out = dst + i * dst_stride;
    if (aligned) {
      DequantizeKvRow(t, rows[i] + offset, out, count);
    } else {
      DequantizeKvRow(t, rows[i] + offset, staging, (block_hi - block_lo) * block_elems);
      std::memcpy(out, staging + (first - block_lo * block_elems), sizeof(float) * count);
    }
  }
}

namespace {

std::byte* Segment(const tensor::PagedKvView& kv, int layer, KvPart part, int32_t block, int slot,
                   int segment) {
  return part == KvPart::kKey ? kv.KSegment(layer, block, slot, segment)
                              : kv.VSegment(layer, block, slot, segment);
}

}  // namespace

void StoreKvRow(const tensor::PagedKvView& kv, int layer, KvPart part, int32_t block, int slot,
                const float* row) {
  for (int g = 0; g < kv.num_segments(); ++g) {
    QuantizeKvRow(kv.dtype, row + static_cast<int64_t>(g) * kv.segment_elems,
                  Segment(kv, layer, part, block, slot, g), kv.segment_elems);
  }
}

void LoadKvRow(const tensor::PagedKvView& kv, int layer, KvPart part, int32_t block, int slot,
               float* row) {
  for (int g = 0; g < kv.num_segments(); ++g) {
    DequantizeKvRow(kv.dtype, Segment(kv, layer, part, block, slot, g),
                    row + static_cast<int64_t>(g) * kv.segment_elems, kv.segment_elems);
  }
}

}  // namespace kvserve::kernels
