// Sampler cost per token by sampling mode, over a 32,000-token vocabulary (llama) and a
// 151,936-token one (Qwen2/Qwen3 shapes): BM_<mode>/<vocab>. Logits uniform in [-2, 2] (a flat
// distribution: top-p 0.9 keeps most of the vocabulary, the sampler's worst case), and for
// BM_*Peaked in [-8, 8] (top-p keeps a few hundred tokens, closer to a trained model's).
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampler.h"

namespace kvserve::sampling {
namespace {

std::vector<float> RandomLogits(int32_t vocab, double half_width) {
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) {
    logits[i] = static_cast<float>(half_width * (2.0 * UniformDouble(99, i) - 1.0));
  }
  return logits;
}

void Run(benchmark::State& state, const SamplingParams& params, double half_width = 2.0) {
  const auto vocab = static_cast<int32_t>(state.range(0));
  Sampler sampler(vocab);
  const std::vector<float> logits = RandomLogits(vocab, half_width);
  std::vector<int32_t> prompt(64, 5);
  std::vector<int32_t> generated;
  for (auto _ : state) {
    SampleResult r = sampler.Sample(logits, params, {prompt, generated}, 1);
    benchmark::DoNotOptimize(r.token);
    if (generated.size() < 256) generated.push_back(r.token);
  }
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  Run(state, p);
}
void BM_Temperature(benchmark::State& state) { Run(state, SamplingParams{}); }
void BM_TopK50(benchmark::State& state) {
  SamplingParams p;
  p.top_k = 50;
  Run(state, p);
}
void BM_TopP09(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  Run(state, p);
}
void BM_TemperaturePeaked(benchmark::State& state) { Run(state, SamplingParams{}, 8.0); }
void BM_TopP09Peaked(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  Run(state, p, 8.0);
}
void BM_PenaltiesTopPLogprobs5(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.logprobs = 5;
  Run(state, p);
}
BENCHMARK(BM_Greedy)->Arg(32000)->Arg(151936);
BENCHMARK(BM_Temperature)->Arg(32000)->Arg(151936);
BENCHMARK(BM_TopK50)->Arg(32000)->Arg(151936);
BENCHMARK(BM_TopP09)->Arg(32000)->Arg(151936);
BENCHMARK(BM_TemperaturePeaked)->Arg(32000)->Arg(151936);
BENCHMARK(BM_TopP09Peaked)->Arg(32000)->Arg(151936);
BENCHMARK(BM_PenaltiesTopPLogprobs5)->Arg(32000)->Arg(151936);

}  // namespace
}  // namespace kvserve::sampling

BENCHMARK_MAIN();
