// The scheduler's lower-tier path (kv/kv_connector.h) with a fake connector whose loads finish
// when the test says: a tier hit parks the request while other requests keep running; a
// finished load readmits it at the hit; a short load recomputes what did not arrive; an
// abort mid-load cancels the load and frees the blocks.
#include <gtest/gtest.h>

#include <set>

#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace kvserve::scheduler {
namespace {

// Holds a set of (group, hash); loads finish when Finish() is called.
class FakeConnector final : public kv::KvConnector {
 public:
  bool Contains(int group, const kv::BlockHash& hash) override {
    return held.count({group, hash.low, hash.high}) != 0;
  }
  void StartLoad(kv::RequestId id, std::vector<kv::BlockLoad> loads) override {
    started[id] = std::move(loads);
  }
  std::vector<kv::FinishedLoad> PollLoads(std::chrono::milliseconds) override {
    std::vector<kv::FinishedLoad> out;
    for (const auto& [id, n] : finished) out.push_back({id, n, {}});
    for (const auto& [id, n] : finished) started.erase(id);
    finished.clear();
    return out;
  }
  void CancelLoad(kv::RequestId id) override {
    started.erase(id);
    cancelled.insert(id);
  }

  void Hold(std::span<const kv::BlockHash> hashes) {
    for (const kv::BlockHash& h : hashes) held.insert({0, h.low, h.high});
  }
  void Finish(kv::RequestId id, size_t num_loaded) { finished[id] = num_loaded; }

  std::set<std::tuple<int, uint64_t, uint64_t>> held;
  std::map<kv::RequestId, std::vector<kv::BlockLoad>> started;
  std::map<kv::RequestId, size_t> finished;
  std::set<kv::RequestId> cancelled;
};

class LowerTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kv::KvCacheConfig config;
    config.num_layers = 1;
    config.block_size = 4;
    config.max_model_len = 64;
    config.groups.push_back({kv::FullAttention{1, 2, tensor::DType::kF32}, {0}, {}});
    kv::KvCacheManagerOptions options;
    options.allocate_memory = false;
    options.fingerprint.block_size = 4;
    kv_ = std::move(kv::KvCacheManager::Create(
                        config, 17 * kv::GroupBlockBytes(config, 0), options))
              .value();
    scheduler_ = std::make_unique<Scheduler>(SchedulerConfig{8, 64, 64}, kv_.get(), &connector_);
  }

  // A prompt of 13 tokens whose 3 full blocks the connector holds.
  std::vector<TokenId> HeldPrompt() {
    std::vector<TokenId> prompt(13);
    for (int i = 0; i < 13; ++i) prompt[i] = 100 + i;
    connector_.Hold(kv_->FindLongestCachedPrefix(prompt, "").block_hashes);
    return prompt;
  }

  void Add(RequestId id, std::vector<TokenId> prompt) {
    scheduler_->AddRequest({id, std::move(prompt), 2, ""});
  }

  static const ScheduledRequest* Find(const SchedulerOutput& out, RequestId id) {
    for (const ScheduledRequest& s : out.scheduled) {
      if (s.id == id) return &s;
    }
    return nullptr;
  }

  FakeConnector connector_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(LowerTierTest, ParksWhileLoadingThenResumesAtTheHit) {
  Add(1, HeldPrompt());
  Add(2, {1, 2, 3, 4, 5});
  SchedulerOutput out = scheduler_->Schedule();
  EXPECT_EQ(Find(out, 1), nullptr);  // loading
  ASSERT_NE(Find(out, 2), nullptr);  // the other request runs meanwhile
  EXPECT_EQ(scheduler_->Stats().num_loading, 1);
  ASSERT_EQ(connector_.started.at(1).size(), 3u);
  EXPECT_EQ(connector_.started.at(1)[2].index, 2);
  scheduler_->UpdateFromOutput(out, std::vector<SampledToken>{{2, 9, false}});

  connector_.Finish(1, 3);
  out = scheduler_->Schedule();
  const ScheduledRequest* a = Find(out, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->is_new);
  EXPECT_EQ(a->num_computed_tokens, 12);  // the 3 loaded blocks are skipped
  EXPECT_EQ(a->num_scheduled_tokens, 1);
  EXPECT_EQ(scheduler_->Find(1)->num_cached_tokens, 12);
  EXPECT_EQ(scheduler_->Find(1)->num_loaded_tokens, 12);
  EXPECT_EQ(scheduler_->Stats().prefix_loaded_tokens, 12);
  ASSERT_TRUE(kv_->CheckIntegrity().ok());
  // The loaded blocks are in the device prefix cache now.
  std::vector<TokenId> prompt(13);
  for (int i = 0; i < 13; ++i) prompt[i] = 100 + i;
  EXPECT_EQ(kv_->FindLongestCachedPrefix(prompt, "").num_cached_tokens, 12);
}

