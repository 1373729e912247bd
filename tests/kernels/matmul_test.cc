// Differential and determinism tests for kernels/cpu/matmul.h.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

// Also enumerate AVX3_DL, which matmul.cc compiles (AVX512-VNNI quantized tiles).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/targets.h"
#include "kernels/cpu/matmul_portable.h"
#include "support/simd_targets.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,  DType::kQ8_0,
                               DType::kQ4_0,  DType::kQ4_1,  DType::kQ5_0,  DType::kQ5_1,
                               DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,  DType::kQ4_K,
                               DType::kQ5_K,  DType::kQ6_K,  DType::kIQ4_XS, DType::kMXFP4};

bool IsQuant(DType t) {
  return tensor::IsIntegerQuant(t);
}

bool IsK(DType t) {
  return tensor::BlockElems(t) == 256;
}

// A random weight matrix stored as `dtype`, with its exact dequantized values.
struct TestWeights {
  std::vector<uint8_t> bytes;      // (rows, RowBytes(dtype, cols))
  std::vector<float> dequantized;  // (rows, cols)
  WeightMatrix matrix;
};

TestWeights MakeWeights(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  TestWeights w;
  const int64_t row_bytes = tensor::RowBytes(dtype, cols);
  w.bytes.resize(static_cast<size_t>(rows * row_bytes));
  w.dequantized.resize(static_cast<size_t>(rows * cols));
  std::vector<float> src(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : src) v = normal(rng);
    tensor::QuantizeRow(dtype, src.data(), w.bytes.data() + r * row_bytes, cols);
    tensor::DequantizeRow(dtype, w.bytes.data() + r * row_bytes, w.dequantized.data() + r * cols,
                          cols);
  }
  w.matrix = WeightMatrix{w.bytes.data(), dtype, rows, cols};
  return w;
}

std::vector<float> RandomActivations(int64_t n, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = uniform(rng);
  return x;
}

// Naive float64 reference. For quantized weights the activations go through the same Q8
// quantization as MatMul, so the only difference left is f32 rounding.
// Returns y (n, rows) and, in bound, sum |w| |x| per element for the tolerance.
std::vector<double> Reference(const TestWeights& w, const std::vector<float>& x, int64_t n,
                              std::vector<double>* bound) {
  const int64_t rows = w.matrix.rows, cols = w.matrix.cols;
  std::vector<float> xs = x;
  if (IsQuant(w.matrix.dtype)) {
    const int64_t block = IsK(w.matrix.dtype) ? 256 : 32;
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> d(static_cast<size_t>(cols / 32));
    std::vector<int16_t> sums(static_cast<size_t>(cols / 16));
    for (int64_t t = 0; t < n; ++t) {
      if (block == 256) {
        QuantizeActivationRowQ8K(x.data() + t * cols, cols, q.data(), d.data(), sums.data());
      } else {
        QuantizeActivationRow(x.data() + t * cols, cols, q.data(), d.data());
      }
      for (int64_t c = 0; c < cols; ++c) xs[t * cols + c] = d[c / block] * q[c];
    }
  }
  std::vector<double> y(static_cast<size_t>(n * rows));
  bound->assign(y.size(), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double{w.dequantized[r * cols + c]} * xs[t * cols + c];
        sum += p;
        abs_sum += std::fabs(p);
      }
      y[t * rows + r] = sum;
      (*bound)[t * rows + r] = abs_sum;
    }
  }
  return y;
}

std::vector<float> RunMatMul(const WeightMatrix& w, const std::vector<float>& x, int64_t n,
                             int threads) {
  ThreadPool pool(threads);
  MatMulScratch scratch(std::max<int64_t>(n, 1), w.cols);
  std::vector<float> y(static_cast<size_t>(n * w.rows), -1.0f);
  MatMul(w, x.data(), n, y.data(), pool, scratch);
  return y;
}

