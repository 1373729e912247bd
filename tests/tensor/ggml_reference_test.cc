// kvserve's quantizers and dequantizers against ggml's own, as llama.cpp ships them: the
// libggml-base.so of node-llama-cpp@3.21.1 (tests/compat/node, installed by scripts/test.sh),
// loaded with dlopen. Quantized bytes must equal ggml_quantize_chunk's (what llama.cpp's
// quantize writes without an imatrix) and dequantized values dequantize_row_*'s, bit for bit.
// Skips with a message when the library is absent (KVSERVE_GGML_BASE_LIB overrides the path).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tensor/quant.h"

namespace kvserve::tensor {
namespace {

using QuantizeChunkFn = size_t (*)(int type, const float* src, void* dst, int64_t start,
                                   int64_t nrows, int64_t n_per_row, const float* imatrix);
using DequantizeRowFn = void (*)(const void* x, float* y, int64_t k);

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                            DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                            DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS,
                            DType::kMXFP4};

std::string GgmlSymbolName(DType t) {
  std::string name(DTypeName(t));
  if (name.back() == 'k') name.back() = 'K';  // ggml spells the K types q4_K
  return name;
}

std::string LibraryPath() {
  if (const char* env = std::getenv("KVSERVE_GGML_BASE_LIB")) return env;
  return std::string(KVSERVE_SOURCE_DIR) +
         "/tests/compat/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
         "libggml-base.so";
}

class GgmlReference : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = LibraryPath();
    if (!std::filesystem::exists(path)) {
      GTEST_SKIP() << "llama.cpp's libggml-base.so not found at " << path
                   << " (scripts/test.sh installs node-llama-cpp@3.21.1 into tests/compat/node)";
    }
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    quantize_ = reinterpret_cast<QuantizeChunkFn>(dlsym(lib_, "ggml_quantize_chunk"));
    ASSERT_NE(quantize_, nullptr);
  }
  void TearDown() override {
    if (lib_ != nullptr) dlclose(lib_);
  }

  DequantizeRowFn Dequantizer(DType t) {
    const std::string name = "dequantize_row_" + GgmlSymbolName(t);
    auto fn = reinterpret_cast<DequantizeRowFn>(dlsym(lib_, name.c_str()));
    EXPECT_NE(fn, nullptr) << name;
    return fn;
  }

  void* lib_ = nullptr;
  QuantizeChunkFn quantize_ = nullptr;
};

// Rows that exercise the scale searches: Gaussian, uniform, heavy outliers, constant, tiny
// (1e-20, below the all-zero threshold of some formats and above it for others), zeros,
// large (1e4, still inside f16 scale range), mixed magnitudes and exact ties.
std::vector<std::vector<float>> TestRows(int64_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 24; ++r) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng) * (r % 3 == 0 ? 0.02f : 1.0f);
    rows.push_back(x);
  }
  for (int r = 0; r < 8; ++r) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = uniform(rng);
    rows.push_back(x);
  }
  std::vector<float> outliers(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) outliers[i] = normal(rng) * (i % 37 == 0 ? 30.0f : 0.1f);
  rows.push_back(outliers);
  rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.75f));
  rows.push_back(std::vector<float>(static_cast<size_t>(n), -3.0f));
  rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
  std::vector<float> tiny(static_cast<size_t>(n)), large(static_cast<size_t>(n));
  std::vector<float> mixed(static_cast<size_t>(n)), ties(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tiny[i] = normal(rng) * 1e-20f;
    large[i] = normal(rng) * 1e4f;
    mixed[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 16) - 8);
    ties[i] = static_cast<float>(static_cast<int>(i % 9) - 4) * 0.5f;
  }
  for (auto* v : {&tiny, &large, &mixed, &ties}) rows.push_back(*v);
  return rows;
}

TEST_F(GgmlReference, QuantizedBytesEqualGgml) {
  constexpr int64_t kN = 1024;
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    const auto id = static_cast<int>(*GgmlTypeId(t));
    int row_index = 0;
    for (const std::vector<float>& x : TestRows(kN)) {
      std::vector<uint8_t> want(static_cast<size_t>(RowBytes(t, kN)), 0xAA);
      std::vector<uint8_t> got(want.size(), 0x55);
      ASSERT_EQ(quantize_(id, x.data(), want.data(), 0, 1, kN, nullptr), want.size());
      QuantizeRow(t, x.data(), got.data(), kN);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "row " << row_index << " byte " << i << " of block "
                                   << i / BlockBytes(t);
      }
      ++row_index;
    }
  }
}

TEST_F(GgmlReference, DequantizedValuesEqualGgml) {
  constexpr int64_t kN = 2048;
  std::mt19937 rng(7);
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    DequantizeRowFn ggml = Dequantizer(t);
    ASSERT_NE(ggml, nullptr);
    for (int iter = 0; iter < 20; ++iter) {
      // Random bytes everywhere: scales may be inf or NaN; a NaN must stay a NaN.
      std::vector<uint8_t> bytes(static_cast<size_t>(RowBytes(t, kN)));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      std::vector<float> want(kN), got(kN);
      ggml(bytes.data(), want.data(), kN);
      DequantizeRow(t, bytes.data(), got.data(), kN);
      for (int64_t i = 0; i < kN; ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << i;
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << "value " << i << ": " << got[i] << " vs ggml " << want[i];
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::tensor
