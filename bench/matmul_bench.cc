// MatMul throughput (kernels/cpu/matmul.h) and the machine's memory read bandwidth.
//
// BM_MatMul/<dtype>/<rows>/<cols>/<n>: y (n, rows) = x (n, cols) W^T with a 2-thread pool.
//   Counters: GFLOPs = 2 rows cols n / s; WeightGBs = weight bytes / s.
// BM_Model110m/<dtype>/<n>: every matmul of a 110m llama (dim 768, 12 layers, FFN 2048,
//   vocab 32000; 12 distinct layers of weights, so decode streams ~all weights from memory)
//   for n tokens; counter TokPerS = n / s (an upper bound on a whole forward pass).
// BM_ExpertStream/<dtype>/<rows>/<cols>/<n>/<order>: 640 MiB of expert matrices, each in
//   turn for n tokens (a batched MoE decode step's few-token rows, weights from memory), in
//   address order (0) or scattered (1: the next matrix is not the memory after this one, as an
//   expert's gate, up and down; 2: scattered, each MatMul told the next matrix, as MoeFfnBlock
//   does); WeightGBs.
// BM_MatMulCold/<dtype>/<rows>/<cols>/<n>: BM_MatMul with the weights from memory (copies
//   filling 512 MiB in 2 MiB pages, one per iteration), as a decode step's dense matrices after the experts.
// BM_MemoryReadBandwidth: sums a 256 MiB buffer with 2 threads; counter GBs.
// Set KVSERVE_BENCH_THREADS to change the thread count (default 2).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <vector>

#include "bench_threads.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

using tensor::DType;

// Indexed by the first benchmark argument.
constexpr DType kTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,   DType::kQ8_0,
                            DType::kQ4_0, DType::kQ4_K,   DType::kQ5_K,   DType::kQ6_K,
                            DType::kQ2_K, DType::kQ3_K,   DType::kQ4_1,   DType::kQ5_0,
                            DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

ThreadPool& Pool() {
  static ThreadPool pool(bench::BenchThreads());
  return pool;
}

// Weight bytes with plausible values: floats in [-1, 1); quantized rows are 16 distinct rows of
// Gaussian-like values (sum of uniforms) through the format's quantizer, repeated.
std::vector<uint8_t> MakeWeightBytes(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * tensor::RowBytes(dtype, cols)));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  const int64_t count = rows * cols;
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
    for (int64_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(next() % 65536) / 32768.0f - 1.0f;
      if (dtype == DType::kF32) {
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kF16 ? tensor::F32ToF16(v) : tensor::F32ToBF16(v);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    return bytes;
  }
  const int64_t row_bytes = tensor::RowBytes(dtype, cols);
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t r = 0; r < std::min<int64_t>(rows, 16); ++r) {
    for (float& v : values) {
      v = (static_cast<float>(next() % 4096) + static_cast<float>(next() % 4096)) / 4096.0f - 1.0f;
    }
    tensor::QuantizeRow(dtype, values.data(), bytes.data() + r * row_bytes, cols);
  }
  for (int64_t r = 16; r < rows; ++r) {
    std::memcpy(bytes.data() + r * row_bytes, bytes.data() + (r % 16) * row_bytes,
                static_cast<size_t>(row_bytes));
  }
  return bytes;
}

std::vector<float> MakeActivations(int64_t n, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  return x;
}

