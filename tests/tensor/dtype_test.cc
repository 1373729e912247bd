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
                          DType::kFP4_E2M1_E8M0_32};

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
}

TEST(DType, RowLengthValidity) {
  EXPECT_TRUE(IsValidRowLength(DType::kQ8_0, 64));
  EXPECT_FALSE(IsValidRowLength(DType::kQ8_0, 48));
  EXPECT_TRUE(IsValidRowLength(DType::kFP4_E2M1_E4M3_16, 48));
  EXPECT_FALSE(IsValidRowLength(DType::kFP4_E2M1_E8M0_32, 48));
  EXPECT_FALSE(IsValidRowLength(DType::kF32, -1));
  EXPECT_DEATH((void)RowBytes(DType::kQ4_0, 31), "not a whole number");
}

TEST(DType, NamesRoundTrip) {
  EXPECT_EQ(DTypeName(DType::kFP4_E2M1_E4M3_16), "fp4_e2m1_e4m3_16");
  EXPECT_EQ(DTypeName(DType::kQ8_0), "q8_0");
  for (DType t : kAll) EXPECT_EQ(DTypeFromName(DTypeName(t)), t);
  EXPECT_EQ(DTypeFromName("q4_k"), std::nullopt);
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
  EXPECT_EQ(DTypeFromGgmlTypeId(12), std::nullopt);  // Q4_K
  EXPECT_EQ(DTypeFromGgmlTypeId(1000), std::nullopt);
}

}  // namespace
}  // namespace kvserve::tensor
