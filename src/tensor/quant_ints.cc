#include "tensor/quant_ints.h"

#include <bit>
#include <cstring>

#include "core/check.h"
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

namespace kvserve::tensor {
namespace {

// Nibble order (see quant_ints.h): value j < 16 in the low nibble of qs[j], j + 16 in the high.
int Nibble(const uint8_t* qs, int j) {
  return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void DecodeQ32(DType t, const uint8_t* b, QuantBlockInts* o) {
  o->scale[0] = 1;
  o->min[0] = 1;
  if (t == DType::kMXFP4) {
    o->d = Mxfp4Scale(b[0]);
    for (int j = 0; j < 32; ++j) o->q[j] = kMxfp4Values[Nibble(b + 1, j)];
    return;
  }
  o->d = internal::LoadF16(b);
  switch (t) {
    case DType::kQ8_0:
      for (int j = 0; j < 32; ++j) o->q[j] = static_cast<int8_t>(b[2 + j]);
      return;
    case DType::kQ4_0:
      for (int j = 0; j < 32; ++j) o->q[j] = static_cast<int8_t>(Nibble(b + 2, j) - 8);
      return;
    case DType::kQ4_1:
      o->dmin = internal::LoadF16(b + 2);
      for (int j = 0; j < 32; ++j) o->q[j] = static_cast<int8_t>(Nibble(b + 4, j));
      return;
    case DType::kQ5_0: {
      const uint32_t qh = LoadU32(b + 2);
      for (int j = 0; j < 32; ++j) {
        o->q[j] = static_cast<int8_t>((Nibble(b + 6, j) | ((qh >> j) & 1) << 4) - 16);
      }
      return;
    }
    case DType::kQ5_1: {
      o->dmin = internal::LoadF16(b + 2);
      const uint32_t qh = LoadU32(b + 4);
      for (int j = 0; j < 32; ++j) {
        o->q[j] = static_cast<int8_t>(Nibble(b + 8, j) | ((qh >> j) & 1) << 4);
      }
      return;
    }
    case DType::kIQ4_NL:
      for (int j = 0; j < 32; ++j) o->q[j] = kIq4NlValues[Nibble(b + 2, j)];
      return;
    default: CHECK(false) << "not a 32-value integer format: " << DTypeName(t);
  }
}

// Two bits of value i of a Q2_K / Q3_K qs[64] array.
int TwoBits(const uint8_t* qs, int i) {
  const int h = i / 128, k = i % 128;
  return (qs[32 * h + k % 32] >> (2 * (k / 32))) & 3;
}

void DecodeQ2K(const uint8_t* b, QuantBlockInts* o) {
  for (int s = 0; s < 16; ++s) {
    o->scale[s] = b[s] & 0x0F;
    o->min[s] = b[s] >> 4;
  }
  for (int i = 0; i < 256; ++i) o->q[i] = static_cast<int8_t>(TwoBits(b + 16, i));
  o->d = internal::LoadF16(b + 80);
  o->dmin = -internal::LoadF16(b + 82);
}

void DecodeQ3K(const uint8_t* b, QuantBlockInts* o) {
  const uint8_t* hmask = b;
  const uint8_t* sc = b + 96;
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? sc[s] & 0x0F : sc[s - 8] >> 4;
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    o->scale[s] = static_cast<int16_t>((low | high << 4) - 32);
  }
  for (int i = 0; i < 256; ++i) {
    const int hbit = (hmask[i % 32] >> (i / 32)) & 1;
    o->q[i] = static_cast<int8_t>(TwoBits(b + 32, i) - (hbit ? 0 : 4));
  }
  o->d = internal::LoadF16(b + 108);
}

// Q4_K / Q5_K: 8 subs of 32 with 6-bit scales and mins (get_scale_min_k4 in ggml), then the
// nibbles (and, for Q5_K, the fifth bits in qh[32]).
void DecodeQ45K(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, QuantBlockInts* o) {
  o->d = internal::LoadF16(b);
  o->dmin = -internal::LoadF16(b + 2);
  const uint8_t* sc = b + 4;
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      o->scale[s] = sc[s] & 63;
      o->min[s] = sc[s + 4] & 63;
    } else {
      o->scale[s] = static_cast<int16_t>((sc[s + 4] & 0x0F) | (sc[s - 4] >> 6) << 4);
      o->min[s] = static_cast<int16_t>((sc[s + 4] >> 4) | (sc[s] >> 6) << 4);
    }
  }
  for (int i = 0; i < 256; ++i) {
    const int c = i / 64, k = i % 64;
    const uint8_t byte = qs[32 * c + k % 32];
    int q = k < 32 ? byte & 0x0F : byte >> 4;
    if (qh != nullptr) q += 16 * ((qh[i % 32] >> (i / 32)) & 1);
    o->q[i] = static_cast<int8_t>(q);
  }
}

