// The offload tiers through the real engine, on stories260K (skipped when absent) and on the
// small kvserve-v41 hybrid model (sliding-window + compressed-latent groups), deepseek2 tiny
// (MLA latents, MoE), qwen3moe tiny (GQA, MoE) and gpt-oss tiny (MXFP4 experts, sinks, a
// sliding group beside the full one): a prompt pushed out of a small device pool
// comes back from the CPU tier, and from the file tier after a restart (a new engine over the
// same directory; its records in the page cache or not), with tokens and logprobs bit-identical to the cold run; a corrupted block file
// is detected and recomputed, never served.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "moe_test_models.h"
#include "v41_test_model.h"

namespace kvserve::engine {
namespace {

using testing::ExpectSameOutputs;
using testing::RunAll;
using testing::RunResult;

struct ModelCase {
  std::string name;
  std::string (*path)();
  int block_size;
  uint64_t kv_bytes;  // a device pool a little larger than one request
  int64_t max_model_len;
  int prompt_len;
  int32_t vocab;
};

std::string StoriesPath() {
  return std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
}

const ModelCase kStories{"stories260K", &StoriesPath, 16, 10 * 16 * 1280, 144, 100, 512};
const ModelCase kV41{"v41", &testing::SmallModelPath, 4, 40 << 10, 128, 61, 128};
// deepseek2 tiny: one 96-value F32 latent row per token per layer, 3 layers = 1152 B/token.
const ModelCase kDeepseek2{"deepseek2", &testing::Deepseek2Path, 16, 10 * 16 * 1152, 144, 100, 512};
// qwen3moe tiny: F32 K and V of 2 heads x 48 dims over 4 layers = 3072 B/token.
const ModelCase kQwen3Moe{"qwen3moe", &testing::Qwen3MoePath, 16, 10 * 16 * 3072, 144, 100, 1024};
// gpt-oss tiny: F16 K and V of 2 heads x 32 dims, 8192 B per block in each group (layers 1, 3
// full; 0, 2 sliding over 16 tokens). One request of 144 tokens in 64-token chunks: 9 full +
// min(ceil((16 + 64) / 16) + 1, 9) = 6 sliding blocks, plus the two null blocks.
const ModelCase kGptOss{"gpt_oss", &testing::GptOssPath, 16, (9 + 6 + 2) * 8192, 144, 100, 1024};

class OffloadEngineTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(GetParam().path())) {
      GTEST_SKIP() << "missing " << GetParam().path();
    }
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("kvserve_offload_engine_{}_{}_{}", ::getpid(), GetParam().name, counter_++);
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The model's small device pool, a CPU tier and, with `files`, a file tier under dir_.
  std::unique_ptr<Engine> MakeEngine(bool files) {
    const ModelCase& m = GetParam();
    EngineConfig config;
    config.kv_cache_bytes = m.kv_bytes;
    config.max_model_len = m.max_model_len;
    config.block_size = m.block_size;
    config.max_num_batched_tokens = 64;
    offload::OffloadConfig oc;
    oc.cpu_bytes_to_use = 64 << 20;
    if (files) {
      oc.spec_name = "TieringOffloadingSpec";
      oc.file = offload::FileTierConfig{(dir_ / "fs").string(), 8, 8};
    }
    config.offload = oc;
    Result<std::unique_ptr<Engine>> engine = Engine::Load(m.path(), config);
    CHECK(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  EngineRequest Request(uint32_t seed, int len, int max_tokens) const {
    std::mt19937 rng(seed);
    EngineRequest r;
    r.prompt = testing::RandomPrompt(rng, len, GetParam().vocab);
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0.8f;
    r.params.seed = 7;
    r.params.logprobs = 3;
    r.params.ignore_eos = true;
    return r;
  }

  // Tokens a hit of the whole prompt serves (the last token is always computed).
  int64_t FullHit() const {
    const ModelCase& m = GetParam();
    return (m.prompt_len - 1) / m.block_size * m.block_size;
  }

  // Runs different prompts through the pool until they filled it twice over: nothing of an
  // earlier request is left in the device cache.
  void PushOut(Engine& engine, uint32_t seed) const {
    const int64_t capacity = engine.kv().capacity().num_tokens;
    for (int64_t done = 0; done < 2 * capacity; done += GetParam().prompt_len) {
      RunAll(engine, {Request(seed++, GetParam().prompt_len, 2)});
    }
  }

  // One request alone; its cached-token count at admission.
  static RunResult RunOne(Engine& engine, const EngineRequest& r, int64_t* num_cached) {
    Result<RequestId> id = engine.AddRequest(r);
    CHECK(id.ok());
    RunResult result;
    while (engine.HasUnfinished()) {
      for (RequestOutput& out : engine.Step()) {
        *num_cached = out.num_cached_tokens;
        for (TokenOutput& t : out.tokens) result.tokens.push_back(std::move(t));
        if (out.finish) result.finish = out.finish;
      }
      CHECK(engine.kv().CheckIntegrity().ok());
    }
    return result;
  }

  // `r` cold on an engine with a file tier that then shuts down (flushing its writes).
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

  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

TEST_P(OffloadEngineTest, CpuTierReloadIsBitIdentical) {
  std::unique_ptr<Engine> engine = MakeEngine(/*files=*/false);
  const EngineRequest a = Request(1, GetParam().prompt_len, 16);
  int64_t cached = -1;
  const RunResult cold = RunOne(*engine, a, &cached);
  EXPECT_EQ(cached, 0);
  for (int round = 0; round < 3; ++round) {
    PushOut(*engine, 100 + 10 * round);
    const int64_t hits_before = Tier(*engine, "cpu").hits;
    const RunResult warm = RunOne(*engine, a, &cached);
    ExpectSameOutputs(cold, warm, "CPU-tier reload " + std::to_string(round));
    EXPECT_EQ(cached, FullHit()) << "round " << round;
    EXPECT_GT(Tier(*engine, "cpu").hits, hits_before) << "round " << round;
  }
  EXPECT_GT(engine->Metrics().prefix_cache_loaded, 0);
}

// Writes every block file back and drops its pages from the page cache (the file tier then
// reads them with O_DIRECT), or reads each once (`warm`: the page cache holds them again).
void SetPageCache(const std::filesystem::path& dir, bool warm) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".kvb") continue;
    if (warm) {
      std::ifstream(entry.path(), std::ios::binary).ignore(1 << 30);
      continue;
    }
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << entry.path();
    ASSERT_EQ(::fdatasync(fd), 0);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ::close(fd);
  }
}

