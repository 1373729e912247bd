// The offload tiers through the real engine on stories260K (skipped when absent): a prompt
// pushed out of a small device pool comes back from the CPU tier, and from the file tier
// after a restart (a new engine over the same directory), with tokens and logprobs
// bit-identical to the cold run; a corrupted block file is detected and recomputed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvserve::engine {
namespace {

using testing::ExpectSameOutputs;
using testing::RunAll;
using testing::RunResult;

const std::string kStoriesPath = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";

class OffloadEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kStoriesPath)) GTEST_SKIP() << "missing " << kStoriesPath;
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_offload_engine_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A device pool of 9 usable 16-token blocks (stories260K: 1280 B per token), a CPU tier
  // and, with `files`, a file tier under dir_.
  std::unique_ptr<Engine> MakeEngine(bool files, uint64_t cpu_bytes = 64 << 20) {
    EngineConfig config;
    config.kv_cache_bytes = 10 * 16 * 1280;
    config.max_model_len = 144;
    offload::OffloadConfig oc;
    oc.cpu_bytes_to_use = cpu_bytes;
    if (files) {
      oc.spec_name = "TieringOffloadingSpec";
      oc.file = offload::FileTierConfig{(dir_ / "fs").string(), 8, 8};
    }
    config.offload = oc;
    Result<std::unique_ptr<Engine>> engine = Engine::LoadLlama(kStoriesPath, config);
    CHECK(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  static EngineRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
    EngineRequest r;
    r.prompt = prompt;
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0.8f;
    r.params.seed = 7;
    r.params.logprobs = 3;
    return r;
  }

  static std::vector<int32_t> Prompt(uint32_t seed, int len) {
    std::mt19937 rng(seed);
    return testing::RandomPrompt(rng, len, 512);
  }

  // Runs a different 112-token prompt: its 8 blocks evict everything else from the pool.
  static void PushOut(Engine& engine, uint32_t seed) {
    RunAll(engine, {Request(Prompt(seed, 110), 2)});
  }

  // One request alone; its cached-token count at admission.
  static RunResult RunOne(Engine& engine, const EngineRequest& r, int64_t* num_cached) {
    Result<RequestId> id = engine.AddRequest(r);
    CHECK(id.ok());
    RunResult result;
    while (engine.HasUnfinished()) {
      for (RequestOutput& out : engine.Step()) {
        *num_cached = out.num_cached_tokens;
        if (out.token) result.tokens.push_back(std::move(*out.token));
        if (out.finish) result.finish = out.finish;
      }
      CHECK(engine.kv().CheckIntegrity().ok());
    }
    return result;
  }

  // `r` cold on a server with a file tier that then shuts down (flushing its writes).
  RunResult ColdRunWithFiles(const EngineRequest& r, uint32_t push_seed) {
    std::unique_ptr<Engine> engine = MakeEngine(/*files=*/true);
    int64_t cached = -1;
    RunResult cold = RunOne(*engine, r, &cached);
    EXPECT_EQ(cached, 0);
    PushOut(*engine, push_seed);
    return cold;
  }

  static offload::TierStats Tier(const Engine& engine, const std::string& name) {
    for (const offload::TierStats& t : engine.offload()->Stats()) {
      if (t.tier == name) return t;
    }
    ADD_FAILURE() << "no tier " << name;
    return {};
  }

  std::filesystem::path dir_;
};

TEST_F(OffloadEngineTest, CpuTierReloadIsBitIdentical) {
  std::unique_ptr<Engine> engine = MakeEngine(/*files=*/false);
  const EngineRequest a = Request(Prompt(1, 100), 16);
  int64_t cached = -1;
  const RunResult cold = RunOne(*engine, a, &cached);
  EXPECT_EQ(cached, 0);
  for (int round = 0; round < 3; ++round) {
    PushOut(*engine, 100 + round);
    const int64_t hits_before = Tier(*engine, "cpu").hits;
    const RunResult warm = RunOne(*engine, a, &cached);
    ExpectSameOutputs(cold, warm, "CPU-tier reload " + std::to_string(round));
    EXPECT_EQ(cached, 96) << "round " << round;  // 6 full blocks (the last token is computed)
    EXPECT_GT(Tier(*engine, "cpu").hits, hits_before) << "round " << round;
  }
  EXPECT_GT(engine->Metrics().prefix_cache_loaded, 0);
}

TEST_F(OffloadEngineTest, FileTierServesAfterRestart) {
  const EngineRequest a = Request(Prompt(2, 100), 16);
  int64_t cached = -1;
  const RunResult cold = ColdRunWithFiles(a, 200);
  for (int restart = 0; restart < 3; ++restart) {
    std::unique_ptr<Engine> engine = MakeEngine(/*files=*/true);
    const RunResult warm = RunOne(*engine, a, &cached);
    ExpectSameOutputs(cold, warm, "file-tier reload after restart " + std::to_string(restart));
    EXPECT_EQ(cached, 96) << "restart " << restart;
    EXPECT_GT(Tier(*engine, "file").hits, 0) << "restart " << restart;
  }
}

TEST_F(OffloadEngineTest, CorruptBlockFileIsRecomputedNotServed) {
  const EngineRequest a = Request(Prompt(3, 100), 16);
  int64_t cached = -1;
  const RunResult cold = ColdRunWithFiles(a, 300);
  int corrupted = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_ / "fs")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".kvb") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);  // a byte of the payload
    char c = 0;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  std::unique_ptr<Engine> engine = MakeEngine(/*files=*/true);
  const RunResult again = RunOne(*engine, a, &cached);
  ExpectSameOutputs(cold, again, "after every block file was corrupted");
  EXPECT_GT(Tier(*engine, "file").failed_checksums, 0);
}

TEST_F(OffloadEngineTest, AbortBeforeTheLoadedRequestRunsFreesBlocks) {
  std::unique_ptr<Engine> engine = MakeEngine(/*files=*/false);
  const EngineRequest a = Request(Prompt(4, 100), 8);
  int64_t cached = -1;
  RunOne(*engine, a, &cached);
  PushOut(*engine, 400);
  Result<RequestId> id = engine->AddRequest(a);
  ASSERT_TRUE(id.ok());
  engine->Step();  // its blocks load from the CPU tier (the step may wait for them)
  ASSERT_TRUE(engine->kv().HasRequest(*id));  // blocks reserved, nothing computed yet
  EXPECT_TRUE(engine->scheduler().running().empty());
  EXPECT_TRUE(engine->Abort(*id));
  while (engine->HasUnfinished()) engine->Step();
  ASSERT_TRUE(engine->kv().CheckIntegrity().ok());
  EXPECT_EQ(engine->kv().Stats().num_requests, 0);
  const RunResult after = RunOne(*engine, a, &cached);  // still correct afterwards
  EXPECT_EQ(after.tokens.size(), 8u);
}

}  // namespace
}  // namespace kvserve::engine