bool BitEqual(float a, float b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

struct Shape {
  int64_t rows, cols, n;
};

// Awkward shapes: rows not a multiple of any tile, n spanning token tiles, odd block counts,
// and (for float types) columns that are not a multiple of 16.
std::vector<Shape> ShapesFor(DType dtype) {
  if (IsK(dtype)) {
    return {{1, 256, 1}, {7, 768, 5}, {17, 512, 37}, {64, 256, 16}, {5, 1280, 2}, {19, 256, 9}};
  }
  std::vector<Shape> shapes = {{1, 32, 1},   {7, 96, 5},   {17, 160, 37}, {64, 64, 16},
                               {33, 288, 3}, {5, 1024, 2}, {19, 32, 9}};
  if (!IsQuant(dtype)) {
    shapes.push_back({9, 7, 4});
    shapes.push_back({13, 172, 11});
    shapes.push_back({3, 1, 2});
  }
  return shapes;
}

TEST(MatMulTest, MatchesFloat64Reference) {
  uint32_t seed = 1;
  for (DType dtype : kAllTypes) {
    for (const Shape& s : ShapesFor(dtype)) {
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " rows=" + std::to_string(s.rows) +
                   " cols=" + std::to_string(s.cols) + " n=" + std::to_string(s.n));
      TestWeights w = MakeWeights(dtype, s.rows, s.cols, ++seed);
      std::vector<float> x = RandomActivations(s.n, s.cols, ++seed);
      std::vector<double> bound;
      std::vector<double> want = Reference(w, x, s.n, &bound);
      std::vector<float> got = RunMatMul(w.matrix, x, s.n, 2);
      for (size_t i = 0; i < got.size(); ++i) {
        // f32 accumulation over `cols` terms: error well under cols * 2^-24 * sum |w x|.
        const double tol = 1e-6 + 4.0 * static_cast<double>(s.cols) * 0x1p-24 * bound[i];
        ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
      }
    }
  }
}

TEST(MatMulTest, BitIdenticalToPortableScheme) {
  uint32_t seed = 100;
  for (DType dtype : kAllTypes) {
    for (const Shape& s : ShapesFor(dtype)) {
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " rows=" + std::to_string(s.rows) +
                   " cols=" + std::to_string(s.cols));
      TestWeights w = MakeWeights(dtype, s.rows, s.cols, ++seed);
      std::vector<float> x = RandomActivations(s.n, s.cols, ++seed);
      std::vector<float> want(static_cast<size_t>(s.n * s.rows));
      MatMulPortable(w.matrix, x.data(), s.n, want.data());
      std::vector<float> got = RunMatMul(w.matrix, x, s.n, 3);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(BitEqual(got[i], want[i])) << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

// A token row gives the same bits alone, anywhere inside a batch of 37, and for 1-3 threads.
TEST(MatMulTest, DeterministicAcrossBatchPositionAndThreads) {
  constexpr int64_t kRows = 75, kCols = 512, kBatch = 37;
  uint32_t seed = 500;
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(tensor::DTypeName(dtype));
    TestWeights w = MakeWeights(dtype, kRows, kCols, ++seed);
    std::vector<float> probe = RandomActivations(1, kCols, ++seed);
    std::vector<float> alone = RunMatMul(w.matrix, probe, 1, 1);
    for (int64_t position : {int64_t{0}, int64_t{5}, int64_t{17}, kBatch - 1}) {
      std::vector<float> batch = RandomActivations(kBatch, kCols, ++seed);
      std::copy(probe.begin(), probe.end(), batch.begin() + position * kCols);
      for (int threads : {1, 2, 3}) {
        std::vector<float> y = RunMatMul(w.matrix, batch, kBatch, threads);
        for (int64_t r = 0; r < kRows; ++r) {
          ASSERT_TRUE(BitEqual(y[position * kRows + r], alone[r]))
              << "position " << position << " threads " << threads << " row " << r;
        }
      }
    }
  }
}

// Every SIMD target this machine supports (e.g. AVX2 and AVX-512) computes the same bits.
TEST(MatMulTest, BitIdenticalAcrossSimdTargets) {
  const kvserve::testing::SimdTargetReset reset_targets;
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  uint32_t seed = 900;
  for (DType dtype : kAllTypes) {
    const int64_t cols = IsK(dtype) ? 768 : 416;
    TestWeights w = MakeWeights(dtype, 37, cols, ++seed);
    std::vector<float> x = RandomActivations(13, cols, ++seed);
    std::vector<float> first;
    for (int64_t target : targets) {
      hwy::SetSupportedTargetsForTest(target);
      hwy::SupportedTargets();  // refreshes the dispatch choice
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " on " +
                   std::string(MatMulTargetName()));
      std::vector<float> y = RunMatMul(w.matrix, x, 13, 2);
      if (dtype == DType::kF32) std::printf("checked target %s\n", hwy::TargetName(target));
      if (first.empty()) first = y;
      for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(BitEqual(y[i], first[i])) << i;
    }
    hwy::SetSupportedTargetsForTest(0);
    hwy::SupportedTargets();
  }
}

