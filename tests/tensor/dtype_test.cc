#include "tensor/dtype.h"

#include <gtest/gtest.h>

namespace kvserve::tensor {
namespace {

constexpr DType kAll[] = {DType::kF32,
                          DType::kF16,
                          DType::kBF16,
                          DType::kQ8_0,
                          DType::kQ4_0,
                          DType::kFP8_E4M3_E8M0_32,
                          DType::kFP4_E2M1_E4M3_16,
                          DType::kFP4_E2M1_E8M0_32,
                          DType::kQ4_1,
                          DType::kQ5_0,
                          DType::kQ5_1,
                          DType::kQ2_K,
                          DType::kQ3_K,
                          DType::kQ4_K,
                          DType::kQ5_K,
                          DType::kQ6_K,
                          DType::kIQ4_NL,
                          DType::kIQ4_XS,
                          DType::kMXFP4};

TEST(DType, ExactRowSizes) {
  EXPECT_EQ(RowBytes(DType::kFP4_E2M1_E4M3_16, 512), 288);
  EXPECT_EQ(RowBytes(DType::kFP4_E2M1_E8M0_32, 128), 68);
  EXPECT_EQ(RowBytes(DType::kFP8_E4M3_E8M0_32, 512), 528);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 32), 34);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 32), 18);
  EXPECT_EQ(RowBytes(DType::kF32, 7), 28);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kBF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kQ4_0, 0), 0);
  // ggml's block sizes (ggml-common.h's static_asserts).
  EXPECT_EQ(RowBytes(DType::kQ4_1, 32), 20);
  EXPECT_EQ(RowBytes(DType::kQ5_0, 32), 22);
  EXPECT_EQ(RowBytes(DType::kQ5_1, 32), 24);
  EXPECT_EQ(RowBytes(DType::kIQ4_NL, 32), 18);
  EXPECT_EQ(RowBytes(DType::kQ2_K, 256), 84);
  EXPECT_EQ(RowBytes(DType::kQ3_K, 256), 110);
  EXPECT_EQ(RowBytes(DType::kQ4_K, 256), 144);
  EXPECT_EQ(RowBytes(DType::kQ5_K, 256), 176);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 256), 210);
  EXPECT_EQ(RowBytes(DType::kIQ4_XS, 256), 136);
  EXPECT_EQ(RowBytes(DType::kMXFP4, 2880), 1530);  // gpt-oss-20b's expert rows: 90 blocks
  EXPECT_EQ(RowBytes(DType::kQ4_K, 4096), 16 * 144);
}

TEST(DType, RowLengthValidity) {
  EXPECT_TRUE(IsValidRowLength(DType::kQ8_0, 64));
  EXPECT_FALSE(IsValidRowLength(DType::kQ8_0, 48));
  EXPECT_TRUE(IsValidRowLength(DType::kFP4_E2M1_E4M3_16, 48));
  EXPECT_FALSE(IsValidRowLength(DType::kQ4_K, 128));  // K types need multiples of 256
  EXPECT_TRUE(IsValidRowLength(DType::kQ6_K, 768));
  EXPECT_FALSE(IsValidRowLength(DType::kFP4_E2M1_E8M0_32, 48));
  EXPECT_FALSE(IsValidRowLength(DType::kF32, -1));
  EXPECT_DEATH((void)RowBytes(DType::kQ4_0, 31), "not a whole number");
}

TEST(DType, NamesRoundTrip) {
  EXPECT_EQ(DTypeName(DType::kFP4_E2M1_E4M3_16), "fp4_e2m1_e4m3_16");
  EXPECT_EQ(DTypeName(DType::kQ8_0), "q8_0");
  for (DType t : kAll) EXPECT_EQ(DTypeFromName(DTypeName(t)), t);
  EXPECT_EQ(DTypeFromName("q4_k"), DType::kQ4_K);
  EXPECT_EQ(DTypeFromName("q4_k_m"), std::nullopt);
}

TEST(DType, GgmlIds) {
  EXPECT_EQ(GgmlTypeId(DType::kF32), 0u);
  EXPECT_EQ(GgmlTypeId(DType::kF16), 1u);
  EXPECT_EQ(GgmlTypeId(DType::kQ4_0), 2u);
  EXPECT_EQ(GgmlTypeId(DType::kQ8_0), 8u);
  EXPECT_EQ(GgmlTypeId(DType::kBF16), 30u);
  EXPECT_EQ(GgmlTypeId(DType::kFP8_E4M3_E8M0_32), std::nullopt);
  for (DType t : kAll) {
    if (auto id = GgmlTypeId(t)) {
      EXPECT_EQ(DTypeFromGgmlTypeId(*id), t);
    }
  }
  EXPECT_EQ(DTypeFromGgmlTypeId(12), DType::kQ4_K);
  EXPECT_EQ(DTypeFromGgmlTypeId(3), DType::kQ4_1);
  EXPECT_EQ(DTypeFromGgmlTypeId(23), DType::kIQ4_XS);
  EXPECT_EQ(DTypeFromGgmlTypeId(39), DType::kMXFP4);
  EXPECT_EQ(DTypeFromGgmlTypeId(16), std::nullopt);  // IQ2_XXS
  EXPECT_EQ(DTypeFromGgmlTypeId(34), std::nullopt);  // TQ1_0
  EXPECT_EQ(DTypeFromGgmlTypeId(1000), std::nullopt);
}

TEST(DType, IntegerQuantTypes) {
  EXPECT_TRUE(IsIntegerQuant(DType::kQ8_0));
  EXPECT_TRUE(IsIntegerQuant(DType::kQ6_K));
  EXPECT_TRUE(IsIntegerQuant(DType::kIQ4_NL));
  EXPECT_TRUE(IsIntegerQuant(DType::kMXFP4));
  EXPECT_FALSE(IsIntegerQuant(DType::kF16));
  EXPECT_FALSE(IsIntegerQuant(DType::kFP8_E4M3_E8M0_32));
}

}  // namespace
}  // namespace kvserve::tensor
