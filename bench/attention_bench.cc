// PagedAttention alone (kernels/cpu/attention.h), the 110m preset's shape (12 query heads,
// 12 kv heads x 64 dims) unless noted, threads from KVSERVE_BENCH_THREADS (default 2):
//   BM_AttentionDecode/<kv dtype>/<context>   one decode token of one sequence through 12
//                                             layers whose K/V hold `context` positions
//                                             (tokens_per_s; kv_bytes_per_s = K/V read)
//   BM_AttentionDecodeGqa/<kv dtype>/<ctx>    the same with 14 query heads on 2 kv heads
//                                             (Qwen2-0.5B-like: the decode is split into
//                                             partitions so both threads work)
//   BM_AttentionDecodeBatch/<n>               n sequences of 512 positions decoding together
//   BM_AttentionDecodeBatchMoe/<shape>/<ctx>  16 sequences of ctx positions, the MoE presets'
//                                             shapes (see there)
//   BM_AttentionDecodeBatchMoeCached/<s>/<c>  the same with every sequence and layer reading
//                                             sequence 0's layer 0 (cache-resident K/V: the
//                                             kernel's arithmetic without the memory stream)
//   BM_AttentionPrefill/<kv dtype>/<tokens>   one layer's causal attention of a prompt computed
//                                             in 512-token chunks (tokens_per_s)
//   BM_WriteKv/<kv dtype>                     WriteKv of 512 tokens' K and V rows into 12
//                                             layers (tokens_per_s: tokens stored in all layers)
// K/V are random, stored as the dtype stores them, blocks of 16 scattered over the arena, laid
// out as the engine's (kv/arena.h): a block holds every layer's K page then V page, on
// transparent huge pages where the kernel gives them (madvise).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <sys/mman.h>

#include "bench_threads.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_dequant.h"
#include "tensor/dtype.h"

namespace kvserve::kernels {
namespace {

const int kThreads = bench::BenchThreads();
constexpr int kBlock = 16;

// Zeroed memory aligned to 2 MiB, madvised for transparent huge pages as the engine's arena.
struct HugeBuffer {
  static constexpr size_t kHuge = size_t{2} << 20;
  explicit HugeBuffer(size_t n) : mapped((n + 2 * kHuge - 1) / kHuge * kHuge) {
    raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) std::abort();
    const uintptr_t at = (reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge;
    data = reinterpret_cast<std::byte*>(at);
    ::madvise(data, n, MADV_HUGEPAGE);  // a hint
  }
  ~HugeBuffer() { ::munmap(raw, mapped); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  size_t mapped;
  void* raw;
  std::byte* data;
};

struct Cache {
  tensor::PagedKvView view;
  std::unique_ptr<HugeBuffer> bytes;
  std::vector<std::vector<int32_t>> tables;  // one per sequence
};

// `layers` layers of `seqs` sequences x `positions` positions each, random K/V, blocks shuffled.
Cache MakeCache(const AttentionShape& shape, tensor::DType dtype, int layers, int seqs,
                int32_t positions) {
  Cache c;
  c.view = tensor::MakePagedKvView(layers, shape.num_kv_heads, shape.head_dim, dtype, kBlock);
  const int32_t per_seq = (positions + kBlock - 1) / kBlock;
  const int32_t blocks = per_seq * seqs;
  const size_t page = static_cast<size_t>(tensor::RowBytes(
                           dtype, int64_t{shape.num_kv_heads} * shape.head_dim)) * kBlock;
  const size_t block_bytes = 2 * page * layers;
  c.bytes = std::make_unique<HugeBuffer>(block_bytes * blocks);
  for (int l = 0; l < layers; ++l) {
    std::byte* base = c.bytes->data + 2 * page * l;
    c.view.layers[l] = {base, base + page, block_bytes};
  }
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(5);
  std::shuffle(ids.begin(), ids.end(), rng);
  uint32_t x = 1;  // cheap uniform values in [-1, 1): setup stays short for 16K contexts
  auto uniform = [&x] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(x >> 8) * 0x1p-23f - 1.0f;
  };
  std::vector<float> row(c.view.row_elems);
  for (int s = 0; s < seqs; ++s) {
    c.tables.emplace_back(ids.begin() + s * per_seq, ids.begin() + (s + 1) * per_seq);
    for (int l = 0; l < layers; ++l) {
      for (int32_t p = 0; p < positions; ++p) {
        const int32_t block = c.tables[s][p / kBlock];
        for (float& v : row) v = uniform();
        StoreKvRow(c.view, l, KvPart::kKey, block, p % kBlock, row.data());
        for (float& v : row) v = uniform();
        StoreKvRow(c.view, l, KvPart::kValue, block, p % kBlock, row.data());
      }
    }
  }
  return c;
}

AttentionShape Shape(int heads, int kv_heads, int head_dim = 64) {
  return {heads, kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim)),
          std::nullopt, std::nullopt};
}