// Raw random blocks of Q4_K or Q6_K (every code, scale and min a file may hold), their f16
// factors kept finite (|d| < 2, either sign).
void RandomizeKBlocks(TestWeights& w, uint32_t seed) {
  const bool q4k = w.matrix.dtype == DType::kQ4_K;
  const size_t block = q4k ? 144 : 210;
  std::mt19937 rng(seed);
  for (size_t i = 0; i < w.bytes.size(); ++i) {
    w.bytes[i] = static_cast<uint8_t>(rng());
    const size_t at = i % block;
    if (q4k ? (at == 1 || at == 3) : at == 209) w.bytes[i] &= 0xBB;  // f16 high bytes
  }
}

// Batches on a CPU with AMX run the AMX int8 tiles; they give the bits of the portable scheme
// and of the AVX-512 VNNI tiles (AMX switched off), for partial row tiles and odd token groups,
// and 1, 2 and 3 blocks of 256 or 1, 2 and 13 of 32 (the tiles' pipelines and their ends; 16
// tokens take the one-group pipelines of Q4_K, Q6_K and Q8_0).
// Q4_K and Q6_K (whose tiles read the file's blocks in place) also get raw random blocks.
TEST(MatMulTest, AmxTilesBitIdenticalToVnniTiles) {
  if (!internal::AmxUsable()) GTEST_SKIP() << "this CPU or OS offers no AMX int8 tiles";
  uint32_t seed = 1300;
  for (DType dtype : kAllTypes) {
    if (!IsQuant(dtype)) continue;
    const std::vector<int64_t> widths =
        IsK(dtype) ? std::vector<int64_t>{256, 512, 768} : std::vector<int64_t>{32, 64, 416};
    for (int64_t n : {16, 33, 70}) {
      for (int64_t cols : widths) {
        for (bool raw : {false, true}) {
          if (raw && dtype != DType::kQ4_K && dtype != DType::kQ6_K) continue;
          const int64_t rows = 45;
          SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " n=" + std::to_string(n) +
                       " cols=" + std::to_string(cols) + (raw ? " raw" : ""));
          TestWeights w = MakeWeights(dtype, rows, cols, ++seed);
          if (raw) RandomizeKBlocks(w, ++seed);
          std::vector<float> x = RandomActivations(n, cols, ++seed);
          std::vector<float> want(static_cast<size_t>(n * rows));
          MatMulPortable(w.matrix, x.data(), n, want.data());
          std::vector<float> amx = RunMatMul(w.matrix, x, n, 2);
          internal::SetAmxForTest(false);
          std::vector<float> vnni = RunMatMul(w.matrix, x, n, 2);
          internal::SetAmxForTest(true);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(BitEqual(amx[i], want[i])) << i << ": " << amx[i] << " vs " << want[i];
            ASSERT_TRUE(BitEqual(vnni[i], want[i])) << i;
          }
        }
      }
    }
  }
}

// Activations whose codes are of full magnitude (123 to 127: one value in `rarity` 3% smaller at
// random, the first of each block of 256 the block's maximum), the sign by sub-block of
// `sub_len` (token t % 3 == 0), by value (t % 3 == 1) or positive.
std::vector<float> FullMagnitudeActivations(int64_t n, int64_t cols, int64_t sub_len, int rarity,
                                            std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool negative = t % 3 == 0 ? (c / sub_len) % 2 == 1 : t % 3 == 1 ? c % 2 == 1 : false;
      const bool smaller = c % 256 != 0 && rng() % rarity == 0;
      x[t * cols + c] = (negative ? -1.0f : 1.0f) * (smaller ? 0.97f : 1.0f) *
                        (1.0f + 0.25f * static_cast<float>(t));
    }
  }
  return x;
}

// MatMul of n tokens x with AMX (2 threads) and with AMX off (the VNNI rows) gives the bits of the
// portable scheme.
void ExpectAmxAndVnniBitIdentical(const WeightMatrix& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> want(static_cast<size_t>(n * w.rows));
  MatMulPortable(w, x.data(), n, want.data());
  const std::vector<float> amx = RunMatMul(w, x, n, 2);
  internal::SetAmxForTest(false);
  const std::vector<float> vnni = RunMatMul(w, x, n, 2);
  internal::SetAmxForTest(true);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(BitEqual(amx[i], want[i])) << i << ": " << amx[i] << " vs " << want[i];
    ASSERT_TRUE(BitEqual(vnni[i], want[i])) << i << ": " << vnni[i] << " vs " << want[i];
  }
}

