// The integer form of ggml's integer block formats (tensor::IsIntegerQuant: Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4).
//
// Value i of a block, in f32 with exactly these roundings (this is ggml's dequantize_row_*):
//   x[i] = (d * scale[s]) * q[i]                      types without a min term
//   x[i] = (d * scale[s]) * q[i] + dmin * min[s]      Q4_1, Q5_1, Q2_K, Q4_K, Q5_K
// where s = i / sub_len. q, scale and min are small integers; d and dmin come from f16 fields
// (dmin is +m for Q4_1/Q5_1, whose x = d q + m, and minus the f16 dmin for the K types, whose
// x = d sc q - dmin m). The quantized MatMul (kernels/cpu/matmul.h) sums these integers exactly.
//
// Byte layouts (little-endian; "nibble order" = value j in the low nibble of byte j, value
// j + 16 in the high nibble, for j < 16, as in Q4_0):
//   Q8_0   d@0, int8 q[32]@2                                 sub 1 x 32, scale 1
//   Q4_0   d@0, qs[16]@2 nibble order, q = nibble - 8         sub 1 x 32
//   Q4_1   d@0, m@2, qs[16]@4 nibble order, q = nibble        sub 1 x 32, min 1, dmin = m
//   Q5_0   d@0, qh u32@2 (bit i = bit 4 of value i), qs[16]@6 nibble order,
//          q = (nibble | bit << 4) - 16                        sub 1 x 32
//   Q5_1   d@0, m@2, qh u32@4, qs[16]@8, q = nibble | bit << 4  sub 1 x 32, min 1, dmin = m
//   IQ4_NL d@0, qs[16]@2 nibble order, q = kIq4NlValues[nibble]  sub 1 x 32
//   MXFP4  e@0 (E8M0), qs[16]@1 nibble order, q = kMxfp4Values[nibble], d = 2^(e - 128)
//          (Mxfp4Scale; exact in f32, subnormal for e < 2)         sub 1 x 32
//   Q2_K   scales[16]@0 (sub s: scale = low nibble, min = high nibble), qs[64]@16, d@80,
//          dmin@82. Value i (h = i / 128, k = i % 128): q = (qs[32 h + k % 32] >> 2 (k / 32)) & 3.
//          16 subs x 16.
//   Q3_K   hmask[32]@0, qs[64]@32, scales[12]@96, d@108. Value i: low = 2 bits as in Q2_K,
//          hbit = (hmask[i % 32] >> (i / 32)) & 1, q = low - (hbit ? 0 : 4). Scale of sub s:
//          6 bits, low 4 = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4, high 2 =
//          (scales[8 + s % 4] >> 2 (s / 4)) & 3; scale = that - 32. 16 subs x 16.
//   Q4_K   d@0, dmin@2, scales[12]@4, qs[128]@16. Value i (c = i / 64, k = i % 64): nibble of
//          qs[32 c + k % 32], low for k < 32, high otherwise; q = nibble. Sub s (8 x 32):
//          s < 4: scale = scales[s] & 63, min = scales[s + 4] & 63; s >= 4: scale =
//          (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4, min = (scales[s + 4] >> 4) |
//          (scales[s] >> 6) << 4.
//   Q5_K   d@0, dmin@2, scales[12]@4, qh[32]@16, qs[128]@48. As Q4_K plus a fifth bit:
//          q = nibble + 16 ((qh[i % 32] >> (i / 32)) & 1).
//   Q6_K   ql[128]@0, qh[64]@128, int8 scales[16]@192, d@208. Value i (h = i / 128,
//          k = i % 128, quad = k / 32, l = k % 32): low 4 bits = ql[64 h + 32 (quad & 1) + l],
//          low nibble for quad < 2, high otherwise; high 2 bits = (qh[32 h + l] >> 2 quad) & 3;
//          q = bits - 32. Scale of sub s = scales[s] (16 x 16).
//   IQ4_XS d@0, scales_h u16@2, scales_l[4]@4, qs[128]@8. Sub s (8 x 32): scale =
//          ((scales_l[s / 2] >> 4 (s % 2)) & 15 | ((scales_h >> 2 s) & 3) << 4) - 32; value
//          32 s + j in nibble order within qs[16 s .. 16 s + 15]; q = kIq4NlValues[nibble].
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kvserve::tensor {

// IQ4_NL's non-linear table (ggml's kvalues_iq4nl), shared by IQ4_XS.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4's E2M1 values doubled to integers (ggml's kvalues_mxfp4): E2M1 v = kMxfp4Values / 2.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The f32 factor of an MXFP4 block's scale byte e: 2^(e - 128), half the E8M0 value (because
// kMxfp4Values are doubled), as ggml's GGML_E8M0_TO_FP32_HALF computes it (e = 0 and 1 give
// the subnormals 2^-128 and 2^-127; e = 255 gives 2^127, not NaN).
float Mxfp4Scale(uint8_t e);

// Sub-block structure of an integer-quant type.
struct QuantLayout {
  int num_subs = 1;      // sub-blocks per block: 1, 8 or 16
  int sub_len = 32;      // values per sub-block: 32 or 16
  bool has_min = false;  // the x = ... + dmin * min form
};
// note: IsIntegerQuant(t) (CHECKed).
QuantLayout GetQuantLayout(DType t);

// One decoded block. Buffers are sized for the largest block (256 values, 16 subs).
struct QuantBlockInts {
  float d = 0.0f;
  float dmin = 0.0f;    // 0 without a min term
  int16_t scale[16];    // (num_subs) integer sub-block scales; 1 for the 32-value formats
  int16_t min[16];      // (num_subs) integer sub-block mins, has_min only
  int8_t q[256];        // (BlockElems(t)) integer values, in order
};

// Decodes the block at `block` (BlockBytes(t) bytes). note: IsIntegerQuant(t).
void DecodeBlockInts(DType t, const uint8_t* block, QuantBlockInts* out);

}  // namespace kvserve::tensor
