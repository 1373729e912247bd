// MlaAttention alone (kernels/cpu/mla_attention.h), deepseek2's `small` preset shape (8 heads,
// latent 256 + 64 rope values, F16 latent cache, blocks of 16 scattered over the arena),
// threads from KVSERVE_BENCH_THREADS (default 2):
//   BM_MlaDecodeBatch/<seqs>/<cold>/<layers>
//                                     `seqs` sequences with 128-228 cached positions each
//                                     decoding one token through `layers` layers (tokens_per_s
//                                     counts the step's tokens; latent_bytes_per_s the rows
//                                     read). cold = 1: a 256 MiB buffer is read between steps
//                                     (untimed), so the rows come from memory as in a real
//                                     step, whose weights evict them; 1 layer of 16 sequences
//                                     (1.8 MB) stays in L2.
//   BM_MlaPrefill/<tokens>            one layer's causal attention of a prompt computed in
//                                     512-token chunks (tokens_per_s)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "bench_threads.h"
#include "core/thread_pool.h"
#include "kernels/cpu/mla_attention.h"
#include "tensor/quant.h"

namespace kvserve::kernels {
namespace {

const int kThreads = bench::BenchThreads();
constexpr int kBlock = 16;
constexpr MlaShape kShape{.num_heads = 8, .kv_lora_rank = 256, .rope_dim = 64, .scale = 0.07f};
constexpr tensor::DType kDtype = tensor::DType::kF16;

struct Latent {
  tensor::PagedLatentView view;
  std::vector<std::byte> bytes;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSequence> seqs;
  int64_t rows = 0;
  int64_t cached_rows = 0;
};

// `layers` layers; sequence s holds positions [0, context[s]) and decodes `tokens[s]` more.
Latent MakeLatent(int layers, const std::vector<int32_t>& context,
                  const std::vector<int32_t>& tokens) {
  Latent c;
  const int dim = kShape.latent_dim();
  const size_t row = static_cast<size_t>(tensor::RowBytes(kDtype, dim));
  int32_t blocks = 0;
  for (size_t s = 0; s < context.size(); ++s) {
    blocks += (context[s] + tokens[s] + kBlock - 1) / kBlock;
  }
  c.bytes.resize(row * kBlock * blocks * layers);
  c.view.block_size = kBlock;
  c.view.latent_dtype = kDtype;
  c.view.latent_elems = dim;
  for (int l = 0; l < layers; ++l) {
    c.view.layers.push_back({c.bytes.data() + row * kBlock * blocks * l, nullptr, row * kBlock,
                             row, 0});
  }
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(3);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(dim);
  size_t next = 0;
  for (size_t s = 0; s < context.size(); ++s) {
    const int32_t n = (context[s] + tokens[s] + kBlock - 1) / kBlock;
    c.tables.emplace_back(ids.begin() + next, ids.begin() + next + n);
    next += n;
  }
  for (size_t s = 0; s < context.size(); ++s) {
    for (int l = 0; l < layers; ++l) {
      for (int32_t p = 0; p < context[s] + tokens[s]; ++p) {
        for (float& v : values) v = dist(rng);
        tensor::QuantizeRow(kDtype, values.data(),
                            c.view.LatentRow(l, c.tables[s][p / kBlock], p % kBlock), dim);
      }
    }
    c.seqs.push_back({c.rows, tokens[s], context[s], c.tables[s]});
    c.rows += tokens[s];
    c.cached_rows += context[s] + tokens[s];
  }
  return c;
}

void BM_MlaDecodeBatch(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool cold = state.range(1) != 0;
  const int kLayers = static_cast<int>(state.range(2));
  std::mt19937 rng(9);
  std::vector<int32_t> context(n), tokens(n, 1);
  for (int32_t& c : context) c = 128 + static_cast<int32_t>(rng() % 100);
  Latent c = MakeLatent(kLayers, context, tokens);
  const int64_t width = int64_t{kShape.num_heads} * kShape.latent_dim();
  std::vector<float> q(c.rows * width, 0.01f), out(c.rows * width);
  ThreadPool pool(kThreads);
  MlaScratch scratch(kShape, 512, kThreads);
  std::vector<char> flush(cold ? 256 << 20 : 0, 1);
  int64_t sink = 0;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      for (size_t i = 0; i < flush.size(); i += 64) sink += flush[i]++;
      state.ResumeTiming();
    }
    for (int l = 0; l < kLayers; ++l) {
      MlaAttention(kShape, c.view, l, c.seqs, q.data(), out.data(), pool, scratch);
    }
    benchmark::DoNotOptimize(out.data());
  }
  benchmark::DoNotOptimize(sink);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["latent_bytes_per_s"] = benchmark::Counter(
      static_cast<double>(c.cached_rows) * kLayers * tensor::RowBytes(kDtype, kShape.latent_dim()),
      benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlaDecodeBatch)->Args({16, 0, 8})->Args({16, 1, 8})->Args({16, 0, 1})->Args({1, 0, 8})->UseRealTime();

void BM_MlaPrefill(benchmark::State& state) {
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  constexpr int32_t kChunkTokens = 512;
  Latent c = MakeLatent(1, {0}, {tokens});
  const int64_t width = int64_t{kShape.num_heads} * kShape.latent_dim();
  std::vector<float> q(int64_t{kChunkTokens} * width, 0.01f), out(q.size());
  ThreadPool pool(kThreads);
  MlaScratch scratch(kShape, tokens, kThreads);
  for (auto _ : state) {
    for (int32_t start = 0; start < tokens; start += kChunkTokens) {
      const std::vector<AttentionSequence> seqs = {
          {0, std::min(kChunkTokens, tokens - start), start, c.tables[0]}};
      MlaAttention(kShape, c.view, 0, seqs, q.data(), out.data(), pool, scratch);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlaPrefill)->Arg(2048)->UseRealTime();

}  // namespace
}  // namespace kvserve::kernels

BENCHMARK_MAIN();
