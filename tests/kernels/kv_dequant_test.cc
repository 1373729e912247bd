// kernels::DequantizeKvRow must equal tensor::DequantizeRow bit for bit (attention reads K/V as
// stored): exhaustively over every F16 / BF16 code and every FP8 code with assorted scales, and
// over random rows of every KV dtype.
#include "kernels/cpu/kv_dequant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

// Compares bit patterns so NaNs compare too.
void ExpectSameBits(tensor::DType t, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> want(n), got(n);
  tensor::DequantizeRow(t, row.data(), want.data(), n);
  DequantizeKvRow(t, row.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(a, b) << tensor::DTypeName(t) << " value " << i << " of " << n;
  }
}

TEST(KvDequantTest, EveryHalfAndBFloat16Code) {
  std::vector<uint8_t> row(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    std::memcpy(row.data() + 2 * h, &v, 2);
  }
  ExpectSameBits(tensor::DType::kF16, row, 65536);
  ExpectSameBits(tensor::DType::kBF16, row, 65536);
}

TEST(KvDequantTest, EveryFp8CodeWithAssortedScales) {
  // 33-byte blocks: E8M0 scale, then 32 E4M3 codes; 8 blocks per scale cover all 256 codes.
  for (int scale : {0, 1, 100, 127, 130, 200, 254, 255}) {
    std::vector<uint8_t> row;
    for (int b = 0; b < 8; ++b) {
      row.push_back(static_cast<uint8_t>(scale));
      for (int j = 0; j < 32; ++j) row.push_back(static_cast<uint8_t>(32 * b + j));
    }
    ExpectSameBits(tensor::DType::kFP8_E4M3_E8M0_32, row, 256);
  }
}

TEST(KvDequantTest, RandomRowsOfEveryDType) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (tensor::DType t :
       {tensor::DType::kF32, tensor::DType::kF16, tensor::DType::kBF16, tensor::DType::kQ8_0,
        tensor::DType::kQ4_0, tensor::DType::kFP8_E4M3_E8M0_32, tensor::DType::kFP4_E2M1_E4M3_16,
        tensor::DType::kFP4_E2M1_E8M0_32}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t n = 32 * (1 + static_cast<int64_t>(rng() % 8));
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * (trial % 4 == 0 ? 1e-6f : 1.0f);
      std::vector<uint8_t> row(tensor::RowBytes(t, n));
      tensor::QuantizeRow(t, x.data(), row.data(), n);
      ExpectSameBits(t, row, n);
      for (uint8_t& byte : row) byte = static_cast<uint8_t>(rng());  // raw bit patterns too
      ExpectSameBits(t, row, n);
    }
  }
}

// DequantizeKvSlices over several rows equals the same values of whole-row dequantization, for
// slices aligned to blocks and slices that straddle them (head_dim 8 inside 32-value blocks).
TEST(KvDequantTest, SlicesOfSeveralRowsEqualWholeRows) {
  std::mt19937 rng(7);
  constexpr int64_t kN = 128;
  constexpr int kRows = 5;
  for (tensor::DType t :
       {tensor::DType::kF32, tensor::DType::kF16, tensor::DType::kBF16, tensor::DType::kQ8_0,
        tensor::DType::kQ4_0, tensor::DType::kFP8_E4M3_E8M0_32, tensor::DType::kFP4_E2M1_E4M3_16}) {
    std::vector<std::vector<uint8_t>> rows(kRows, std::vector<uint8_t>(tensor::RowBytes(t, kN)));
    std::vector<const std::byte*> ptrs;
    for (auto& row : rows) {
      for (uint8_t& byte : row) byte = static_cast<uint8_t>(rng());
      ptrs.push_back(reinterpret_cast<const std::byte*>(row.data()));
    }
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 32}, {64, 64}, {40, 8}, {8, 48}}) {
      constexpr int64_t kStride = 80;
      std::vector<float> got(kRows * kStride), staging(count + 64);
      DequantizeKvSlices(t, ptrs.data(), kRows, first, count, got.data(), kStride, staging.data());
      for (int r = 0; r < kRows; ++r) {
        std::vector<float> want(kN);
        tensor::DequantizeRow(t, rows[r].data(), want.data(), kN);
        ASSERT_EQ(std::memcmp(want.data() + first, got.data() + r * kStride, 4 * count), 0)
            << tensor::DTypeName(t) << " row " << r << " slice " << first << "+" << count;
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
