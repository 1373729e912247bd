// The determinism contract (DESIGN.md section 5) end to end: a request's tokens and logprobs
// are bit-identical alone or among 16 others, for --max-num-batched-tokens 16, 64, 512 and
// 8192, with 1 or 2 threads, under preemption, and with or without a prefix-cache hit; on
// stories260K (skipped when absent), on a random tiny llama with f16, fp8 and fp4 KV, and on
// random qwen3 and gemma3 models (gemma3: a sliding-window KV group beside the full one).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine_test_util.h"
#include "model/dense_random.h"

namespace kvserve::engine::testing {
namespace {

const std::string kStoriesPath = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";

// A random tiny model of `arch` written once per process to a temporary file: llama (dim 64,
// 2 layers, 4 heads, 2 kv heads), qwen3 (q/k norms, head size 24 != dim / heads) or gemma3
// (6 layers, one KV head of 32, sliding window of 8 on layers 0-4, layer 5 global: two KV
// groups).
std::string RandomModelPath(const std::string& arch) {
  static std::map<std::string, std::string> paths;
  auto [it, inserted] = paths.emplace(arch, "");
  if (!inserted) return it->second;
  const std::string p = (std::filesystem::temp_directory_path() /
                         fmt::format("kvserve-engine-test-{}-{}.gguf", arch, ::getpid()))
                            .string();
  model::DenseSpec spec;  // dim 64, 2 layers, 4 heads, 2 kv heads
  spec.arch = arch;
  spec.vocab_size = 128;
  if (arch == "qwen3") spec.head_dim = 24;
  if (arch == "gemma3") {
    spec.num_layers = 6;
    spec.num_kv_heads = 1;
    spec.head_dim = 32;  // fp8 KV rows need whole blocks of 32
    spec.sliding_window = 8;
    spec.tied_output = true;
    spec.embedding_std = 0.125f;
  }
  model::RandomWeights weights;
  weights.seed = 5;
  weights.norm_spread = 0.1f;
  CHECK(model::DenseRandomWriter(spec, weights)->Write(p).ok());
  RemoveAtExit(p);
  it->second = p;
  return p;
}

struct Case {
  std::string name;
  bool stories;  // else the random model of `arch`
  std::string kv_dtype;
  std::string arch = "llama";
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class DeterminismTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    path_ = GetParam().stories ? kStoriesPath : RandomModelPath(GetParam().arch);
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "missing " << path_;
    vocab_ = GetParam().stories ? 512 : 128;
  }

  std::unique_ptr<Engine> Load(int64_t budget_tokens, int threads, bool caching,
                               uint64_t kv_bytes = 16 << 20) {
    EngineConfig config;
    config.max_num_seqs = 17;
    config.max_num_batched_tokens = budget_tokens;
    config.max_model_len = 128;
    config.kv_cache_dtype = GetParam().kv_dtype;
    config.kv_cache_bytes = kv_bytes;
    config.enable_prefix_caching = caching;
    config.num_threads = threads;
    Result<std::unique_ptr<Engine>> engine = Engine::Load(path_, config);
    CHECK(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  EngineRequest Target() const {
    std::mt19937 rng(42);
    EngineRequest r;
    r.prompt = RandomPrompt(rng, 20, vocab_);
    r.params.temperature = 0.8f;
    r.params.top_p = 0.95f;
    r.params.seed = 42;
    r.params.logprobs = 3;
    r.params.max_tokens = 24;
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
      r.prompt = RandomPrompt(rng, 8 + rng() % 25, vocab_);
      if (i < 4) r.prompt.insert(r.prompt.begin(), target.prompt.begin(), target.prompt.begin() + 16);
      r.params.temperature = i % 2 ? 0.0f : 1.0f;
      r.params.seed = 100 + i;
      r.params.max_tokens = 8 + static_cast<int32_t>(rng() % 17);
      r.params.logprobs = i % 3;
      requests.push_back(std::move(r));
      if (i == 7) requests.push_back(target);
    }
    return requests;
  }

  std::string path_;
  int vocab_ = 0;
};

TEST_P(DeterminismTest, TargetIsBitIdenticalAloneBatchedChunkedThreadedAndCached) {
  const RunResult solo = RunAll(*Load(8192, 1, false), {Target()})[0];
  ASSERT_EQ(solo.tokens.size(), 24u);
  const std::vector<EngineRequest> crowd = Crowd();
  for (int64_t budget : {16, 64, 512, 8192}) {
    for (int threads : {1, 2}) {
      auto engine = Load(budget, threads, true);
      const std::vector<RunResult> got = RunAll(*engine, crowd);
      ExpectSameOutputs(solo, got[8], fmt::format("budget {} threads {}", budget, threads));
      // The same request again: its prompt's full blocks now come from the prefix cache.
      const int64_t hits_before = engine->Metrics().prefix_cache_hits;
      const RunResult cached = RunAll(*engine, {Target()})[0];
      EXPECT_EQ(engine->Metrics().prefix_cache_hits - hits_before, 16);
      ExpectSameOutputs(solo, cached, fmt::format("prefix hit, budget {} threads {}", budget, threads));
    }
  }
}

TEST_P(DeterminismTest, TargetIsBitIdenticalUnderPreemption) {
  const RunResult solo = RunAll(*Load(8192, 1, false), {Target()})[0];
  // Room for about 4 requests of 40 tokens: the crowd preempts and recomputes.
  auto probe = Load(64, 1, true);
  int64_t block_bytes = 0;  // one block in every group
  for (const kv::GroupCapacity& g : probe->kv().capacity().groups) block_bytes += g.block_bytes;
  for (bool caching : {true, false}) {
    auto engine = Load(64, 2, caching, static_cast<uint64_t>(block_bytes * 12));
    const std::vector<RunResult> got = RunAll(*engine, Crowd());
    EXPECT_GT(engine->Metrics().num_preemptions, 0);
    ExpectSameOutputs(solo, got[8], fmt::format("preemption, caching {}", caching));
    for (const RunResult& r : got) EXPECT_EQ(r.finish, FinishReason::kLength);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, DeterminismTest,
    ::testing::Values(Case{"Stories260K_F16", true, "f16"}, Case{"Random_F16", false, "f16"},
                      Case{"Random_FP8", false, "fp8"}, Case{"Random_FP4", false, "fp4"},
                      Case{"Qwen3_F16", false, "f16", "qwen3"},
                      Case{"Gemma3_F16", false, "f16", "gemma3"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve::engine::testing
