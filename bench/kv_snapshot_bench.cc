// What the live dashboard costs the engine thread: TakeKvSnapshot (engine/kv_snapshot.h, the
// copy AsyncEngine makes at a step boundary when a state was asked for) against the decode
// step it sits between, on a loaded engine: `kNumRequests` requests decoding after
// `kPromptTokens`-token prompts, with serve's default KV budget (min(4 GiB, 25% of RAM)).
// Models: make-model's random-weight 110m llama (Q8_0 weights, F16 KV: 7281 blocks of 16 in
// 4 GiB) and stories260K from ../shared (f32 KV: 209714 blocks, a huge pool behind a tiny
// model, the worst ratio). Counters: blocks, step_ms, snapshot_us, snapshot_pct_of_step.
// Threads: KVSERVE_BENCH_THREADS (default 2).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "bench_threads.h"
#include "core/check.h"
#include "engine/engine.h"
#include "engine/kv_snapshot.h"
#include "model/dense_random.h"

namespace kvserve::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kNumRequests = 32;
constexpr int kPromptTokens = 128;

const int kThreads = bench::BenchThreads();

std::string Model110M() {
  const std::string path = "/tmp/kvserve_bench_110m_preset_q8_0.gguf";
  if (!std::filesystem::exists(path)) {  // = kvserve make-model --preset 110m --type q8_0
    model::RandomWeights weights;
    weights.matrix_type = tensor::DType::kQ8_0;
    CHECK(model::DenseRandomWriter(*model::FindDensePreset("llama", "110m"), weights)->Write(path).ok());
  }
  return path;
}

// An engine with kNumRequests requests all decoding.
std::unique_ptr<Engine> LoadedEngine(const std::string& path, uint64_t kv_bytes,
                                     int64_t max_model_len) {
  EngineConfig config;
  config.kv_cache_bytes = kv_bytes;
  config.max_model_len = max_model_len;
  config.num_threads = kThreads;
  Result<std::unique_ptr<Engine>> engine = Engine::Load(path, config);
  CHECK(engine.ok()) << engine.status().ToString();
  std::mt19937 rng(1);
  for (int i = 0; i < kNumRequests; ++i) {
    EngineRequest r;
    for (int t = 0; t < kPromptTokens; ++t) r.prompt.push_back(1 + static_cast<int32_t>(rng() % 250));
    r.params.max_tokens = max_model_len - kPromptTokens;
    r.params.ignore_eos = true;
    CHECK((*engine)->AddRequest(std::move(r)).ok());
  }
  while ((*engine)->scheduler().running().size() < kNumRequests ||
         (*engine)->Metrics().num_generation_tokens < 2 * kNumRequests) {
    (*engine)->Step();
  }
  return std::move(engine).value();
}

void SnapshotVsStep(benchmark::State& state, const std::string& path, uint64_t kv_bytes,
                    int64_t max_model_len) {
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("missing " + path).c_str());
    return;
  }
  std::unique_ptr<Engine> engine = LoadedEngine(path, kv_bytes, max_model_len);
  const KvSettings settings = MakeKvSettings(*engine);
  double step_s = 0, snapshot_s = 0;
  int64_t n = 0;
  uint64_t sequence = 0;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    engine->Step();
    const Clock::time_point t1 = Clock::now();
    KvSnapshot s = TakeKvSnapshot(*engine, settings, ++sequence, 0.0);
    const Clock::time_point t2 = Clock::now();
    benchmark::DoNotOptimize(s.groups.data());
    step_s += std::chrono::duration<double>(t1 - t0).count();
    snapshot_s += std::chrono::duration<double>(t2 - t1).count();
    ++n;
    state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
  }
  state.counters["blocks"] = static_cast<double>(engine->kv().pool(0).NumUsableBlocks());
  state.counters["step_ms"] = 1e3 * step_s / static_cast<double>(n);
  state.counters["snapshot_us"] = 1e6 * snapshot_s / static_cast<double>(n);
  state.counters["snapshot_pct_of_step"] = 100.0 * snapshot_s / step_s;
}

void BM_KvSnapshot110M(benchmark::State& state) {
  SnapshotVsStep(state, Model110M(), kv::DefaultCpuKvBudgetBytes(), 1024);
}
BENCHMARK(BM_KvSnapshot110M)->UseManualTime()->Iterations(30)->Unit(benchmark::kMicrosecond);

void BM_KvSnapshotStories260K(benchmark::State& state) {
  SnapshotVsStep(state, std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf",
                 kv::DefaultCpuKvBudgetBytes(), 512);
}
BENCHMARK(BM_KvSnapshotStories260K)->UseManualTime()->Iterations(200)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve::engine

BENCHMARK_MAIN();
