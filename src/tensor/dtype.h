// Data types for weights and KV storage, with exact byte sizes.
//
// Block formats store `BlockElems(t)` consecutive values in `BlockBytes(t)` bytes:
//   F32    1 value  in  4 B
//   F16    1 value  in  2 B   (IEEE half)
//   BF16   1 value  in  2 B   (top 16 bits of an f32)
//   Q8_0   32 values in 34 B  (f16 scale d, then 32 x int8 q; x = d * q)          [GGML_TYPE_Q8_0]
//   Q4_0   32 values in 18 B  (f16 scale d, then 16 bytes: low nibbles hold values 0..15,
//                              high nibbles 16..31; x = d * (nibble - 8))        [GGML_TYPE_Q4_0]
//   FP8_E4M3_E8M0_32   32 values in 33 B: one E8M0 scale byte (2^(e-127)), then 32 FP8 E4M3
//                      bytes. A 512-dim row is 16 blocks = 528 B.
//   FP4_E2M1_E4M3_16   16 values in 9 B: one FP8 E4M3 scale byte, then 8 bytes of FP4 E2M1
//                      (element 2i in the low nibble of byte i, 2i+1 in the high nibble).
//                      NVFP4-like. A 512-dim row is 32 blocks = 288 B.
//   FP4_E2M1_E8M0_32   32 values in 17 B: one E8M0 scale byte, then 16 bytes of FP4 E2M1
//                      (same nibble order). MXFP4-like. A 128-dim row is 4 blocks = 68 B.
// ggml's other weight formats (byte layouts in tensor/quant_ints.h, ids in brackets):
//   Q4_1    32 values in 20 B   x = d q + m, q 4-bit                            [3]
//   Q5_0    32 values in 22 B   x = d (q - 16), q 5-bit                         [6]
//   Q5_1    32 values in 24 B   x = d q + m, q 5-bit                            [7]
//   Q2_K   256 values in 84 B   16 sub-blocks of 16, 4-bit scales and mins      [10]
//   Q3_K   256 values in 110 B  16 sub-blocks of 16, 6-bit signed scales        [11]
//   Q4_K   256 values in 144 B  8 sub-blocks of 32, 6-bit scales and mins       [12]
//   Q5_K   256 values in 176 B  8 sub-blocks of 32, 6-bit scales and mins       [13]
//   Q6_K   256 values in 210 B  16 sub-blocks of 16, 8-bit signed scales        [14]
//   IQ4_NL  32 values in 18 B   x = d kvalues[q], a 16-entry non-linear table   [20]
//   IQ4_XS 256 values in 136 B  8 sub-blocks of 32 of IQ4_NL, 6-bit scales     [23]
//   MXFP4   32 values in 17 B   E8M0 byte e, then 16 bytes of E2M1 nibbles in Q4_0's order;
//                               x = 2^(e - 128) kMxfp4Values[q] (values doubled: 0..12)
//                               (gpt-oss experts)                               [39]
// The GGUF types (all but the FP8/FP4 KV formats) are bit-compatible with ggml's definitions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvserve::tensor {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kFP8_E4M3_E8M0_32,
  kFP4_E2M1_E4M3_16,
  kFP4_E2M1_E8M0_32,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,
};

// Values per block (1 for plain types).
int64_t BlockElems(DType t);
// Bytes per block.
int64_t BlockBytes(DType t);
// Bytes of a row of n values. note: n must be a multiple of BlockElems(t) (CHECKed).
int64_t RowBytes(DType t, int64_t n);
// True when n values can form a row of t.
bool IsValidRowLength(DType t, int64_t n);

// Lower-case name: "f32", "f16", "bf16", "q8_0", "q4_0", "fp8_e4m3_e8m0_32",
// "fp4_e2m1_e4m3_16", "fp4_e2m1_e8m0_32", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k",
// "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4" (ggml spells the K types "q4_K").
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

// GGML tensor type ids (GGUF `type` field) for the types GGUF defines; nullopt for the
// kvserve-only FP8/FP4 KV formats.
std::optional<uint32_t> GgmlTypeId(DType t);
std::optional<DType> DTypeFromGgmlTypeId(uint32_t id);

// True for the block formats whose values are small integers times block scales
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the K types, IQ4_NL, IQ4_XS, MXFP4): the weight types the
// quantized MatMul reads (kernels/cpu/matmul.h) and tensor/quant_ints.h decodes.
bool IsIntegerQuant(DType t);

}  // namespace kvserve::tensor
