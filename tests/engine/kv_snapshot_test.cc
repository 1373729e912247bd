// KvSnapshot (engine/kv_snapshot.h) over a real engine: at every step of a workload with
// shared prefixes and preemptions the block counts add up to the pool, every used block is
// held by exactly the request entries its reference count says and no cached or free block
// by any; requests and totals match the scheduler and Metrics(); the tiers' numbers are the
// offload manager's; a prompt reloaded from the CPU tier says so.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/kv_snapshot.h"
#include "engine_test_util.h"

namespace kvserve::engine {
namespace {

using testing::FakeEngineOptions;
using testing::MakeFakeEngine;

EngineRequest Request(std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// What the pool itself says, independently of the snapshot's own counting.
void ExpectMatchesEngine(const KvSnapshot& s, const Engine& engine) {
  ASSERT_EQ(s.groups.size(), static_cast<size_t>(engine.kv().num_groups()));
  for (int g = 0; g < engine.kv().num_groups(); ++g) {
    const kv::BlockPool& pool = engine.kv().pool(g);
    EXPECT_EQ(s.groups[g].num_blocks, pool.NumUsableBlocks());
    EXPECT_EQ(s.groups[g].num_cached + s.groups[g].num_free, pool.NumFreeBlocks());
  }
  const scheduler::Scheduler& sched = engine.scheduler();
  EXPECT_EQ(s.requests.size(),
            sched.running().size() + sched.waiting().size() + sched.loading().size());
  int num_running = 0;
  for (const KvRequestSnapshot& r : s.requests) {
    num_running += r.state == KvRequestState::kRunning;
    const scheduler::Request* found = sched.Find(r.id);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(r.num_computed_tokens, found->num_computed_tokens);
    EXPECT_EQ(r.num_output_tokens, found->NumOutputTokens());
  }
  EXPECT_EQ(num_running, static_cast<int>(sched.running().size()));
  const MetricsSnapshot m = engine.Metrics();
  EXPECT_EQ(s.metrics.num_steps, m.num_steps);
  EXPECT_EQ(s.metrics.num_preemptions, m.num_preemptions);
  EXPECT_EQ(s.metrics.num_generation_tokens, m.num_generation_tokens);
  EXPECT_EQ(s.metrics.prefix_cache_hits, m.prefix_cache_hits);
}

TEST(KvSnapshotTest, BlocksAddUpAndBelongToTheirRequestsAtEveryStep) {
  FakeEngineOptions o;
  o.num_blocks = 40;  // small: the workload below preempts
  o.config.max_num_batched_tokens = 32;
  std::unique_ptr<Engine> engine = MakeFakeEngine(o);
  const KvSettings settings = MakeKvSettings(*engine);
  std::mt19937 rng(5);
  const std::vector<int32_t> shared = testing::RandomPrompt(rng, 24, o.vocab_size);
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt = shared;
    for (int32_t t : testing::RandomPrompt(rng, 5 + i, o.vocab_size)) prompt.push_back(t);
    ASSERT_TRUE(engine->AddRequest(Request(prompt, 30)).ok());
  }
  bool saw_shared = false, saw_cached = false, saw_preempted = false;
  uint64_t sequence = 0;
  while (engine->HasUnfinished()) {
    engine->Step();
    const KvSnapshot s = TakeKvSnapshot(*engine, settings, ++sequence, 0.0);
    ASSERT_TRUE(CheckKvSnapshot(s).ok()) << CheckKvSnapshot(s).ToString();
    ExpectMatchesEngine(s, *engine);
    for (size_t b = 1; b < s.groups[0].states.size(); ++b) {
      saw_shared |= s.groups[0].RefCount(static_cast<kv::BlockId>(b)) > 1;
      saw_cached |= s.groups[0].states[b] == kv::BlockState::kCached;
    }
    for (const KvRequestSnapshot& r : s.requests) saw_preempted |= r.state == KvRequestState::kPreempted;
    ASSERT_LT(sequence, 10000u);
  }
  EXPECT_TRUE(saw_shared) << "the shared prefix was never held by two requests at once";
  EXPECT_TRUE(saw_cached);
  EXPECT_TRUE(saw_preempted) << "the pool was never tight enough to preempt";
  EXPECT_GT(engine->Metrics().num_preemptions, 0);
  const KvSnapshot end = TakeKvSnapshot(*engine, settings, ++sequence, 0.0);
  EXPECT_EQ(end.groups[0].num_used, 0);
  EXPECT_TRUE(end.requests.empty());
  EXPECT_EQ(end.settings.block_size, o.block_size);
  EXPECT_EQ(end.settings.max_num_batched_tokens, 32);
  EXPECT_FALSE(end.settings.capacity_report.empty());
}

TEST(KvSnapshotTest, CheckFindsBrokenSnapshots) {
  FakeEngineOptions o;
  std::unique_ptr<Engine> engine = MakeFakeEngine(o);
  ASSERT_TRUE(engine->AddRequest(Request({1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)).ok());
  engine->Step();
  const KvSnapshot good = TakeKvSnapshot(*engine, MakeKvSettings(*engine), 1, 0.0);
  ASSERT_TRUE(CheckKvSnapshot(good).ok());
  ASSERT_EQ(good.requests.size(), 1u);
  const kv::BlockId held = good.requests[0].block_tables[0].front();

  KvSnapshot counts = good;
  ++counts.groups[0].num_free;
  EXPECT_FALSE(CheckKvSnapshot(counts).ok());

  KvSnapshot orphan = good;  // a used block nobody holds
  orphan.requests.clear();
  EXPECT_FALSE(CheckKvSnapshot(orphan).ok());

  KvSnapshot freed = good;  // a request holding a free block
  freed.groups[0].states[held] = kv::BlockState::kFree;
  --freed.groups[0].num_used;
  ++freed.groups[0].num_free;
  EXPECT_FALSE(CheckKvSnapshot(freed).ok());

  KvSnapshot twice = good;  // held twice, ref count 1
  twice.requests.push_back(twice.requests[0]);
  EXPECT_FALSE(CheckKvSnapshot(twice).ok());

  KvSnapshot stale = good;  // states that do not match the counts
  stale.groups[0].states[held] = kv::BlockState::kCached;
  EXPECT_FALSE(CheckKvSnapshot(stale).ok());
}

TEST(KvSnapshotTest, BlockInfoNamesHoldersAndHash) {
  FakeEngineOptions o;
  std::unique_ptr<Engine> engine = MakeFakeEngine(o);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(engine->AddRequest(Request(prompt, 8)).ok());
  engine->Step();  // its first two blocks are full, computed and hashed
  ASSERT_TRUE(engine->AddRequest(Request(prompt, 8)).ok());
  engine->Step();  // the second request shares them
  const KvSnapshot s = TakeKvSnapshot(*engine, MakeKvSettings(*engine), 1, 0.0);
  ASSERT_EQ(s.requests.size(), 2u);
  const kv::BlockId first = s.requests[0].block_tables[0][0];
  EXPECT_EQ(s.groups[0].states[first], kv::BlockState::kShared);
  EXPECT_EQ(s.groups[0].RefCount(first), 2);
  std::optional<KvBlockInfo> info = TakeKvBlockInfo(*engine, 0, first);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, kv::BlockState::kShared);
  EXPECT_EQ(info->ref_count, 2);
  EXPECT_TRUE(info->hash.has_value());
  EXPECT_EQ(info->owners, (std::vector<scheduler::RequestId>{s.requests[0].id, s.requests[1].id}));
  EXPECT_FALSE(TakeKvBlockInfo(*engine, 1, first).has_value());
  EXPECT_FALSE(TakeKvBlockInfo(*engine, 0, 100000).has_value());
  EXPECT_FALSE(TakeKvBlockInfo(*engine, 0, -1).has_value());
}

TEST(KvSnapshotTest, TiersMatchTheOffloadManagerAndReloadsShowTheirSource) {
  FakeEngineOptions o;
  o.num_blocks = 16;
  offload::OffloadConfig tiers;
  tiers.cpu_bytes_to_use = 1 << 20;
  o.config.offload = tiers;
  std::unique_ptr<Engine> engine = MakeFakeEngine(o);
  const KvSettings settings = MakeKvSettings(*engine);
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = testing::RandomPrompt(rng, 33, o.vocab_size);
  testing::RunAll(*engine, {Request(prompt, 2)});
  for (int i = 0; i < 6; ++i) {  // push it out of the 16-block device pool
    testing::RunAll(*engine, {Request(testing::RandomPrompt(rng, 33, o.vocab_size), 2)});
  }
  ASSERT_TRUE(engine->AddRequest(Request(prompt, 2)).ok());
  std::optional<KvRequestSnapshot> reloaded;
  uint64_t sequence = 0;
  while (engine->HasUnfinished()) {
    engine->Step();
    const KvSnapshot s = TakeKvSnapshot(*engine, settings, ++sequence, 0.0);
    ASSERT_TRUE(CheckKvSnapshot(s).ok()) << CheckKvSnapshot(s).ToString();
    for (const KvRequestSnapshot& r : s.requests) {
      if (r.state == KvRequestState::kRunning) reloaded = r;
    }
  }
  ASSERT_TRUE(reloaded.has_value());
  EXPECT_EQ(reloaded->num_cached_tokens, 32);  // (33 - 1) / 4 * 4
  EXPECT_EQ(reloaded->tier_tokens[static_cast<int>(offload::TierKind::kCpu)], 32);
  const KvSnapshot s = TakeKvSnapshot(*engine, settings, ++sequence, 0.0);
  const std::vector<offload::TierStats> stats = engine->offload()->Stats();
  ASSERT_EQ(s.tiers.size(), stats.size());
  EXPECT_EQ(s.tiers[0].stats.tier, "cpu");
  EXPECT_EQ(s.tiers[0].capacity_bytes, 1 << 20);
  EXPECT_GT(s.tiers[0].stats.hits, 0);
  for (size_t t = 0; t < stats.size(); ++t) {
    EXPECT_EQ(s.tiers[t].stats.hits, stats[t].hits);
    EXPECT_EQ(s.tiers[t].stats.loads, stats[t].loads);
    EXPECT_EQ(s.tiers[t].stats.stores, stats[t].stores);
    EXPECT_EQ(s.tiers[t].stats.usage_bytes, stats[t].usage_bytes);
  }
  EXPECT_GT(s.metrics.prefix_cache_loaded, 0);
}

}  // namespace
}  // namespace kvserve::engine