// cached: every sequence and layer reads sequence 0's layer 0 (K/V stay in L2).
void Decode(benchmark::State& state, const AttentionShape& shape, tensor::DType dtype, int seqs,
            int32_t context, bool cached = false) {
  constexpr int kLayers = 12;
  Cache c = MakeCache(shape, dtype, kLayers, seqs, context);
  std::vector<AttentionSequence> batch;
  for (int s = 0; s < seqs; ++s) batch.push_back({s, 1, context - 1, c.tables[cached ? 0 : s]});
  std::vector<float> q(static_cast<size_t>(seqs) * shape.num_heads * shape.head_dim, 0.01f);
  std::vector<float> out(q.size());
  ThreadPool pool(kThreads);
  AttentionScratch scratch(shape, context, kThreads);
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      PagedAttention(shape, c.view, cached ? 0 : l, batch, q.data(), out.data(), pool, scratch);
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * kLayers * seqs * context *
                          tensor::RowBytes(dtype, int64_t{shape.num_kv_heads} * shape.head_dim);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(seqs) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["kv_bytes_per_s"] =
      benchmark::Counter(kv_bytes * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(AttentionTargetName());
}

void BM_AttentionDecode(benchmark::State& state, tensor::DType dtype) {
  Decode(state, Shape(12, 12), dtype, 1, static_cast<int32_t>(state.range(0)));
}
void BM_AttentionDecodeGqa(benchmark::State& state, tensor::DType dtype) {
  Decode(state, Shape(14, 2), dtype, 1, static_cast<int32_t>(state.range(0)));
}
void BM_AttentionDecodeBatch(benchmark::State& state) {
  Decode(state, Shape(12, 12), tensor::DType::kF16, static_cast<int>(state.range(0)), 512);
}

// The MoE small presets' attention in the 16-sequence decode step (contexts as in
// `kvserve bench throughput --input-len 128` at 128-256 positions, and 1024): 0 = qwen2moe
// (16 heads on 16 kv heads x 64), 1 = qwen3moe (8 on 4 x 128), 2 = gpt-oss's shape (16 on 4 x
// 64; no sinks or window here).
const AttentionShape kMoeShapes[] = {Shape(16, 16), Shape(8, 4, 128), Shape(16, 4)};
void BM_AttentionDecodeBatchMoe(benchmark::State& state) {
  Decode(state, kMoeShapes[state.range(0)], tensor::DType::kF16, 16,
         static_cast<int32_t>(state.range(1)));
}
void BM_AttentionDecodeBatchMoeCached(benchmark::State& state) {
  Decode(state, kMoeShapes[state.range(0)], tensor::DType::kF16, 16,
         static_cast<int32_t>(state.range(1)), /*cached=*/true);
}

void BM_AttentionPrefill(benchmark::State& state, tensor::DType dtype) {
  constexpr int32_t kChunk = 512;
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  const AttentionShape shape = Shape(12, 12);
  Cache c = MakeCache(shape, dtype, 1, 1, tokens);
  std::vector<float> q(static_cast<size_t>(kChunk) * shape.num_heads * shape.head_dim, 0.01f);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (float& v : q) v = normal(rng);
  std::vector<float> out(q.size());
  ThreadPool pool(kThreads);
  AttentionScratch scratch(shape, tokens, kThreads);
  for (auto _ : state) {
    for (int32_t start = 0; start < tokens; start += kChunk) {
      const AttentionSequence seq{0, std::min(kChunk, tokens - start), start, c.tables[0]};
      PagedAttention(shape, c.view, 0, std::span(&seq, 1), q.data(), out.data(), pool, scratch);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens) * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(AttentionTargetName());
}

void BM_WriteKv(benchmark::State& state, tensor::DType dtype) {
  constexpr int32_t kTokens = 512;
  constexpr int kLayers = 12;
  const AttentionShape shape = Shape(12, 12);
  Cache big = MakeCache(shape, dtype, kLayers, 1, kTokens);
  std::vector<float> k(static_cast<size_t>(kTokens) * big.view.row_elems);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : k) x = normal(rng);
  const AttentionSequence seq{0, kTokens, 0, big.tables[0]};
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) WriteKv(big.view, l, std::span(&seq, 1), k.data(), k.data(), pool);
    benchmark::DoNotOptimize(big.bytes->data);
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kTokens) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_AttentionDecode, f16, tensor::DType::kF16)
    ->Arg(256)->Arg(2048)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecode, bf16, tensor::DType::kBF16)
    ->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecode, q8_0, tensor::DType::kQ8_0)
    ->Arg(256)->Arg(2048)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecode, fp8, tensor::DType::kFP8_E4M3_E8M0_32)
    ->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecode, fp4, tensor::DType::kFP4_E2M1_E4M3_16)
    ->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecodeGqa, f16, tensor::DType::kF16)
    ->Arg(2048)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionDecodeBatch)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionDecodeBatchMoe)
    ->ArgsProduct({{0, 1, 2}, {128, 256, 1024}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionDecodeBatchMoeCached)
    ->ArgsProduct({{0, 1, 2}, {256}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionPrefill, f16, tensor::DType::kF16)
    ->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionPrefill, q8_0, tensor::DType::kQ8_0)
    ->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WriteKv, f16, tensor::DType::kF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WriteKv, bf16, tensor::DType::kBF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WriteKv, q8_0, tensor::DType::kQ8_0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WriteKv, fp8, tensor::DType::kFP8_E4M3_E8M0_32)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WriteKv, fp4, tensor::DType::kFP4_E2M1_E4M3_16)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve::kernels

BENCHMARK_MAIN();
