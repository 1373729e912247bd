// Forward-pass throughput of make-model's random-weight 110m llama (dim 768, 12 layers, 12 heads,
// FFN 2048, vocab 32000, ctx 32768, tied output) on CPU with 2 threads (KVSERVE_BENCH_THREADS): prefill of a 512-token
// prompt and decode of 128 tokens, weights in F16, Q8_0, Q4_K and Q6_K (every matrix in that
// type), KV in F16; batched decode of 1..64 sequences (issue 4);
// single-stream decode at context 256 and 2048 with F16, Q8_0 and FP8 KV (issue 3).
// The model file is generated once into /tmp.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_threads.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/kv_dequant.h"
#include "model/dense.h"
#include "model/dense_random.h"
#include "support/kv_arena.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

using testing::BlocksForTokens;
using testing::ContiguousBlockTable;
using testing::SimpleKvArena;

// Threads: KVSERVE_BENCH_THREADS, default 2 (the machine class of docs/PERFORMANCE.md).
const int kThreads = bench::BenchThreads();
constexpr int kPromptTokens = 512;
constexpr int kDecodeTokens = 128;
constexpr int kBlockSize = 16;

std::shared_ptr<const gguf::GgufFile> Model110M(tensor::DType dtype) {
  const std::string path =
      "/tmp/kvserve_bench_110m_preset_" + std::string(tensor::DTypeName(dtype)) + ".gguf";
  if (!std::filesystem::exists(path)) {  // = kvserve make-model --preset 110m --type DTYPE
    RandomWeights weights;
    weights.matrix_type = dtype;
    CHECK(DenseRandomWriter(*FindDensePreset("llama", "110m"), weights)->Write(path).ok()) << path;
  }
  auto file = gguf::GgufFile::Open(path);
  CHECK(file.ok()) << file.status().ToString();
  return std::move(file).value();
}

struct Fixture {
  std::unique_ptr<DenseModel> model;
  std::unique_ptr<SimpleKvArena> arena;
  std::vector<int32_t> table_ids;
  std::span<const int32_t> table[1];  // the one KV group's block table
  std::vector<int32_t> prompt;
  std::vector<float> logits;
};

Fixture MakeFixture(tensor::DType dtype) {
  Fixture f;
  LoadOptions options;
  options.max_batch_tokens = kPromptTokens;
  options.max_context_tokens = kPromptTokens + kDecodeTokens;
  options.max_threads = kThreads;
  auto model = DenseModel::Load(Model110M(dtype), options);
  CHECK(model.ok()) << model.status().ToString();
  f.model = std::move(model).value();
  const ModelConfig& c = f.model->config();
  const int32_t blocks = BlocksForTokens(kPromptTokens + kDecodeTokens, kBlockSize);
  f.arena = std::make_unique<SimpleKvArena>(static_cast<int>(c.num_layers),
                                            static_cast<int>(c.num_kv_heads),
                      static_cast<int>(c.head_dim), tensor::DType::kF16,
                                            kBlockSize, blocks);
  f.table_ids = ContiguousBlockTable(0, blocks);
  f.table[0] = f.table_ids;
  for (int i = 0; i < kPromptTokens; ++i) f.prompt.push_back((i * 7919 + 3) % 32000);
  f.logits.resize(c.vocab_size);
  return f;
}