void DecodeQ6K(const uint8_t* b, QuantBlockInts* o) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  for (int s = 0; s < 16; ++s) o->scale[s] = static_cast<int8_t>(b[192 + s]);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = i % 128, quad = k / 32, l = k % 32;
    const uint8_t low_byte = ql[64 * h + 32 * (quad & 1) + l];
    const int low = quad < 2 ? low_byte & 0x0F : low_byte >> 4;
    const int high = (qh[32 * h + l] >> (2 * quad)) & 3;
    o->q[i] = static_cast<int8_t>((low | high << 4) - 32);
  }
  o->d = internal::LoadF16(b + 208);
}

void DecodeIq4Xs(const uint8_t* b, QuantBlockInts* o) {
  o->d = internal::LoadF16(b);
  const uint16_t scales_h = static_cast<uint16_t>(b[2] | b[3] << 8);
  for (int s = 0; s < 8; ++s) {
    const int low = (b[4 + s / 2] >> (4 * (s % 2))) & 0x0F;
    const int high = (scales_h >> (2 * s)) & 3;
    o->scale[s] = static_cast<int16_t>((low | high << 4) - 32);
    for (int j = 0; j < 32; ++j) o->q[32 * s + j] = kIq4NlValues[Nibble(b + 8 + 16 * s, j)];
  }
}

}  // namespace

QuantLayout GetQuantLayout(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kMXFP4: return {1, 32, false};
    case DType::kQ4_1:
    case DType::kQ5_1: return {1, 32, true};
    case DType::kQ2_K: return {16, 16, true};
    case DType::kQ3_K:
    case DType::kQ6_K: return {16, 16, false};
    case DType::kQ4_K:
    case DType::kQ5_K: return {8, 32, true};
    case DType::kIQ4_XS: return {8, 32, false};
    default: CHECK(false) << "not an integer quant type: " << DTypeName(t);
  }
  return {};
}

float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

void DecodeBlockInts(DType t, const uint8_t* block, QuantBlockInts* out) {
  out->dmin = 0.0f;
  switch (t) {
    case DType::kQ2_K: return DecodeQ2K(block, out);
    case DType::kQ3_K: return DecodeQ3K(block, out);
    case DType::kQ4_K: return DecodeQ45K(block, nullptr, block + 16, out);
    case DType::kQ5_K: return DecodeQ45K(block, block + 16, block + 48, out);
    case DType::kQ6_K: return DecodeQ6K(block, out);
    case DType::kIQ4_XS: return DecodeIq4Xs(block, out);
    default: return DecodeQ32(t, block, out);
  }
}

namespace internal {

void DequantizeInts(DType t, const uint8_t* y, float* x, int64_t n) {
  const QuantLayout layout = GetQuantLayout(t);
  const int64_t block_elems = BlockElems(t);
  const int64_t block_bytes = BlockBytes(t);
  QuantBlockInts b;
  for (int64_t k = 0; k < n / block_elems; ++k, y += block_bytes, x += block_elems) {
    DecodeBlockInts(t, y, &b);
    for (int s = 0; s < layout.num_subs; ++s) {
      const float dl = b.d * static_cast<float>(b.scale[s]);
      const float ml = b.dmin * static_cast<float>(b.min[s]);
      for (int j = s * layout.sub_len; j < (s + 1) * layout.sub_len; ++j) {
        const float v = dl * static_cast<float>(b.q[j]);
        x[j] = layout.has_min ? v + ml : v;
      }
    }
  }
}

}  // namespace internal
}  // namespace kvserve::tensor
