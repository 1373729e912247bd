// The simulator: virtual time adds up exactly the cost model's step times, the real scheduler's
// decisions show through (prefix hits, preemptions, tier loads), and the same inputs give the
// same outputs bit for bit.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "sim/report.h"
#include "sim/setup.h"
#include "support/temp_path.h"

namespace kvserve::sim {
namespace {

SimKnobs Llama8bOnH200() {
  SimKnobs k;
  k.model = "llama-3.1-8b";
  k.gpu = "h200";
  k.workload.num_prompts = 50;
  k.workload.input_len = 300;
  k.workload.output_len = 20;
  return k;
}

SimResult MustRun(const SimKnobs& knobs) {
  Result<PreparedSim> p = Prepare(knobs);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  Result<SimResult> r = Simulate(p->setup, p->cost, p->workload);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *std::move(r) : SimResult{};
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(Simulator, OneRequestsClockIsTheSumOfItsStepCosts) {
  SimKnobs k = Llama8bOnH200();
  k.workload.num_prompts = 1;
  k.workload.input_len = 100;
  k.workload.output_len = 3;
  k.engine.max_num_batched_tokens = 64;
  Result<PreparedSim> p = Prepare(k);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Result<SimResult> r = Simulate(p->setup, p->cost, p->workload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Steps: prompt [0, 64), [64, 100) sampled (token 1), decodes at 100 and 101 (tokens 2, 3).
  auto cost = [&](int64_t computed, int64_t n, bool sampled) {
    const SequenceWork w[] = {{computed, n, sampled}};
    return p->cost.Cost(w).seconds;
  };
  const double t1 = cost(0, 64, false) + cost(64, 36, true);
  const double t2 = t1 + cost(100, 1, true);
  const double t3 = t2 + cost(101, 1, true);
  const RequestTiming& t = r->requests.at(0);
  EXPECT_DOUBLE_EQ(*t.first_token, t1);
  EXPECT_DOUBLE_EQ(*t.finish, t3);
  EXPECT_DOUBLE_EQ(r->elapsed, t3);
  EXPECT_EQ(t.num_generated, 3);
  ASSERT_EQ(r->inter_token_latencies.size(), 2u);
  EXPECT_DOUBLE_EQ(r->inter_token_latencies[0], t2 - t1);
  EXPECT_EQ(r->num_steps, 4);
  EXPECT_EQ(r->num_decode_steps, 2);
  EXPECT_EQ(r->num_prompt_tokens, 100);
}

TEST(Simulator, ArrivalsWaitForTheirTime) {
  SimKnobs k = Llama8bOnH200();
  k.workload.num_prompts = 3;
  k.workload.request_rate = 0.5;  // t = 0, 2, 4 s: each finishes long before the next
  const SimResult r = MustRun(k);
  ASSERT_EQ(r.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(r.requests[2].arrival, 4.0);
  // Alone each time: the same TTFT (same step shapes, same costs; the clock offset rounds).
  EXPECT_NEAR(*r.requests[0].first_token, *r.requests[1].first_token - 2.0, 1e-12);
  EXPECT_GT(*r.requests[2].first_token, 4.0);
  // The clock either ran steps or waited: idle + busy = elapsed.
  double busy = r.store_seconds;
  for (double s : r.op_seconds) busy += s;
  EXPECT_GT(r.idle_seconds, 3.0);
  EXPECT_NEAR(r.idle_seconds + busy, r.elapsed, 1e-9);
}

TEST(Simulator, SharedPrefixesHitThePrefixCache) {
  SimKnobs k = Llama8bOnH200();
  k.workload.num_prompts = 40;
  k.workload.input_len = 1000;
  k.workload.shared_prefix_len = 800;
  k.workload.request_rate = 20;
  const SimResult r = MustRun(k);
  // After the first, each request finds the 800 shared tokens cached (a multiple of 16).
  const double queried = 40.0 * 1000;
  EXPECT_EQ(r.stats.prefix_query_tokens, 40 * 1000);
  EXPECT_EQ(r.stats.prefix_hit_tokens, 39 * 800);
  EXPECT_NEAR(Summarize(r).prefix_hit_rate, 39 * 800 / queried, 1e-12);
  k.engine.enable_prefix_caching = false;
  EXPECT_EQ(MustRun(k).stats.prefix_hit_tokens, 0);
}

TEST(Simulator, ASmallBudgetPreempts) {
  SimKnobs k = Llama8bOnH200();
  k.engine.kv_cache_bytes = 64ull << 20;  // 512 tokens of 128 KiB: room for one request
  k.engine.max_model_len = 400;
  k.workload.num_prompts = 6;
  k.workload.input_len = 200;
  k.workload.output_len = 150;
  const SimResult r = MustRun(k);
  EXPECT_GT(r.stats.num_preemptions, 0);
  for (const RequestTiming& t : r.requests) {
    EXPECT_FALSE(t.error);
    EXPECT_EQ(t.num_generated, 150);
  }
}

TEST(Simulator, AnOffloadedPrefixIsLoadedFromTheCpuTier) {
  SimKnobs k = Llama8bOnH200();
  // A device pool of ~100 blocks, a CPU tier of 1 GiB: prompt groups cycle, so a group's
  // prefix has left the device pool by the time it comes back, and is still in the CPU tier.
  k.engine.kv_cache_bytes = 200ull << 20;
  k.engine.max_model_len = 1200;
  k.workload.num_prompts = 30;
  k.workload.input_len = 1024;
  k.workload.output_len = 4;
  k.workload.shared_prefix_len = 1000;
  k.workload.num_prefix_groups = 3;
  k.workload.request_rate = 5;
  Result<offload::OffloadConfig> tiers = offload::OffloadConfigFromSize("1");
  ASSERT_TRUE(tiers.ok());
  k.engine.offload = *tiers;
  const SimResult r = MustRun(k);
  ASSERT_EQ(r.tiers.size(), 1u);
  EXPECT_GT(r.tiers[0].hits, 0);
  EXPECT_GT(r.tiers[0].stores, 0);
  EXPECT_GT(r.stats.prefix_loaded_tokens, 0);
  EXPECT_EQ(r.tiers[0].bytes_loaded, r.tiers[0].hits * 16 * 128 * 1024);  // 2 MiB per block
  k.engine.offload.reset();
  EXPECT_LT(MustRun(k).stats.prefix_hit_tokens, r.stats.prefix_hit_tokens);
}

// The copies the real connector makes on the scheduler thread (offload_manager.h): every
// computed block is copied for the write threads (write-through to the file tier), every
// device eviction into the CPU tier; with a store bandwidth they take step time.
TEST(Simulator, TierCopiesOnTheSchedulerThreadTakeStepTime) {
  SimKnobs k = Llama8bOnH200();
  k.workload.num_prompts = 1;
  k.workload.input_len = 1000;  // 62 full blocks of 16 tokens
  k.workload.output_len = 2;
  offload::OffloadConfig tiers;
  tiers.spec_name = "TieringOffloadingSpec";
  tiers.cpu_bytes_to_use = 1ull << 30;
  tiers.file = offload::FileTierConfig{"/nonexistent/never-touched", 4, 4};
  k.engine.offload = tiers;
  Result<PreparedSim> p = Prepare(k);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto run = [&](double store_bandwidth) {
    HardwareProfile h = p->cost.hardware();
    h.file_tier = {10e9, 50e-6, 0};
    h.cpu_tier.store_bandwidth = store_bandwidth;
    const CostModel cost = *CostModel::Create(p->cost.model(), p->setup.kv_config, h, 1);
    Result<SimResult> r = Simulate(p->setup, cost, p->workload);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *std::move(r) : SimResult{};
  };
  const SimResult free = run(0);
  const SimResult copied = run(1e9);
  ASSERT_EQ(copied.tiers.size(), 2u);
  // 62 blocks written through (the last, partial block of the prompt and the two outputs do not
  // fill one), nothing evicted: 62 copies of a block (16 tokens x 128 KiB).
  EXPECT_EQ(copied.tiers[1].stores, 62);
  EXPECT_EQ(copied.tiers[0].stores, 0);
  const double block = 16.0 * 128 * 1024;
  EXPECT_DOUBLE_EQ(free.store_seconds, 0);
  EXPECT_NEAR(copied.store_seconds, 62 * block / 1e9, 1e-12);
  EXPECT_NEAR(copied.elapsed - free.elapsed, copied.store_seconds, 1e-12);
}

// The footprint's shared prefixes: the leading blocks an earlier sequence of the step read.
TEST(Simulator, SharedPrefixesAreTheLeadingBlocksAnEarlierSequenceRead) {
  const std::vector<kv::BlockId> a = {1, 2, 3}, b = {1, 2, 4}, c = {5, 2}, d = {0, 0, 1, 2, 3};
  std::vector<scheduler::ScheduledRequest> step(4);
  const std::vector<kv::BlockId>* tables[] = {&a, &b, &c, &d};
  for (size_t i = 0; i < step.size(); ++i) step[i].block_tables = {*tables[i]};
  std::vector<SequenceWork> batch = {{47, 1, true}, {40, 8, true}, {31, 1, true}, {60, 1, true}};
  SharedPrefixFinder finder(0, 16);
  finder.Mark(step, batch);
  EXPECT_EQ(batch[0].shared_prefix_tokens, 0);   // the first reader of 1, 2, 3
  EXPECT_EQ(batch[1].shared_prefix_tokens, 32);  // 1, 2 read by the first
  EXPECT_EQ(batch[2].shared_prefix_tokens, 0);   // its own first block: no shared prefix
  EXPECT_EQ(batch[3].shared_prefix_tokens, 48);  // null entries skipped: 1, 2, 3
  // The next step starts afresh: alone, nothing is shared.
  finder.Mark(std::span(step).subspan(1, 1), std::span(batch).subspan(1, 1));
  EXPECT_EQ(batch[1].shared_prefix_tokens, 0);
  // Capped at the sequence's context.
  std::vector<SequenceWork> two = {{47, 1, true}, {20, 1, true}};
  finder.Mark(std::span(step).subspan(0, 2), two);
  EXPECT_EQ(two[1].shared_prefix_tokens, 21);
}

TEST(Simulator, SameInputsSameOutputsBitForBit) {
  SimKnobs k = Llama8bOnH200();
  k.engine.kv_cache_bytes = 300ull << 20;
  k.workload.num_prompts = 200;
  k.workload.request_rate = 40;
  k.workload.arrivals = Arrivals::kPoisson;
  k.workload.input_dist = *ParseLengthDist("lognormal:400,0.8", 400);
  k.workload.output_dist = *ParseLengthDist("uniform:1,60", 20);
  k.workload.shared_prefix_len = 128;
  k.workload.num_prefix_groups = 4;
  k.workload.seed = 7;
  k.engine.offload = *offload::OffloadConfigFromSize("0.5");
  const SimResult a = MustRun(k);
  const SimResult b = MustRun(k);
  EXPECT_GT(a.stats.num_preemptions + a.stats.prefix_loaded_tokens, 0);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  EXPECT_TRUE(SameBits(a.elapsed, b.elapsed));
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const RequestTiming &x = a.requests[i], &y = b.requests[i];
    EXPECT_TRUE(SameBits(*x.first_token, *y.first_token)) << i;
    EXPECT_TRUE(SameBits(*x.finish, *y.finish)) << i;
    EXPECT_EQ(x.num_cached_tokens, y.num_cached_tokens) << i;
    EXPECT_EQ(x.num_preemptions, y.num_preemptions) << i;
  }
  ASSERT_EQ(a.inter_token_latencies.size(), b.inter_token_latencies.size());
  EXPECT_EQ(std::memcmp(a.inter_token_latencies.data(), b.inter_token_latencies.data(),
                        a.inter_token_latencies.size() * sizeof(double)),
            0);
  ASSERT_EQ(a.timeline.size(), b.timeline.size());
  for (size_t i = 0; i < a.timeline.size(); ++i) {
    EXPECT_TRUE(SameBits(a.timeline[i].kv_usage, b.timeline[i].kv_usage));
  }
  // A different seed changes the workload (and so the outcome).
  k.workload.seed = 8;
  EXPECT_FALSE(SameBits(MustRun(k).elapsed, a.elapsed));
}

TEST(Simulator, BadSetupsAreClearErrors) {
  SimKnobs k = Llama8bOnH200();
  k.model = "llama-3.1-70b";
  k.gpu = "rtx4090";
  Result<PreparedSim> p = Prepare(k);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("does not fit"), std::string::npos) << p.status().ToString();
  k = Llama8bOnH200();
  k.profile = "/nonexistent.json";
  EXPECT_NE(Prepare(k).status().message().find("exactly one"), std::string::npos);
  k = Llama8bOnH200();
  k.tp = 3;  // 32 heads over 3 ranks
  EXPECT_FALSE(Prepare(k).ok());
  k = Llama8bOnH200();
  EXPECT_FALSE(SetKnob(k, "max-num-seqs", "many").ok());
  EXPECT_FALSE(SetKnob(k, "colour", "1").ok());
  ASSERT_TRUE(SetKnob(k, "max-num-batched-tokens", "8192").ok());
  EXPECT_EQ(k.engine.max_num_batched_tokens, 8192);
  ASSERT_TRUE(SetKnob(k, "kv-offloading-size", "2").ok());  // GiB, as --kv-offloading-size
  EXPECT_EQ(k.engine.offload->cpu_bytes_to_use, 2ull << 30);
  ASSERT_TRUE(SetKnob(k, "kv-offloading-size", "0").ok());  // a sweep's baseline: no tier
  EXPECT_FALSE(k.engine.offload.has_value());
  EXPECT_FALSE(SetKnob(k, "kv-offloading-size", "-1").ok());
  // A request longer than max-model-len is rejected, the others run.
  k = Llama8bOnH200();
  k.engine.max_model_len = 310;
  const SimResult r = MustRun(k);
  EXPECT_EQ(r.num_errors, 50);
  EXPECT_NE(r.first_error.find("maximum context length"), std::string::npos);
}

TEST(Workload, DistributionsTracesAndTokens) {
  EXPECT_FALSE(ParseLengthDist("lognormal:10", 5).ok());
  EXPECT_FALSE(ParseLengthDist("uniform:9,3", 5).ok());
  EXPECT_FALSE(ParseLengthDist("zipf:1", 5).ok());
  EXPECT_TRUE(ParseLengthDist("exponential:300", 5).ok());
  WorkloadSpec w;
  w.num_prompts = 1000;
  w.input_dist = *ParseLengthDist("lognormal:500,0.5", 500);
  Result<std::vector<RequestSpec>> reqs = MakeWorkload(w, 4096);
  ASSERT_TRUE(reqs.ok());
  double sum = 0;
  for (const RequestSpec& r : *reqs) sum += static_cast<double>(r.input_len);
  EXPECT_NEAR(sum / 1000, 500, 25);  // the mean is the given mean
  // Prefix groups: same group, same first P tokens; otherwise different.
  RequestSpec a{0, 64, 4, 1, 32, {}}, b{0, 64, 4, 1, 32, {}}, c{0, 64, 4, 2, 32, {}};
  const std::vector<int32_t> ta = PromptTokens(a, 0, 1, 1000), tb = PromptTokens(b, 1, 1, 1000),
                             tc = PromptTokens(c, 2, 1, 1000);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 32, tb.begin()));
  EXPECT_FALSE(std::equal(ta.begin() + 32, ta.end(), tb.begin() + 32));
  EXPECT_FALSE(std::equal(ta.begin(), ta.begin() + 32, tc.begin()));
  // Traces: fields, aliases, errors naming the line.
  const std::string path = kvserve::testing::TempPath("trace.jsonl");
  std::ofstream(path) << R"({"arrival_time": 1.5, "input_len": 10, "output_len": 2})" "\n"
                      << R"({"timestamp": 0.5, "prompt_token_ids": [5, 6, 7], "max_tokens": 1})"
                      << "\n";
  w = WorkloadSpec{};
  w.trace_path = path;
  reqs = MakeWorkload(w, 100);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 2u);
  EXPECT_EQ((*reqs)[0].prompt_ids, (std::vector<int32_t>{5, 6, 7}));  // sorted by arrival
  EXPECT_EQ((*reqs)[1].input_len, 10);
  std::ofstream(path) << R"({"arrival_time": 1, "input_len": 10, "output_len": 2})" "\n"
                      << R"({"arrival_time": 1, "input_len": -4, "output_len": 2})" "\n";
  reqs = MakeWorkload(w, 100);
  ASSERT_FALSE(reqs.ok());
  EXPECT_NE(reqs.status().ToString().find(":2"), std::string::npos) << reqs.status().ToString();
}

}  // namespace
}  // namespace kvserve::sim