void BM_Prefill512(benchmark::State& state, tensor::DType dtype) {
  Fixture f = MakeFixture(dtype);
  ThreadPool pool(kThreads);
  Batch batch;
  batch.sequences = {{f.prompt, 0, f.table, true}};
  for (auto _ : state) {
    f.model->Forward(batch, f.arena->views(), pool, f.logits.data());
    benchmark::DoNotOptimize(f.logits.data());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kPromptTokens) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Decode128(benchmark::State& state, tensor::DType dtype) {
  Fixture f = MakeFixture(dtype);
  ThreadPool pool(kThreads);
  Batch batch;
  const std::span<const int32_t> prompt(f.prompt.data(), 16);
  for (auto _ : state) {
    state.PauseTiming();
    batch.sequences = {{prompt, 0, f.table, true}};
    f.model->Forward(batch, f.arena->views(), pool, f.logits.data());
    state.ResumeTiming();
    int32_t token = 1;
    for (int i = 0; i < kDecodeTokens; ++i) {
      batch.sequences = {{std::span<const int32_t>(&token, 1), 16 + i, f.table, true}};
      f.model->Forward(batch, f.arena->views(), pool, f.logits.data());
      token = static_cast<int32_t>(std::max_element(f.logits.begin(), f.logits.end()) -
                                   f.logits.begin());
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kDecodeTokens) * state.iterations(), benchmark::Counter::kIsRate);
}

// Aggregate decode of state.range(0) sequences in one batch, each one token per step. The
// sequences share a 64-token prefix (4 blocks, prefilled once, outside the timing) through
// their block tables, as prefix caching would; each then owns its decode blocks.
void BM_DecodeBatch(benchmark::State& state, tensor::DType dtype) {
  constexpr int kPrefix = 64;
  constexpr int kSteps = 16;
  const int num_seqs = static_cast<int>(state.range(0));
  LoadOptions options;
  options.max_batch_tokens = std::max(kPrefix, num_seqs);
  options.max_context_tokens = kPrefix + kSteps;
  options.max_threads = kThreads;
  auto loaded = DenseModel::Load(Model110M(dtype), options);
  CHECK(loaded.ok()) << loaded.status().ToString();
  std::unique_ptr<DenseModel> model = std::move(loaded).value();
  const ModelConfig& c = model->config();
  const int32_t prefix_blocks = kPrefix / kBlockSize;
  const int32_t own_blocks = BlocksForTokens(kSteps, kBlockSize);
  SimpleKvArena arena(static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                      static_cast<int>(c.head_dim),
                      tensor::DType::kF16, kBlockSize, prefix_blocks + num_seqs * own_blocks);
  ThreadPool pool(kThreads);
  std::vector<int32_t> prompt(kPrefix);
  for (int i = 0; i < kPrefix; ++i) prompt[i] = (i * 7919 + 3) % 32000;
  std::vector<float> logits(static_cast<size_t>(num_seqs) * c.vocab_size);
  Batch batch;
  const std::vector<int32_t> prefix_ids = ContiguousBlockTable(0, prefix_blocks);
  const std::span<const int32_t> prefix_table[] = {prefix_ids};
  batch.sequences = {{prompt, 0, prefix_table, false}};
  std::vector<std::vector<int32_t>> table_ids(num_seqs);
  std::vector<std::span<const int32_t>> tables(num_seqs);  // (sequences): one group each
  for (int s = 0; s < num_seqs; ++s) {
    table_ids[s] = ContiguousBlockTable(0, prefix_blocks);
    for (int32_t b : ContiguousBlockTable(prefix_blocks + s * own_blocks, own_blocks)) {
      table_ids[s].push_back(b);
    }
    tables[s] = table_ids[s];
  }
  model->Forward(batch, arena.views(), pool, nullptr);
  std::vector<int32_t> tokens(num_seqs);
  for (auto _ : state) {
    for (int s = 0; s < num_seqs; ++s) tokens[s] = 1 + s;
    for (int step = 0; step < kSteps; ++step) {
      batch.sequences.clear();
      for (int s = 0; s < num_seqs; ++s) {
        batch.sequences.push_back(
            {std::span<const int32_t>(&tokens[s], 1), kPrefix + step,
             std::span<const std::span<const int32_t>>(tables).subspan(s, 1), true});
      }
      model->Forward(batch, arena.views(), pool, logits.data());
      for (int s = 0; s < num_seqs; ++s) {
        const float* row = logits.data() + static_cast<int64_t>(s) * c.vocab_size;
        tokens[s] = static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
      }
    }
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(kSteps) * num_seqs * state.iterations(),
                         benchmark::Counter::kIsRate);
}

// Single-stream decode of 32 tokens after a context of state.range(0) tokens whose K/V (random
// values, quantized as `kv_dtype` stores them) is written straight into the cache, so the
// benchmark measures decode at that context without the prefill. Q8_0 weights.
void BM_DecodeKv(benchmark::State& state, tensor::DType kv_dtype) {
  constexpr int kSteps = 32;
  const int context = static_cast<int>(state.range(0));
  LoadOptions options;
  options.max_batch_tokens = 16;
  options.max_context_tokens = context + kSteps;
  options.max_threads = kThreads;
  auto loaded = DenseModel::Load(Model110M(tensor::DType::kQ8_0), options);
  CHECK(loaded.ok()) << loaded.status().ToString();
  std::unique_ptr<DenseModel> model = std::move(loaded).value();
  const ModelConfig& c = model->config();
  const int32_t blocks = BlocksForTokens(context + kSteps, kBlockSize);
  SimpleKvArena arena(static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                      static_cast<int>(c.head_dim), kv_dtype,
                      kBlockSize, blocks);
  const tensor::PagedKvView& kv = arena.view();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(c.kv_row_elems());
  for (int layer = 0; layer < c.num_layers; ++layer) {
    for (int p = 0; p < context; ++p) {
      for (float& v : row) v = normal(rng);
      kernels::StoreKvRow(kv, layer, kernels::KvPart::kKey, p / kBlockSize, p % kBlockSize,
                          row.data());
      for (float& v : row) v = normal(rng);
      kernels::StoreKvRow(kv, layer, kernels::KvPart::kValue, p / kBlockSize, p % kBlockSize,
                          row.data());
    }
  }
  const std::vector<int32_t> table_ids = ContiguousBlockTable(0, blocks);
  const std::span<const int32_t> table[] = {table_ids};
  ThreadPool pool(kThreads);
  std::vector<float> logits(c.vocab_size);
  Batch batch;
  for (auto _ : state) {
    int32_t token = 1;
    for (int i = 0; i < kSteps; ++i) {
      batch.sequences = {{std::span<const int32_t>(&token, 1), context + i, table, true}};
      model->Forward(batch, arena.views(), pool, logits.data());
      token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                   logits.begin());
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kSteps) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Prefill512, f16, tensor::DType::kF16)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill512, q8_0, tensor::DType::kQ8_0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill512, q4_k, tensor::DType::kQ4_K)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill512, q6_k, tensor::DType::kQ6_K)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode128, f16, tensor::DType::kF16)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode128, q8_0, tensor::DType::kQ8_0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

BENCHMARK_CAPTURE(BM_Decode128, q4_k, tensor::DType::kQ4_K)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode128, q6_k, tensor::DType::kQ6_K)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

BENCHMARK_CAPTURE(BM_DecodeBatch, q8_0, tensor::DType::kQ8_0)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeKv, f16, tensor::DType::kF16)
    ->Arg(256)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeKv, q8_0, tensor::DType::kQ8_0)
    ->Arg(256)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeKv, fp8, tensor::DType::kFP8_E4M3_E8M0_32)
    ->Arg(256)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace kvserve::model

BENCHMARK_MAIN();
