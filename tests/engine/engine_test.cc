// Engine bookkeeping with the fake model (real K/V traffic through block tables, no weights):
// preemption and resumption under tiny KV budgets, errors, metrics, the async front.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <thread>

#include "engine/async_engine.h"
#include "engine_test_util.h"

namespace kvserve::engine::testing {
namespace {

std::vector<EngineRequest> MixedRequests(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<int32_t> shared = RandomPrompt(rng, 12, vocab);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.prompt = RandomPrompt(rng, 1 + rng() % 24, vocab);
    if (i % 3 == 0) r.prompt.insert(r.prompt.begin(), shared.begin(), shared.end());
    r.params.temperature = 0.9f;
    r.params.top_k = 20;
    r.params.seed = 1000 + i;
    r.params.logprobs = 2;
    r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 16);
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<RunResult> SoloRuns(const std::vector<EngineRequest>& requests) {
  std::vector<RunResult> solo;
  for (const EngineRequest& r : requests) {
    FakeEngineOptions o;
    solo.push_back(RunAll(*MakeFakeEngine(o), {r})[0]);
  }
  return solo;
}

TEST(EngineTest, PreemptionUnderTinyKvBudgetsKeepsEveryOutputIdenticalToItsSoloRun) {
  const std::vector<EngineRequest> requests = MixedRequests(12, 50, 7);
  const std::vector<RunResult> solo = SoloRuns(requests);
  for (int64_t blocks : {14, 20, 40}) {
    for (int64_t budget : {3, 8, 64}) {
      for (bool caching : {true, false}) {
        FakeEngineOptions o;
        o.num_blocks = blocks;
        o.config.max_num_batched_tokens = budget;
        o.config.max_num_seqs = 6;
        o.config.enable_prefix_caching = caching;
        auto engine = MakeFakeEngine(o);
        const std::vector<RunResult> got = RunAll(*engine, requests);
        const std::string what = fmt::format("blocks {} budget {} caching {}", blocks, budget, caching);
        for (size_t i = 0; i < requests.size(); ++i) ExpectSameOutputs(solo[i], got[i], what);
        if (blocks == 14) {
          EXPECT_GT(engine->Metrics().num_preemptions, 0) << what;
        }
        EXPECT_EQ(engine->kv().pool(0).NumFreeBlocks(), blocks) << what;
      }
    }
  }
}

TEST(EngineTest, ARequestLargerThanTheCacheErrorsAndTheOthersFinish) {
  FakeEngineOptions o;
  o.num_blocks = 6;  // 24 tokens
  o.max_model_len = 64;
  auto engine = MakeFakeEngine(o);
  std::vector<EngineRequest> requests = MixedRequests(4, 50, 3);
  for (EngineRequest& r : requests) {
    r.params.max_tokens = 4;
    if (r.prompt.size() > 12) r.prompt.resize(12);  // 16 tokens: fits
  }
  requests[1].prompt.assign(30, 5);  // 30 tokens can never fit
  const std::vector<RunResult> got = RunAll(*engine, requests);
  EXPECT_EQ(got[1].finish, FinishReason::kError);
  EXPECT_NE(got[1].error.find("more KV cache blocks"), std::string::npos) << got[1].error;
  for (int i : {0, 2, 3}) EXPECT_EQ(got[i].finish, FinishReason::kLength) << i;
}

TEST(EngineTest, AdmissionErrorsAreStatuses) {
  FakeEngineOptions o;
  o.max_model_len = 32;
  auto engine = MakeFakeEngine(o);
  EngineRequest r;
  r.prompt.assign(30, 1);
  r.params.max_tokens = 8;
  Result<RequestId> too_long = engine->AddRequest(r);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("32"), std::string::npos);
  r.prompt = {1, 2, 50};  // 50 is outside the vocabulary of 50
  r.params.max_tokens = 2;
  EXPECT_EQ(engine->AddRequest(r).status().code(), StatusCode::kInvalidArgument);
  r.prompt = {1, 2};
  r.params.temperature = -1;
  EXPECT_EQ(engine->AddRequest(r).status().code(), StatusCode::kInvalidArgument);
  r.params.temperature = 0;
  EXPECT_TRUE(engine->AddRequest(r).ok());
  // The admission cases the scheduler CHECKs (max_model_len 32): validated here, once.
  r.prompt.clear();
  EXPECT_EQ(engine->AddRequest(r).status().code(), StatusCode::kInvalidArgument);  // empty
  r.prompt.assign(4, 1);
  r.params.max_tokens = 0;
  EXPECT_EQ(engine->AddRequest(r).status().code(), StatusCode::kInvalidArgument);
  r.prompt.assign(32, 1);
  r.params.max_tokens = 1;
  EXPECT_EQ(engine->AddRequest(r).status().code(), StatusCode::kOutOfRange);
  r.prompt.assign(31, 1);
  r.params.max_tokens.reset();  // until max-model-len: prompt + 1 fits
  EXPECT_TRUE(engine->AddRequest(r).ok());
  r.prompt.assign(24, 1);
  r.params.max_tokens = 8;
  EXPECT_TRUE(engine->AddRequest(r).ok());
}

TEST(EngineTest, ResolveMaxModelLenLowersTheDefaultAndRejectsAnExplicitValueThatDoesNotFit) {
  kv::KvCacheConfig config;
  config.num_layers = 1;
  config.block_size = 4;
  config.groups.push_back({kv::FullAttention{1, 2, tensor::DType::kF32}, {0}, {}});
  const uint64_t budget = 11 * kv::GroupBlockBytes(config, 0);  // 10 usable blocks = 40 tokens
  EXPECT_EQ(*ResolveMaxModelLen(config, budget, 40, std::nullopt), 40);
  EXPECT_EQ(*ResolveMaxModelLen(config, budget, 512, std::nullopt), 40);
  EXPECT_EQ(*ResolveMaxModelLen(config, budget, 512, 32), 32);
  Result<int64_t> explicit_too_big = ResolveMaxModelLen(config, budget, 512, 64);
  ASSERT_FALSE(explicit_too_big.ok());
  EXPECT_NE(explicit_too_big.status().message().find("cannot hold one request of 64"),
            std::string::npos);
  EXPECT_FALSE(ResolveMaxModelLen(config, budget, 512, 1000).ok());
}

TEST(EngineTest, MetricsCountRequestsTokensAndPrefixHits) {
  FakeEngineOptions o;
  auto engine = MakeFakeEngine(o);
  std::vector<EngineRequest> requests = MixedRequests(6, 50, 11);
  for (EngineRequest& r : requests) r.params.max_tokens = 3;
  int64_t num_prompt = 0;
  for (const EngineRequest& r : requests) num_prompt += static_cast<int64_t>(r.prompt.size());
  (void)RunAll(*engine, requests);
  const MetricsSnapshot m = engine->Metrics();
  EXPECT_EQ(m.time_to_first_token_s.count(), 6);
  EXPECT_EQ(m.e2e_latency_s.count(), 6);
  EXPECT_EQ(m.queue_time_s.count(), 6);
  EXPECT_EQ(m.inter_token_latency_s.count(), 12);
  EXPECT_EQ(m.time_per_output_token_s.count(), 6);
  EXPECT_EQ(m.num_generation_tokens, 18);
  EXPECT_EQ(m.prefix_cache_queries, num_prompt);
  EXPECT_EQ(m.num_prompt_tokens, num_prompt - m.prefix_cache_hits);
  EXPECT_EQ(m.num_finished, 6);
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.tokens_per_step.count(), m.num_steps);
  // A second identical batch hits the cache for every request's full blocks.
  (void)RunAll(*engine, requests);
  EXPECT_GT(engine->Metrics().prefix_cache_hits, m.prefix_cache_hits);
  EXPECT_FALSE(m.Format().empty());
}

