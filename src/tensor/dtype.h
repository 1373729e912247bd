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
// The GGUF types (F32, F16, BF16, Q8_0, Q4_0) are bit-compatible with ggml's definitions.
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
// "fp4_e2m1_e4m3_16", "fp4_e2m1_e8m0_32".
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

// GGML tensor type ids (GGUF `type` field) for the types GGUF defines; nullopt for the
// kvserve-only FP8/FP4 KV formats.
std::optional<uint32_t> GgmlTypeId(DType t);
std::optional<DType> DTypeFromGgmlTypeId(uint32_t id);

}  // namespace kvserve::tensor
