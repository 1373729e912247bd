// The determinism contract (DESIGN.md section 5) for mixture-of-experts models through the real
// engine, scheduler and KV manager: a request's tokens and logprobs are bit-identical alone or
// among 16 others (whose tokens route to other experts in the same grouped expert matmuls),
// for any chunk budget, with 1 or 2 threads and after a prefix-cache hit. The CPU and file
// tiers (deepseek2, qwen3moe, gpt-oss): offload_engine_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine_test_util.h"
#include "moe_test_models.h"

namespace kvserve::engine::testing {
namespace {

struct MoeCase {
  std::string name;
  std::string (*path)();
  int32_t vocab;
};

class MoeDeterminismTest : public ::testing::TestWithParam<MoeCase> {
 protected:
  std::unique_ptr<Engine> Load(int64_t budget_tokens, int threads, bool caching) const {
    EngineConfig config;
    config.max_num_seqs = 17;
    config.max_num_batched_tokens = budget_tokens;
    config.max_model_len = 128;
    config.block_size = 4;
    config.kv_cache_bytes = 8 << 20;
    config.enable_prefix_caching = caching;
    config.num_threads = threads;
    Result<std::unique_ptr<Engine>> engine = Engine::Load(GetParam().path(), config);
    CHECK(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  EngineRequest Target() const {
    std::mt19937 rng(42);
    EngineRequest r;
    r.prompt = RandomPrompt(rng, 22, GetParam().vocab);
    r.params.temperature = 0.8f;
    r.params.seed = 42;
    r.params.logprobs = 3;
    r.params.max_tokens = 16;
    r.params.ignore_eos = true;
    return r;
  }

  // 16 others, the first four sharing the target's first 16 tokens; the target in the middle.
  std::vector<EngineRequest> Crowd() const {
    std::mt19937 rng(7);
    const EngineRequest target = Target();
    std::vector<EngineRequest> requests;
    for (int i = 0; i < 16; ++i) {
      EngineRequest r;
      r.prompt = RandomPrompt(rng, 8 + rng() % 25, GetParam().vocab);
      if (i < 4) {
        r.prompt.insert(r.prompt.begin(), target.prompt.begin(), target.prompt.begin() + 16);
      }
      r.params.temperature = i % 2 ? 0.0f : 1.0f;
      r.params.seed = 100 + i;
      r.params.max_tokens = 6 + static_cast<int32_t>(rng() % 11);
      requests.push_back(std::move(r));
      if (i == 7) requests.push_back(target);
    }
    return requests;
  }
};

TEST_P(MoeDeterminismTest, TargetIsBitIdenticalAloneBatchedChunkedThreadedAndCached) {
  const RunResult solo = RunAll(*Load(4096, 1, false), {Target()})[0];
  ASSERT_EQ(solo.tokens.size(), 16u);
  for (int64_t budget : {1, 5, 16}) {
    ExpectSameOutputs(solo, RunAll(*Load(budget, 2, false), {Target()})[0],
                      fmt::format("alone, budget {}", budget));
  }
  const std::vector<EngineRequest> crowd = Crowd();
  for (auto [budget, threads] : {std::pair<int64_t, int>{7, 2}, {4096, 1}}) {
    auto engine = Load(budget, threads, true);
    const std::vector<RunResult> got = RunAll(*engine, crowd);
    ExpectSameOutputs(solo, got[8], fmt::format("batched, budget {} threads {}", budget, threads));
    const int64_t hits_before = engine->Metrics().prefix_cache_hits;
    const RunResult cached = RunAll(*engine, {Target()})[0];
    EXPECT_EQ(engine->Metrics().prefix_cache_hits - hits_before, 20);
    ExpectSameOutputs(solo, cached,
                      fmt::format("prefix hit, budget {} threads {}", budget, threads));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MoeDeterminismTest,
                         ::testing::Values(MoeCase{"deepseek2", &Deepseek2Path, 512},
                                           MoeCase{"qwen3moe", &Qwen3MoePath, 1024},
                                           MoeCase{"qwen2moe", &Qwen2MoePath, 1024},
                                           MoeCase{"gpt_oss", &GptOssPath, 1024}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve::engine::testing