// Q4_K blocks at the extremes of the AMX sub-block tiles' bounds (matmul_x86_amx16k-inl.h): every
// 4-bit value 14 or 15, every scale and min 63, activations of full magnitude (codes 123 to 127,
// the sign by sub-block or by value), so |C_j| nears 60960 and the f32 partial sums 15,361,920;
// 16 tokens (the one-group pipeline) and 33, all equal to the portable scheme and the VNNI rows.
TEST(MatMulTest, AmxQ4KSubBlockBoundsExact) {
  if (!internal::AmxUsable()) GTEST_SKIP() << "this CPU or OS offers no AMX int8 tiles";
  const int64_t rows = 19, cols = 512;
  TestWeights w = MakeWeights(DType::kQ4_K, rows, cols, 4100);
  std::mt19937 rng(4101);
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    uint8_t* block = w.bytes.data() + 144 * b;
    std::memset(block + 4, 0xFF, 12);  // scales and mins 63 (d, dmin kept)
    for (int i = 16; i < 144; ++i) block[i] = static_cast<uint8_t>(0xEE | (rng() & 0x11));  // 14, 15
  }
  for (int64_t n : {16, 33}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ExpectAmxAndVnniBitIdentical(w.matrix, FullMagnitudeActivations(n, cols, 32, 2, rng), n);
  }
}

// Q6_K blocks at the extremes of the 16-token AMX path's bounds (matmul_x86_amx16q6-inl.h): scales
// -128 and 127, 6-bit values 0 and 63 (so s q reaches -8064, the high byte -32), activations of
// full magnitude signed by sub-block or by value (code sums up to +-2032: the offset term -32 S_j
// needs both y_j and y'_j at +-127, and its low byte x_j takes several values); 12 and 16 tokens
// (the one-group pipeline, with a short last row tile) equal the portable scheme and the VNNI
// rows.
TEST(MatMulTest, AmxQ6KOffsetBoundsExact) {
  if (!internal::AmxUsable()) GTEST_SKIP() << "this CPU or OS offers no AMX int8 tiles";
  const int64_t rows = 19, cols = 512;
  TestWeights w = MakeWeights(DType::kQ6_K, rows, cols, 4200);
  std::mt19937 rng(4201);
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    uint8_t* block = w.bytes.data() + 210 * b;  // ql[128], qh[64], scales[16], d (kept)
    const bool high = b % 3 != 1;               // mostly 63, else mostly 0
    for (int i = 0; i < 192; ++i) {
      const uint8_t bits = rng() % 8 == 0 ? static_cast<uint8_t>(rng()) : 0xFF;
      block[i] = high ? bits : static_cast<uint8_t>(~bits);
    }
    for (int j = 0; j < 16; ++j) block[192 + j] = static_cast<uint8_t>((j + b) % 2 ? 0x80 : 0x7F);
  }
  for (int64_t n : {12, 16}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ExpectAmxAndVnniBitIdentical(w.matrix, FullMagnitudeActivations(n, cols, 16, 3, rng), n);
  }
}

// MatMulMany (one quantization of x for consecutive weights that share it) gives each output
// the bits of its own MatMul, for runs of formats that share the activation quantization and
// runs that do not (32-value formats with and without a min term, K formats, floats), on the
// single-token, token-group and AMX paths.
TEST(MatMulTest, ManyOutputsBitIdenticalToSeparateCalls) {
  const DType kinds[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K,
                         DType::kQ6_K, DType::kF16,  DType::kQ5_1, DType::kQ4_K};
  const int64_t cols = 512;
  uint32_t seed = 2100;
  std::vector<TestWeights> weights;
  for (DType dtype : kinds) weights.push_back(MakeWeights(dtype, 37, cols, ++seed));
  for (int64_t n : {1, 5, 20, 33}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> x = RandomActivations(n, cols, ++seed);
    std::vector<std::vector<float>> ys(weights.size(), std::vector<float>(n * 37, -1.0f));
    std::vector<MatMulOutput> outputs;
    for (size_t i = 0; i < weights.size(); ++i) outputs.push_back({&weights[i].matrix, ys[i].data()});
    ThreadPool pool(2);
    MatMulScratch scratch(n, cols);
    MatMulMany(outputs, x.data(), n, pool, scratch);
    for (size_t i = 0; i < weights.size(); ++i) {
      SCOPED_TRACE(std::string(tensor::DTypeName(kinds[i])));
      std::vector<float> want = RunMatMul(weights[i].matrix, x, n, 2);
      for (size_t j = 0; j < want.size(); ++j) ASSERT_TRUE(BitEqual(ys[i][j], want[j])) << j;
    }
  }
}