TEST_F(LowerTierTest, ShortLoadRegistersWhatArrivedAndRecomputesTheRest) {
  Add(1, HeldPrompt());
  SchedulerOutput out = scheduler_->Schedule();
  EXPECT_EQ(Find(out, 1), nullptr);
  connector_.Finish(1, 1);  // only block 0 arrived
  out = scheduler_->Schedule();
  const ScheduledRequest* a = Find(out, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->num_computed_tokens, 4);  // block 0 from the device cache, no second load
  EXPECT_EQ(a->num_scheduled_tokens, 9);
  EXPECT_TRUE(connector_.started.empty());
  // The block that did arrive was loaded from a tier: kvserve:prefix_cache_loaded_total counts
  // it (issue 19: it stayed 0 when a load came up short).
  EXPECT_EQ(scheduler_->Stats().prefix_loaded_tokens, 4);
  ASSERT_TRUE(kv_->CheckIntegrity().ok());
}

TEST_F(LowerTierTest, AbortWhileLoadingCancelsAndFrees) {
  Add(1, HeldPrompt());
  scheduler_->Schedule();
  ASSERT_EQ(scheduler_->Stats().num_loading, 1);
  EXPECT_TRUE(scheduler_->Abort(1));
  EXPECT_EQ(connector_.cancelled.count(1), 1u);
  EXPECT_FALSE(kv_->HasRequest(1));
  EXPECT_FALSE(scheduler_->HasUnfinished());
  EXPECT_EQ(kv_->pool(0).NumFreeBlocks(), kv_->pool(0).NumUsableBlocks());
  ASSERT_TRUE(kv_->CheckIntegrity().ok());
}

// The last running request is not failed for blocks a tier load holds (`kvserve simulate`
// found it; the engine did the same): it waits while the load runs, then takes back the blocks
// of the request the load parked, and both finish.
TEST_F(LowerTierTest, TheLastRunningRequestWaitsForBlocksALoadHolds) {
  std::vector<TokenId> long_prompt(40);  // 10 of the 16 blocks; grows to 64 tokens, all 16
  for (int i = 0; i < 40; ++i) long_prompt[i] = 500 + i;
  scheduler_->AddRequest({1, long_prompt, 24, ""});
  SchedulerOutput out = scheduler_->Schedule();
  scheduler_->UpdateFromOutput(out, std::vector<SampledToken>{{1, 7, false}});
  Add(2, HeldPrompt());  // its load holds 3 device blocks
  int waits = 0;
  for (int step = 0; step < 100 && scheduler_->HasUnfinished(); ++step) {
    out = scheduler_->Schedule();
    ASSERT_TRUE(out.finished.empty()) << out.finished.front().message;
    ASSERT_TRUE(kv_->CheckIntegrity().ok());
    if (out.scheduled.empty()) {  // request 1 waits for blocks a load holds
      ++waits;
      connector_.Finish(2, connector_.started.at(2).size());
      continue;
    }
    std::vector<SampledToken> sampled;
    for (const ScheduledRequest& s : out.scheduled) {
      if (s.needs_sample) sampled.push_back({s.id, 7, false});
    }
    scheduler_->UpdateFromOutput(out, sampled);
  }
  EXPECT_GT(waits, 0);
  EXPECT_FALSE(scheduler_->HasUnfinished());  // both finished (neither with an error)
}

}  // namespace
}  // namespace kvserve::scheduler
