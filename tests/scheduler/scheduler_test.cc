// Scheduler trace tests (tests/scheduler/trace.h): token budget, chunked prefill, decode-first
// order, max-num-seqs, preemption and resumption, prefix-cache hits, admission errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "scheduler/trace.h"

namespace kvserve::scheduler::testing {
namespace {

void ExpectTracePasses(const std::string& script) {
  const std::vector<std::string> failures = RunTrace(script);
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

TEST(SchedulerTraceTest, ChunksLongPromptsAndSamplesOnlyWhenThePromptIsDone) {
  ExpectTracePasses(R"(
    config blocks=16 block_size=4 max_num_batched_tokens=4 max_model_len=64
    add A prompt=10 max=2
    step
    expect scheduled=A:4 computed=A:4 out=A:0 free_blocks=15
    step
    expect scheduled=A:4 computed=A:8
    step
    expect scheduled=A:2* computed=A:10 out=A:1 free_blocks=13
    step
    expect scheduled=A:1* finished=A:length running= free_blocks=16
  )");
}

TEST(SchedulerTraceTest, DecodesFirstThenPrefillChunksInArrivalOrder) {
  ExpectTracePasses(R"(
    config blocks=16 block_size=4 max_num_batched_tokens=16 max_model_len=64
    add A prompt=10 max=3
    add B prompt=20 max=2
    add C prompt=8 max=2
    step
    expect scheduled=A:10*,B:6 running=A,B waiting=C tokens=16 free_blocks=11
    step
    expect scheduled=A:1*,B:14*,C:1 running=A,B,C tokens=16
    step
    expect scheduled=A:1*,B:1*,C:7* finished=A:length,B:length running=C
    run
    expect final=A:length,B:length,C:length free_blocks=16
    expect_solo
  )");
}

TEST(SchedulerTraceTest, MaxNumSeqsBoundsTheRunningSet) {
  ExpectTracePasses(R"(
    config blocks=64 block_size=4 max_num_seqs=2 max_num_batched_tokens=100
    add A prompt=4 max=3
    add B prompt=4 max=3
    add C prompt=4 max=3
    step
    expect scheduled=A:4*,B:4* running=A,B waiting=C
    step
    step
    expect finished=A:length,B:length running=
    step
    expect scheduled=C:4* running=C
    run
    expect_solo
  )");
}

TEST(SchedulerTraceTest, PreemptsTheNewestAndResumesFromThePrefixCache) {
  ExpectTracePasses(R"(
    config blocks=6 block_size=4 max_num_batched_tokens=16 max_model_len=64
    add A prompt=10 max=8
    add B prompt=14 max=8
    step
    expect scheduled=A:10*,B:6 free_blocks=1
    step
    expect scheduled=A:1* preempted=B running=A waiting=B free_blocks=3 preemptions=1
    run
    expect final=A:length,B:length free_blocks=6 preemptions=1
    expect_solo
  )");
}

TEST(SchedulerTraceTest, ReadmissionReusesTheCachedBlocks) {
  ExpectTracePasses(R"(
    config blocks=6 block_size=4 max_num_batched_tokens=16 max_model_len=64
    add A prompt=10 max=4
    add B prompt=14 max=2
    step
    step
    expect preempted=B waiting=B
    run
    expect final=A:length,B:length
    expect_solo
  )");
  // B's first block (tokens [0, 4)) was full and cached before the preemption: the
  // readmission finds it and computes only the other 10 tokens.
  ExpectTracePasses(R"(
    config blocks=7 block_size=4 max_num_batched_tokens=16 max_model_len=64
    add A prompt=12 max=3
    add B prompt=14 max=2
    step
    expect scheduled=A:12*,B:4 free_blocks=3
    step
    expect scheduled=A:1* preempted=B waiting=B free_blocks=3
    step
    expect scheduled=A:1* finished=A:length waiting=B free_blocks=7
    step
    expect hit=B:4 scheduled=B:10* running=B
    run
    expect_solo
  )");
}

TEST(SchedulerTraceTest, PrefixCacheHitSkipsTheCachedTokens) {
  ExpectTracePasses(R"(
    config blocks=32 block_size=4 max_num_batched_tokens=64 max_model_len=64
    add A prompt=16 max=2
    run
    add B prompt=20 prefix=A:16 max=5
    step
    expect hit=B:16 computed=B:20 scheduled=B:4* tokens=4
    add C prompt=16 prefix=A:16 max=5
    step
    expect hit=B:16,C:12 scheduled=B:1*,C:4*
    add D prompt=20 prefix=A:16 salt=other max=5
    step
    expect hit=B:16,C:12,D:0 scheduled=B:1*,C:1*,D:20*
    run
    expect_solo
  )");
}

TEST(SchedulerTraceTest, NoPrefixCachingMeansNoHits) {
  ExpectTracePasses(R"(
    config blocks=32 block_size=4 prefix_caching=0
    add A prompt=16 max=2
    run
    add B prompt=20 prefix=A:16 max=2
    step
    expect hit=B:0 scheduled=B:20*
  )");
}

TEST(SchedulerTraceTest, ARequestTooLargeForTheWholeCacheFailsAloneAndOthersFinish) {
  ExpectTracePasses(R"(
    config blocks=4 block_size=4 max_num_batched_tokens=8 max_model_len=64
    add A prompt=10 max=20
    add B prompt=4 max=2
    run
    expect final=A:error,B:length free_blocks=4
    expect_solo
  )");
  // A prompt longer than the cache fails at admission, while nothing else runs.
  ExpectTracePasses(R"(
    config blocks=2 block_size=4 max_num_batched_tokens=64 max_model_len=64
    add A prompt=12 max=1
    add B prompt=3 max=1
    step
    expect finished=A:error,B:length scheduled=B:3* final=A:error,B:length
  )");
}

TEST(SchedulerTraceTest, StopTokensAndAbortFreeBlocks) {
  ExpectTracePasses(R"(
    config blocks=16 block_size=4
    add A prompt=6 max=10 stop_after=2
    add B prompt=9 max=10
    step
    expect free_blocks=11
    abort B
    expect running=A free_blocks=14
    step
    expect finished=A:stop free_blocks=16 running=
  )");
}

TEST(SchedulerTraceTest, DefaultMaxTokensRunsToMaxModelLen) {
  ExpectTracePasses(R"(
    config blocks=32 block_size=4 max_model_len=12
    add A prompt=8
    run
    expect final=A:length
  )");
}

// Many requests with shared prefixes under tiny budgets: every request completes with its
// solo output, the KV stays consistent, the budget and max-num-seqs hold.
TEST(SchedulerTraceTest, RandomisedTinyBudgetsCompleteWithSoloOutputs) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    const int block_size = 1 << (rng() % 3 + 1);
    const int budget = std::vector<int>{1, 3, 7, 16, 64}[rng() % 5];
    std::string script = fmt::format(
        "config blocks={} block_size={} max_num_seqs={} max_num_batched_tokens={} "
        "max_model_len=64 prefix_caching={}\n",
        12 + rng() % 20, block_size, 1 + rng() % 5, budget, rng() % 2);
    for (int i = 0; i < 10; ++i) {
      const std::string name(1, static_cast<char>('A' + i));
      const int prompt = 1 + rng() % 30;
      const int max = 1 + rng() % 12;
      std::string prefix;
      if (i > 0 && rng() % 2) prefix = fmt::format(" prefix=A:{}", std::min(prompt, 1 + static_cast<int>(rng() % 8)));
      script += fmt::format("add {} prompt={} max={}{}\n", name, prompt, max, prefix);
      if (rng() % 3 == 0) script += "step\n";
    }
    script += "run\nexpect_solo\n";
    SCOPED_TRACE(script);
    ExpectTracePasses(script);
  }
}

}  // namespace
}  // namespace kvserve::scheduler::testing