// Rows quantized once for a batch and gathered (a mixture of experts' inputs: each expert's
// tokens picked from the step's rows) give, through MatMulManyQuantized, the bits MatMulMany
// gives for the gathered float rows: every integer format, the few-token, lanes, token-group
// and AMX paths (n 1 to 70), 1 and 3 threads, two outputs sharing the rows (gate and up).
TEST(MatMulTest, QuantizedRowsGatheredBitIdenticalToFloatRows) {
  uint32_t seed = 5100;
  for (DType dtype : kAllTypes) {
    if (!IsQuant(dtype)) continue;
    const int64_t cols = IsK(dtype) ? 512 : 160, rows = 37, batch = 80;
    const TestWeights gate = MakeWeights(dtype, rows, cols, ++seed);
    const TestWeights up = MakeWeights(dtype, rows + 16, cols, ++seed);
    const std::vector<float> x = RandomActivations(batch, cols, ++seed);
    const int64_t block = MatMulActivationBlock(dtype);
    ASSERT_EQ(block, IsK(dtype) ? 256 : 32);
    std::vector<int8_t> q(static_cast<size_t>(batch * cols));
    std::vector<float> d(static_cast<size_t>(batch * cols / block));
    std::vector<int16_t> sums(static_cast<size_t>(batch * cols / 16));
    QuantizeRowsForMatMul(dtype, x.data(), batch, cols, q.data(), d.data(), sums.data());
    for (int64_t n : {1, 2, 3, 7, 12, 13, 16, 17, 33, 64, 70}) {
      SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " n=" + std::to_string(n));
      std::mt19937 rng(++seed);
      std::vector<int64_t> picked(static_cast<size_t>(n));
      for (auto& t : picked) t = static_cast<int64_t>(rng() % batch);
      std::vector<float> xf(static_cast<size_t>(n * cols));
      std::vector<int8_t> gq(static_cast<size_t>(n * cols));
      std::vector<float> gd(static_cast<size_t>(n * cols / block));
      std::vector<int16_t> gs(static_cast<size_t>(n * cols / 16));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = picked[static_cast<size_t>(i)];
        std::copy_n(x.data() + t * cols, cols, xf.data() + i * cols);
        std::copy_n(q.data() + t * cols, cols, gq.data() + i * cols);
        std::copy_n(d.data() + t * (cols / block), cols / block, gd.data() + i * (cols / block));
        std::copy_n(sums.data() + t * (cols / 16), cols / 16, gs.data() + i * (cols / 16));
      }
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        MatMulScratch scratch(n, cols);
        if (!MatMulTakesQuantizedRows(gate.matrix, n)) continue;  // AMX tiles of a 32-value format
        std::vector<float> want_g(static_cast<size_t>(n * rows)), want_u(n * (rows + 16));
        std::vector<float> got_g(want_g.size(), -1.0f), got_u(want_u.size(), -1.0f);
        const MatMulOutput want[] = {{&gate.matrix, want_g.data()}, {&up.matrix, want_u.data()}};
        const MatMulOutput got[] = {{&gate.matrix, got_g.data()}, {&up.matrix, got_u.data()}};
        MatMulMany(want, xf.data(), n, pool, scratch);
        MatMulManyQuantized(got, {gq.data(), gd.data(), gs.data(), cols, block}, n, pool, scratch);
        for (size_t i = 0; i < want_g.size(); ++i) {
          ASSERT_TRUE(BitEqual(got_g[i], want_g[i])) << "threads " << threads << " gate " << i;
        }
        for (size_t i = 0; i < want_u.size(); ++i) {
          ASSERT_TRUE(BitEqual(got_u[i], want_u[i])) << "threads " << threads << " up " << i;
        }
      }
    }
  }
}

