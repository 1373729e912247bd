// Forward-pass throughput of a random-weight 110M llama (dim 768, 12 layers, 12 heads, FFN 2048,
// vocab 32000, ctx 32768) on CPU with 2 threads: prefill of a 512-token prompt and decode of 128
// tokens, weights in F16 and Q8_0, KV in F16. The model file is generated once into /tmp.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/dense_kv.h"
#include "model/llama.h"
#include "model/random_model.h"

namespace kvserve::model {
namespace {

constexpr int kThreads = 2;
constexpr int kPromptTokens = 512;
constexpr int kDecodeTokens = 128;
constexpr int kBlockSize = 16;

std::shared_ptr<const gguf::GgufFile> Model110M(tensor::DType dtype) {
  const std::string path =
      "/tmp/kvserve_bench_110m_" + std::string(tensor::DTypeName(dtype)) + ".gguf";
  if (!std::filesystem::exists(path)) {
    RandomModelSpec spec;
    spec.dim = 768;
    spec.num_layers = 12;
    spec.num_heads = 12;
    spec.num_kv_heads = 12;
    spec.ffn_dim = 2048;
    spec.vocab_size = 32000;
    spec.context_length = 32768;
    spec.matrix_dtype = dtype;
    CHECK(RandomModelWriter(spec).Write(path).ok()) << path;
  }
  auto file = gguf::GgufFile::Open(path);
  CHECK(file.ok()) << file.status().ToString();
  return std::move(file).value();
}

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<SimpleKvArena> arena;
  std::vector<int32_t> table;
  std::vector<int32_t> prompt;
  std::vector<float> logits;
};

Fixture MakeFixture(tensor::DType dtype) {
  Fixture f;
  LoadOptions options;
  options.max_batch_tokens = kPromptTokens;
  options.max_context_tokens = kPromptTokens + kDecodeTokens;
  options.max_threads = kThreads;
  auto model = LlamaModel::Load(Model110M(dtype), options);
  CHECK(model.ok()) << model.status().ToString();
  f.model = std::move(model).value();
  const ModelConfig& c = f.model->config();
  const int32_t blocks = BlocksForTokens(kPromptTokens + kDecodeTokens, kBlockSize);
  f.arena = std::make_unique<SimpleKvArena>(static_cast<int>(c.num_layers),
                                            static_cast<int>(c.kv_row_elems()), tensor::DType::kF16,
                                            kBlockSize, blocks);
  f.table = ContiguousBlockTable(0, blocks);
  for (int i = 0; i < kPromptTokens; ++i) f.prompt.push_back((i * 7919 + 3) % 32000);
  f.logits.resize(c.vocab_size);
  return f;
}

void BM_Prefill512(benchmark::State& state, tensor::DType dtype) {
  Fixture f = MakeFixture(dtype);
  ThreadPool pool(kThreads);
  ForwardBatch batch;
  batch.sequences = {{f.prompt, 0, f.table, true}};
  for (auto _ : state) {
    f.model->Forward(batch, f.arena->view(), pool, f.logits.data());
    benchmark::DoNotOptimize(f.logits.data());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kPromptTokens) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Decode128(benchmark::State& state, tensor::DType dtype) {
  Fixture f = MakeFixture(dtype);
  ThreadPool pool(kThreads);
  ForwardBatch batch;
  const std::span<const int32_t> prompt(f.prompt.data(), 16);
  for (auto _ : state) {
    state.PauseTiming();
    batch.sequences = {{prompt, 0, f.table, true}};
    f.model->Forward(batch, f.arena->view(), pool, f.logits.data());
    state.ResumeTiming();
    int32_t token = 1;
    for (int i = 0; i < kDecodeTokens; ++i) {
      batch.sequences = {{std::span<const int32_t>(&token, 1), 16 + i, f.table, true}};
      f.model->Forward(batch, f.arena->view(), pool, f.logits.data());
      token = static_cast<int32_t>(std::max_element(f.logits.begin(), f.logits.end()) -
                                   f.logits.begin());
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kDecodeTokens) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Prefill512, f16, tensor::DType::kF16)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill512, q8_0, tensor::DType::kQ8_0)
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

}  // namespace
}  // namespace kvserve::model

BENCHMARK_MAIN();