TEST_P(OffloadEngineTest, FileTierServesAfterRestart) {
  const EngineRequest a = Request(2, GetParam().prompt_len, 16);
  const RunResult cold = ColdRunWithFiles(a, 200);
  for (int restart = 0; restart < 3; ++restart) {
    // Restarts 0 and 2 read records the page cache does not hold (the direct read path where
    // the filesystem has one), restart 1 records it holds.
    SetPageCache(dir_ / "fs", /*warm=*/restart == 1);
    std::unique_ptr<Engine> engine = MakeEngine(/*files=*/true);
    int64_t cached = -1;
    const RunResult warm = RunOne(*engine, a, &cached);
    ExpectSameOutputs(cold, warm, "file-tier reload after restart " + std::to_string(restart));
    EXPECT_EQ(cached, FullHit()) << "restart " << restart;
    EXPECT_GT(Tier(*engine, "file").hits, 0) << "restart " << restart;
  }
}

TEST_P(OffloadEngineTest, CorruptBlockFileIsRecomputedNotServed) {
  const EngineRequest a = Request(3, GetParam().prompt_len, 16);
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
  int64_t cached = -1;
  const RunResult again = RunOne(*engine, a, &cached);
  ExpectSameOutputs(cold, again, "after every block file was corrupted");
  EXPECT_GT(Tier(*engine, "file").failed_checksums, 0);
}

TEST_P(OffloadEngineTest, AbortBeforeTheLoadedRequestRunsFreesBlocks) {
  std::unique_ptr<Engine> engine = MakeEngine(/*files=*/false);
  const EngineRequest a = Request(4, GetParam().prompt_len, 8);
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

INSTANTIATE_TEST_SUITE_P(Models, OffloadEngineTest,
                         ::testing::Values(kStories, kV41, kDeepseek2, kQwen3Moe, kGptOss),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve::engine
