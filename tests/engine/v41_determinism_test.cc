// The determinism contract (DESIGN.md section 5) for the `kvserve-v41` hybrid-attention model
// (model/v41.h) through the real engine, scheduler and hybrid KV manager: a request's tokens
// and logprobs are bit-identical alone or among 16 others, for chunk budgets that split
// compression groups and blocks anywhere, with 1 or 2 threads, after a prefix-cache hit, and
// under preemption. Reloads from the offload tiers: offload_engine_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine_test_util.h"
#include "v41_test_model.h"

namespace kvserve::engine::testing {
namespace {

std::unique_ptr<Engine> Load(int64_t budget_tokens, int threads, bool caching,
                             uint64_t kv_bytes = 8 << 20) {
  EngineConfig config;
  config.max_num_seqs = 17;
  config.max_num_batched_tokens = budget_tokens;
  config.max_model_len = 128;
  config.block_size = 4;
  config.kv_cache_bytes = kv_bytes;
  config.enable_prefix_caching = caching;
  config.num_threads = threads;
  Result<std::unique_ptr<Engine>> engine = Engine::Load(SmallModelPath(), config);
  CHECK(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

EngineRequest Target() {
  std::mt19937 rng(42);
  EngineRequest r;
  r.prompt = RandomPrompt(rng, 22, 128);
  r.params.temperature = 0.8f;
  r.params.seed = 42;
  r.params.logprobs = 3;
  r.params.max_tokens = 20;
  r.params.ignore_eos = true;
  return r;
}

// 16 others, the first four sharing the target's first 16 tokens; the target in the middle.
std::vector<EngineRequest> Crowd() {
  std::mt19937 rng(7);
  const EngineRequest target = Target();
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 16; ++i) {
    EngineRequest r;
    r.prompt = RandomPrompt(rng, 8 + rng() % 25, 128);
    if (i < 4) r.prompt.insert(r.prompt.begin(), target.prompt.begin(), target.prompt.begin() + 16);
    r.params.temperature = i % 2 ? 0.0f : 1.0f;
    r.params.seed = 100 + i;
    r.params.max_tokens = 6 + static_cast<int32_t>(rng() % 13);
    requests.push_back(std::move(r));
    if (i == 7) requests.push_back(target);
  }
  return requests;
}

TEST(V41Engine, UsesTheHybridKvGroups) {
  auto engine = Load(64, 1, true);
  const kv::KvCacheConfig& kc = engine->kv().config();
  ASSERT_EQ(kc.groups.size(), 3u);  // window, latent ratio 2, latent ratio 1
  EXPECT_STREQ(kv::SpecKindName(kc.groups[0].spec), "sliding_window");
  EXPECT_STREQ(kv::SpecKindName(kc.groups[1].spec), "compressed_latent");
  EXPECT_EQ(kc.groups[1].layers.size(), 1u);  // only the writer owns pages
  EXPECT_EQ(kc.groups[2].layers.size(), 1u);
  EXPECT_EQ(kc.groups[2].readers.size(), 1u);  // layer 3 reads layer 2
}

TEST(V41Engine, TargetIsBitIdenticalAloneBatchedChunkedThreadedAndCached) {
  const RunResult solo = RunAll(*Load(4096, 1, false), {Target()})[0];
  ASSERT_EQ(solo.tokens.size(), 20u);
  // Chunked alone: budgets that cut compression groups (odd) and blocks (not multiples of 4).
  for (int64_t budget : {1, 3, 5, 7, 16}) {
    ExpectSameOutputs(solo, RunAll(*Load(budget, 1, false), {Target()})[0],
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

TEST(V41Engine, TargetIsBitIdenticalUnderPreemption) {
  const RunResult solo = RunAll(*Load(4096, 1, false), {Target()})[0];
  auto probe = Load(64, 1, true);
  uint64_t request_bytes = 0;  // one request of ~44 tokens, every group
  for (const kv::GroupCapacity& g : probe->kv().capacity().groups) {
    request_bytes += static_cast<uint64_t>(g.block_bytes) * 12;
  }
  auto engine = Load(16, 2, true, request_bytes * 3);
  const std::vector<RunResult> got = RunAll(*engine, Crowd());
  EXPECT_GT(engine->Metrics().num_preemptions, 0);
  ExpectSameOutputs(solo, got[8], "preemption");
}

}  // namespace
}  // namespace kvserve::engine::testing
