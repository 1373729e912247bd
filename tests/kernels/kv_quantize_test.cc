// QuantizeKvRow must write exactly tensor::QuantizeRow's bytes: random rows over many
// magnitudes (subnormal to huge), exact rounding ties of every format, zeros, and NaN /
// infinity in a block.
#include "kernels/cpu/kv_quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;

void ExpectSameBytes(DType t, const std::vector<float>& row, const std::string& what) {
  const int64_t n = static_cast<int64_t>(row.size());
  std::vector<uint8_t> want(tensor::RowBytes(t, n)), got(want.size(), 0xAB);
  tensor::QuantizeRow(t, row.data(), want.data(), n);
  QuantizeKvRow(t, row.data(), got.data(), n);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << tensor::DTypeName(t) << " " << what << ": byte " << i;
  }
}

TEST(KvQuantizeTest, SameBytesAsTheReferenceQuantizer) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : {DType::kQ8_0, DType::kFP8_E4M3_E8M0_32, DType::kFP4_E2M1_E4M3_16,
                  DType::kFP4_E2M1_E8M0_32, DType::kF16, DType::kBF16}) {
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<float> row(256);
      const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 200) - 140);
      for (float& x : row) x = normal(rng) * magnitude;
      if (trial % 5 == 1) {
        for (float& x : row) x = std::round(x / magnitude * 4.0f) * 0.25f;  // coarse: ties
      }
      if (trial % 7 == 2) row[rng() % row.size()] = 0.0f * (rng() % 2 ? 1.0f : -1.0f);
      if (trial % 11 == 3) row[rng() % row.size()] = std::numeric_limits<float>::quiet_NaN();
      if (trial % 13 == 4) row[rng() % row.size()] = -std::numeric_limits<float>::infinity();
      if (trial % 17 == 5) std::fill(row.begin(), row.begin() + 32, 0.0f);
      ExpectSameBytes(t, row, "trial " + std::to_string(trial));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(KvQuantizeTest, RoundingTiesOfEveryFormat) {
  // Q8_0 with amax 127: scale 1, so x * id = x and halves are ties (away from zero).
  std::vector<float> q8(32);
  for (int j = 0; j < 32; ++j) q8[j] = -15.5f + static_cast<float>(j);
  q8[0] = 127.0f;
  ExpectSameBytes(DType::kQ8_0, q8, "halves");
  // FP8 with amax 448: scale 1; midpoints between E4M3 codes (ties to even), subnormal too.
  std::vector<float> fp8(32);
  for (int j = 0; j < 31; ++j) fp8[j] = (1.0f + (2 * (j % 8) + 1) / 16.0f) * std::ldexp(1.0f, j / 8 - 8);
  fp8[31] = 448.0f;
  ExpectSameBytes(DType::kFP8_E4M3_E8M0_32, fp8, "midpoints");
  // FP4 with amax 6 (E8M0 and E4M3 scale 1): every midpoint, both signs.
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  std::vector<float> fp4(32);
  for (int j = 0; j < 32; ++j) fp4[j] = mids[j % 8] * (j & 8 ? -1.0f : 1.0f);
  ExpectSameBytes(DType::kFP4_E2M1_E8M0_32, fp4, "midpoints");
  ExpectSameBytes(DType::kFP4_E2M1_E4M3_16, fp4, "midpoints");
}

}  // namespace
}  // namespace kvserve::kernels