void BM_MatMul(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  std::vector<uint8_t> bytes = MakeWeightBytes(dtype, rows, cols, 1);
  WeightMatrix w{bytes.data(), dtype, rows, cols};
  std::vector<float> x = MakeActivations(n, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  MatMulScratch scratch(n, cols);
  for (auto _ : state) {
    MatMul(w, x.data(), n, y.data(), Pool(), scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(tensor::DTypeName(dtype)) + " " + std::string(MatMulTargetName()));
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * rows * cols * n * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["WeightGBs"] = benchmark::Counter(static_cast<double>(bytes.size()) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  for (int t = 0; t < static_cast<int>(std::size(kTypes)); ++t)
    for (auto [rows, cols] : {std::pair{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}})
      for (int n : {1, 16, 512}) b->Args({t, rows, cols, n});
}
BENCHMARK(BM_MatMul)->Apply(MatMulArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
// gpt-oss small's experts (MXFP4, 512 x 1024 and 1024 x 512) with the few tokens a mixture of
// experts' decode step gives each expert.
BENCHMARK(BM_MatMul)
    ->ArgsProduct({{15}, {512, 1024}, {1024}, {1, 2, 3, 4, 6, 8, 16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The dense matrices of the MoE `small` presets' 16-sequence decode step (attention projections
// in Q4_K or Q8_0 (gpt-oss), the 32000 x 1024 output matrix in Q6_K or Q8_0), 16 tokens: the
// one-group AMX pipelines, or without AMX the lanes rows (Q4_K, Q6_K) and the Q8_0 rows.
BENCHMARK(BM_MatMul)
    ->ArgsProduct({{3, 5, 7}, {1024, 32000}, {1024}, {16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A batched decode step's dense matrices (Q8_0, Q4_K, Q6_K; 2048 x 1024) from 12 tokens (the gemv
// rows) through the lanes rows of CPUs without AMX (13-64).
BENCHMARK(BM_MatMul)
    ->ArgsProduct({{3, 5, 7}, {2048}, {1024}, {12, 13, 16, 24, 32, 48, 64}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The same matrices with the weights read from memory, as in a mixture of experts' decode step
// (the experts evict the dense matrices between uses): copies of the matrix filling 512 MiB,
// one after another per iteration, with the 2-thread pool. WeightGBs as BM_MatMul.
void BM_MatMulCold(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const std::vector<uint8_t> one = MakeWeightBytes(dtype, rows, cols, 1);
  const int64_t count = std::max<int64_t>(2, (int64_t{512} << 20) / static_cast<int64_t>(one.size()));
  // 2 MiB pages where the kernel offers them, as the model's weights (GgufFile::MoveTensorDataToHugePages)
  const size_t size = one.size() * static_cast<size_t>(count), huge = size_t{2} << 20;
  std::unique_ptr<uint8_t, decltype(&std::free)> bytes(
      static_cast<uint8_t*>(std::aligned_alloc(huge, (size + huge - 1) / huge * huge)), &std::free);
  ::madvise(bytes.get(), size, MADV_HUGEPAGE);
  for (int64_t m = 0; m < count; ++m) std::memcpy(bytes.get() + m * one.size(), one.data(), one.size());
  std::vector<float> x = MakeActivations(n, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  MatMulScratch scratch(n, cols);
  int64_t m = 0;
  for (auto _ : state) {
    const WeightMatrix w{bytes.get() + m * one.size(), dtype, rows, cols};
    MatMul(w, x.data(), n, y.data(), Pool(), scratch);
    m = (m + 1) % count;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(tensor::DTypeName(dtype)));
  state.counters["WeightGBs"] = benchmark::Counter(static_cast<double>(one.size()) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMulCold)
    ->ArgsProduct({{5, 7}, {1024, 32000}, {1024}, {16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A mixture of experts' expert matrices (Qwen3-MoE `small`: dim 1024, expert FFN 256) with the
// few tokens a batched decode step routes to each expert.
void BM_ExpertMatMul(benchmark::State& state) {
  BM_MatMul(state);
}
void ExpertArgs(benchmark::internal::Benchmark* b) {
  for (int t : {3, 5, 6, 7})  // Q8_0, Q4_K, Q5_K, Q6_K
    for (auto [rows, cols] : {std::pair{256, 1024}, {1024, 256}})
      for (int n : {1, 2, 3, 4, 6, 8, 12, 16}) b->Args({t, rows, cols, n});
}
BENCHMARK(BM_ExpertMatMul)->Apply(ExpertArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same expert matrices streamed from memory as in a batched decode step: 640 MiB of them
// (more than this host's caches), each in turn with n tokens, one thread (the pool's threads
// take whole matrices, as MoeFfnBlock's whole-expert path does). WeightGBs is the rate the
// few-token rows read weights at, to set against BM_MemoryReadBandwidth.
void BM_ExpertStream(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const int64_t order = state.range(4);
  const std::vector<uint8_t> one = MakeWeightBytes(dtype, rows, cols, 1);
  int64_t count = (int64_t{640} << 20) / static_cast<int64_t>(one.size());
  if (count % 7919 == 0) --count;  // the scattered order's stride must be coprime with count
  std::vector<uint8_t> bytes(one.size() * static_cast<size_t>(count));
  for (int64_t m = 0; m < count; ++m)
    std::memcpy(bytes.data() + m * one.size(), one.data(), one.size());
  const std::vector<float> x = MakeActivations(n, cols);
  const int threads = Pool().num_threads();
  std::vector<std::vector<float>> y(static_cast<size_t>(threads),
                                    std::vector<float>(static_cast<size_t>(n * rows)));
  std::vector<std::unique_ptr<MatMulScratch>> scratch;
  std::vector<std::unique_ptr<ThreadPool>> serial;
  for (int t = 0; t < threads; ++t) {
    scratch.push_back(std::make_unique<MatMulScratch>(n, cols));
    serial.push_back(std::make_unique<ThreadPool>(1));
  }
  for (auto _ : state) {
    Pool().ParallelFor(
        static_cast<size_t>(count),
        [&](size_t begin, size_t end, int t) {
          // scattered: matrices out of address order, so the memory after one matrix is not
          // the next one read (as a mixture of experts' gate, up and down tensors)
          auto matrix = [&](size_t i) {
            return bytes.data() + (order > 0 ? i * 7919 % static_cast<size_t>(count) : i) * one.size();
          };
          for (size_t i = begin; i < end; ++i) {
            const WeightMatrix w{matrix(i), dtype, rows, cols};
            const void* then = order == 2 && i + 1 < end ? matrix(i + 1) : nullptr;
            MatMul(w, x.data(), n, y[static_cast<size_t>(t)].data(),
                   *serial[static_cast<size_t>(t)], *scratch[static_cast<size_t>(t)], then);
          }
        },
        1);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(tensor::DTypeName(dtype)));
  state.counters["WeightGBs"] = benchmark::Counter(static_cast<double>(bytes.size()) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ExpertStream)
    ->ArgsProduct({{5, 7}, {256, 1024}, {1024}, {1, 2, 3, 4, 8, 10, 12, 16}, {0}})
    ->ArgsProduct({{5, 7}, {256}, {1024}, {1, 2, 3}, {1, 2}})
    ->ArgsProduct({{5, 7}, {1024}, {256}, {1, 2, 3}, {0, 1, 2}})  // an expert's down matrix
    ->ArgsProduct({{15}, {512}, {1024}, {1, 2, 3, 4}, {0, 1, 2}})  // gpt-oss small's experts
    ->ArgsProduct({{15}, {1024}, {512}, {1, 2, 3, 4}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// deepseek2 `small`'s per-head absorbed products (F32 attn_k_b 256 x 64, attn_v_b 64 x 256) for
// a lone decode and a 16-sequence step: in cache (BM_MatMul) and from memory (BM_ExpertStream).
void MlaHeadArgs(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : {std::pair{256, 64}, {64, 256}})
    for (int n : {1, 16}) b->Args({0, rows, cols, n});
}
void MlaHeadStreamArgs(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : {std::pair{256, 64}, {64, 256}})
    for (int n : {1, 16}) b->Args({0, rows, cols, n, 0});
}
BENCHMARK(BM_MatMul)->Apply(MlaHeadArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertStream)->Apply(MlaHeadStreamArgs)->Unit(benchmark::kMillisecond)->UseRealTime();

// All matmuls of the 110m preset, one forward of n tokens.
void BM_Model110m(benchmark::State& state) {
  constexpr int kLayers = 12, kDim = 768, kFfn = 2048, kVocab = 32000;
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  struct Layer {
    std::vector<uint8_t> qkvo[4], w1, w2, w3;
  };
  std::vector<Layer> layers(kLayers);
  uint64_t seed = 0;
  double total_bytes = 0;
  for (Layer& l : layers) {
    for (auto& m : l.qkvo) m = MakeWeightBytes(dtype, kDim, kDim, ++seed);
    l.w1 = MakeWeightBytes(dtype, kFfn, kDim, ++seed);
    l.w3 = MakeWeightBytes(dtype, kFfn, kDim, ++seed);
    l.w2 = MakeWeightBytes(dtype, kDim, kFfn, ++seed);
    total_bytes += 4.0 * l.qkvo[0].size() + 2.0 * l.w1.size() + l.w2.size();
  }
  std::vector<uint8_t> classifier = MakeWeightBytes(dtype, kVocab, kDim, ++seed);
  total_bytes += static_cast<double>(classifier.size());
  std::vector<float> x = MakeActivations(n, kFfn);
  std::vector<float> y(static_cast<size_t>(n * kVocab));
  MatMulScratch scratch(n, kFfn);
  auto run = [&](const std::vector<uint8_t>& m, int64_t rows, int64_t cols) {
    MatMul(WeightMatrix{m.data(), dtype, rows, cols}, x.data(), n, y.data(), Pool(), scratch);
  };
  for (auto _ : state) {
    for (const Layer& l : layers) {
      for (const auto& m : l.qkvo) run(m, kDim, kDim);
      run(l.w1, kFfn, kDim);
      run(l.w3, kFfn, kDim);
      run(l.w2, kDim, kFfn);
    }
    run(classifier, kVocab, kDim);
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(tensor::DTypeName(dtype)) + " " + std::string(MatMulTargetName()));
  state.counters["TokPerS"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["WeightGBs"] =
      benchmark::Counter(total_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Model110m)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {1, 512}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Sums 256 MiB of uint64 with the pool: the read bandwidth MatMul decode can hope for.
void BM_MemoryReadBandwidth(benchmark::State& state) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr size_t kWords = kBytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[kWords]);
  for (size_t i = 0; i < kWords; ++i) buf[i] = i;
  std::vector<uint64_t> partial(static_cast<size_t>(Pool().num_threads()) * 8);
  const uint64_t* data = buf.get();
  for (auto _ : state) {
    Pool().ParallelFor(
        kWords,
        [data, &partial](size_t begin, size_t end, int thread) {
          uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          size_t i = begin;
          for (; i + 4 <= end; i += 4) {
            s0 += data[i];
            s1 += data[i + 1];
            s2 += data[i + 2];
            s3 += data[i + 3];
          }
          for (; i < end; ++i) s0 += data[i];
          partial[static_cast<size_t>(thread) * 8] = s0 + s1 + s2 + s3;
        },
        4096);
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GBs"] = benchmark::Counter(static_cast<double>(kBytes) * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MemoryReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve::kernels
BENCHMARK_MAIN();