// Single tokens (decode) of every integer format give the portable scheme's bits and the bits of
// the same token inside a batch, for row counts around the 16-row tiles of the single-token
// kernels, odd and even block counts, and 1-3 threads. Q8_0 also gets raw random blocks (codes
// -128..127, as a file may hold; f16 scales of every magnitude).
TEST(MatMulTest, SingleTokenBitIdenticalToPortableAndBatch) {
  uint32_t seed = 1700;
  for (DType dtype : kAllTypes) {
    if (!IsQuant(dtype)) continue;
    const std::vector<int64_t> col_counts = IsK(dtype) ? std::vector<int64_t>{256, 768, 1280}
                                                       : std::vector<int64_t>{32, 96, 768, 2048};
    for (int64_t rows : {1, 15, 16, 17, 48, 61}) {
      for (int64_t cols : col_counts) {
        for (bool raw : {false, true}) {
          if (raw && dtype != DType::kQ8_0 && dtype != DType::kMXFP4) continue;
          SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " rows=" + std::to_string(rows) +
                       " cols=" + std::to_string(cols) + (raw ? " raw" : ""));
          TestWeights w = MakeWeights(dtype, rows, cols, ++seed);
          if (raw) {
            std::mt19937 rng(++seed);
            for (size_t i = 0; i < w.bytes.size(); ++i) {
              w.bytes[i] = static_cast<uint8_t>(rng());
              if (dtype == DType::kQ8_0 && i % 34 == 1) {
                w.bytes[i] &= 0xBB;  // f16 scale: finite, |d| < 2, either sign
              } else if (dtype == DType::kMXFP4 && i % 17 == 0) {
                // E8M0 scale 2^(e - 128) for e < 136, the subnormals e = 0 and 1 included
                w.bytes[i] = static_cast<uint8_t>(i / 17 % 7 == 0 ? i / 17 / 7 % 2 : w.bytes[i] % 136);
              }
            }
          }
          std::vector<float> x = RandomActivations(1, cols, ++seed);
          std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero activation block
          std::vector<float> want(static_cast<size_t>(rows));
          MatMulPortable(w.matrix, x.data(), 1, want.data());
          for (int threads : {1, 2, 3}) {
            std::vector<float> got = RunMatMul(w.matrix, x, 1, threads);
            for (int64_t r = 0; r < rows; ++r) {
              ASSERT_TRUE(BitEqual(got[r], want[r]))
                  << "threads " << threads << " row " << r << ": " << got[r] << " vs " << want[r];
            }
          }
          // A batch past the token tiles and a few tokens (MXFP4 rows up to 15: two passes at 12).
          for (auto [n, at] : {std::pair<int64_t, int64_t>{20, 7}, {6, 4}, {12, 9}}) {
            std::vector<float> batch = RandomActivations(n, cols, ++seed);
            std::copy(x.begin(), x.end(), batch.begin() + at * cols);
            std::vector<float> y = RunMatMul(w.matrix, batch, n, 2);
            for (int64_t r = 0; r < rows; ++r) {
              ASSERT_TRUE(BitEqual(y[at * rows + r], want[r])) << "n " << n << " row " << r;
            }
          }
        }
      }
    }
  }
}

// n random tokens (the last one's first 32 activations zero) times w: y[t, r] equals the
// portable oracle, with 1 and 3 threads, and the last token's row equals that token alone (the
// single-token path).
void ExpectTokensMatchPortableAndAlone(const TestWeights& w, int64_t n, uint32_t seed) {
  const int64_t rows = w.matrix.rows, cols = w.matrix.cols;
  std::vector<float> x = RandomActivations(n, cols, seed);
  std::fill(x.begin() + (n - 1) * cols, x.begin() + (n - 1) * cols + 32, 0.0f);
  std::vector<float> want(static_cast<size_t>(n * rows));
  MatMulPortable(w.matrix, x.data(), n, want.data());
  const int64_t last = n - 1;
  const std::vector<float> alone(x.begin() + last * cols, x.end());
  const std::vector<float> y1 = RunMatMul(w.matrix, alone, 1, 1);
  for (int threads : {1, 3}) {
    const std::vector<float> got = RunMatMul(w.matrix, x, n, threads);
    for (int64_t i = 0; i < n * rows; ++i) {
      ASSERT_TRUE(BitEqual(got[i], want[i]))
          << "threads " << threads << " token " << i / rows << " row " << i % rows << ": "
          << got[i] << " vs " << want[i];
    }
    for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(BitEqual(got[last * rows + r], y1[r])) << r;
  }
}

