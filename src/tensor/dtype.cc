#include "tensor/dtype.h"

#include <array>

#include "core/check.h"

namespace kvserve::tensor {
namespace {

struct DTypeTraits {
  DType type;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
  std::optional<uint32_t> ggml_id;  // GGML_TYPE_* for the types GGUF defines
  bool integer_quant = false;       // see IsIntegerQuant
};

// Indexed by the enum value; the static_assert below keeps the two in step.
constexpr std::array<DTypeTraits, 19> kTraits = {{
    {DType::kF32, "f32", 1, 4, 0},
    {DType::kF16, "f16", 1, 2, 1},
    {DType::kBF16, "bf16", 1, 2, 30},
    {DType::kQ8_0, "q8_0", 32, 34, 8, true},
    {DType::kQ4_0, "q4_0", 32, 18, 2, true},
    {DType::kFP8_E4M3_E8M0_32, "fp8_e4m3_e8m0_32", 32, 33, std::nullopt},
    {DType::kFP4_E2M1_E4M3_16, "fp4_e2m1_e4m3_16", 16, 9, std::nullopt},
    {DType::kFP4_E2M1_E8M0_32, "fp4_e2m1_e8m0_32", 32, 17, std::nullopt},
    {DType::kQ4_1, "q4_1", 32, 20, 3, true},
    {DType::kQ5_0, "q5_0", 32, 22, 6, true},
    {DType::kQ5_1, "q5_1", 32, 24, 7, true},
    {DType::kQ2_K, "q2_k", 256, 84, 10, true},
    {DType::kQ3_K, "q3_k", 256, 110, 11, true},
    {DType::kQ4_K, "q4_k", 256, 144, 12, true},
    {DType::kQ5_K, "q5_k", 256, 176, 13, true},
    {DType::kQ6_K, "q6_k", 256, 210, 14, true},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, 20, true},
    {DType::kIQ4_XS, "iq4_xs", 256, 136, 23, true},
    {DType::kMXFP4, "mxfp4", 32, 17, 39, true},
}};

constexpr bool TraitsInEnumOrder() {
  for (size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<size_t>(kTraits[i].type) != i) return false;
  }
  return true;
}
static_assert(TraitsInEnumOrder(), "kTraits must list DType values in enum order");

const DTypeTraits& Traits(DType t) {
  const auto i = static_cast<size_t>(t);
  CHECK_LT(i, kTraits.size()) << "unknown DType";
  return kTraits[i];
}

}  // namespace

int64_t BlockElems(DType t) {
  return Traits(t).block_elems;
}

int64_t BlockBytes(DType t) {
  return Traits(t).block_bytes;
}

bool IsValidRowLength(DType t, int64_t n) {
  return n >= 0 && n % BlockElems(t) == 0;
}

int64_t RowBytes(DType t, int64_t n) {
  CHECK(IsValidRowLength(t, n)) << "row of " << n << " values is not a whole number of "
                                << DTypeName(t) << " blocks";
  return n / BlockElems(t) * BlockBytes(t);
}

std::string_view DTypeName(DType t) {
  return Traits(t).name;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeTraits& tr : kTraits) {
    if (tr.name == name) return tr.type;
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlTypeId(DType t) {
  return Traits(t).ggml_id;
}

std::optional<DType> DTypeFromGgmlTypeId(uint32_t id) {
  for (const DTypeTraits& tr : kTraits) {
    if (tr.ggml_id == id) return tr.type;
  }
  return std::nullopt;
}

bool IsIntegerQuant(DType t) {
  return Traits(t).integer_quant;
}

}  // namespace kvserve::tensor