TEST(HistogramTest, BucketsAndQuantiles) {
  const double bounds[] = {1, 2, 4};
  Histogram h(bounds);
  for (double v : {0.5, 1.5, 1.5, 3.0, 10.0}) h.Observe(v);
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{1, 2, 1, 1}));
  EXPECT_EQ(h.count(), 5);
  EXPECT_DOUBLE_EQ(h.sum(), 16.5);
  EXPECT_DOUBLE_EQ(h.Quantile(0.2), 1.0);   // rank 1: the end of bucket 0
  EXPECT_DOUBLE_EQ(h.Quantile(0.4), 1.5);   // rank 2: halfway through (1, 2]
  EXPECT_DOUBLE_EQ(h.Quantile(1.0), 4.0);   // above every bound: the last bound
}

TEST(AsyncEngineTest, StreamsFromManyThreadsMatchTheSynchronousEngine) {
  const std::vector<EngineRequest> requests = MixedRequests(8, 50, 21);
  const std::vector<RunResult> solo = SoloRuns(requests);
  FakeEngineOptions o;
  o.num_blocks = 20;
  o.config.max_num_batched_tokens = 8;
  AsyncEngine engine(MakeFakeEngine(o));
  std::vector<RunResult> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] {
      Result<RequestHandle> handle = engine.AddRequest(requests[i]);
      ASSERT_TRUE(handle.ok());
      while (std::optional<RequestOutput> out = handle->stream->Next()) {
        for (const TokenOutput& t : out->tokens) got[i].tokens.push_back(t);
        if (out->finish) got[i].finish = out->finish;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < requests.size(); ++i) ExpectSameOutputs(solo[i], got[i], "async");
  EXPECT_EQ(engine.Metrics().num_finished, 8);
}

TEST(AsyncEngineTest, AbortEndsTheStreamAndValidationErrorsComeBackAtOnce) {
  FakeEngineOptions o;
  o.max_model_len = 1024;
  o.sleep_us = 1000;  // 1 ms a step: the abort lands long before 1000 tokens are done
  AsyncEngine engine(MakeFakeEngine(o));
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.params.max_tokens = 1022;
  EXPECT_EQ(engine.AddRequest(r).status().code(), StatusCode::kOutOfRange);
  r.params.max_tokens = 1000;
  Result<RequestHandle> handle = engine.AddRequest(r);
  ASSERT_TRUE(handle.ok());
  std::optional<RequestOutput> first = handle->stream->Next();
  ASSERT_TRUE(first.has_value());
  engine.Abort(handle->id);
  std::optional<FinishReason> finish;
  while (std::optional<RequestOutput> out = handle->stream->Next()) finish = out->finish;
  EXPECT_EQ(finish, FinishReason::kAbort);
  // A request still running at shutdown ends with kAbort too.
  auto engine2 = std::make_unique<AsyncEngine>(MakeFakeEngine(o));
  Result<RequestHandle> h2 = engine2->AddRequest(r);
  ASSERT_TRUE(h2.ok());
  engine2.reset();
  std::optional<FinishReason> finish2;
  while (std::optional<RequestOutput> out = h2->stream->Next()) finish2 = out->finish;
  EXPECT_EQ(finish2, FinishReason::kAbort);
}

}  // namespace
}  // namespace kvserve::engine::testing