// Decode steps with a few tokens per matrix (a mixture of experts' experts in a batched step):
// every n from 1 to 16 (the gemv rows, the token-group tiles and AMX), every integer format, a
// few row counts around the 16-row tiles; y[t, r] equals the portable oracle and the token alone,
// with 1 and 3 threads.
TEST(MatMulTest, FewTokensBitIdenticalToPortableAndAlone) {
  uint32_t seed = 2900;
  for (DType dtype : kAllTypes) {
    if (!IsQuant(dtype)) continue;
    const int64_t cols = IsK(dtype) ? 512 : 96;
    for (int64_t rows : {13, 33}) {
      TestWeights w = MakeWeights(dtype, rows, cols, ++seed);
      for (int64_t n = 1; n <= 16; ++n) {
        SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " rows=" + std::to_string(rows) +
                     " n=" + std::to_string(n));
        ExpectTokensMatchPortableAndAlone(w, n, ++seed);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A batched decode step's dense matrices (16 sequences; up to 64 tokens): n from 13 to 65 (the
// lanes rows of Q4_K and Q6_K on AVX-512 VNNI without AMX, in passes of up to 8 tokens; the
// Q8_0 rows there, in passes of one or two token groups over tiles of 8 rows; AMX, or the
// token-group tiles), every integer format, row counts around the 16-row tiles (a short last
// tile; 97 rows: several tiles within each of 3 threads' ranges) and three or more blocks, so that a change in the per-block f32 chain changes
// bits; y[t, r] equals the portable oracle and the token alone, with 1 and 3 threads. Q8_0, Q4_K
// and Q6_K also get raw random blocks (every code, scale and min), and a matrix wide enough that
// the tokens come in two chunks (ChunkTokens: 16 tokens of 8448 columns: 40 tokens in three).
TEST(MatMulTest, LanesTokensBitIdenticalToPortableAndAlone) {
  uint32_t seed = 4100;
  for (DType dtype : kAllTypes) {
    if (!IsQuant(dtype)) continue;
    const bool lanes = dtype == DType::kQ8_0 || dtype == DType::kQ4_K || dtype == DType::kQ6_K;
    for (auto [rows, cols, raw] : {std::tuple<int64_t, int64_t, bool>{13, IsK(dtype) ? 768 : 160, false},
                                   {47, IsK(dtype) ? 1024 : 288, false},
                                   {33, IsK(dtype) ? 768 : 160, true},
                                   {97, IsK(dtype) ? 768 : 160, false},
                                   {17, 8448, false}}) {
      if ((raw || cols == 8448 || rows == 97) && !lanes) continue;
      TestWeights w = MakeWeights(dtype, rows, cols, ++seed);
      if (raw && dtype == DType::kQ8_0) {
        std::mt19937 rng(++seed);
        for (size_t i = 0; i < w.bytes.size(); ++i) {
          w.bytes[i] = static_cast<uint8_t>(rng());
          if (i % 34 == 1) w.bytes[i] &= 0xBB;  // f16 scale: finite, |d| < 2, either sign
        }
      } else if (raw) {
        RandomizeKBlocks(w, ++seed);
      }
      const std::vector<int64_t> counts =
          cols == 8448 ? std::vector<int64_t>{20, 40} : std::vector<int64_t>{13, 14, 15, 16, 17, 19, 24, 31, 32, 33, 48, 64, 65};
      for (int64_t n : counts) {
        SCOPED_TRACE(std::string(tensor::DTypeName(dtype)) + " rows=" + std::to_string(rows) +
                     " cols=" + std::to_string(cols) + (raw ? " raw" : "") +
                     " n=" + std::to_string(n));
        ExpectTokensMatchPortableAndAlone(w, n, ++seed);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(MatMulTest, QuantizeActivationRowRoundsToBlockScale) {
  std::vector<float> x(64, 0.0f);
  x[0] = 1.27f;
  x[1] = -0.5f;
  x[40] = -3.0f;
  std::vector<int8_t> q(64);
  std::vector<float> d(2);
  QuantizeActivationRow(x.data(), 64, q.data(), d.data());
  EXPECT_FLOAT_EQ(d[0], 1.27f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -50);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[40], -127);
  EXPECT_FLOAT_EQ(d[1], 3.0f / 127.0f);
}

}  // namespace
}  // namespace kvserve::kernels
