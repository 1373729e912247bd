// Speculative decoding changes nothing but the speed (engine/speculative.h): with ngram drafts,
// a request's tokens and logprobs are bit-identical to decoding without speculation, greedy or
// sampled, alone or among 16, under chunked prefill, after a prefix-cache hit and after a
// reload from the CPU tier; rejected drafts leave the KV pool intact (integrity checked after
// every step) and never reach the prefix cache (randomised test over the chain-hash model).
#include "engine/speculative.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine_test_util.h"
#include "model/dense_random.h"

namespace kvserve::engine::testing {
namespace {

const std::string kStoriesPath = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";

// ---- the proposer and the flag ----

using V = std::vector<int32_t>;

TEST(NgramDraftsTest, ProposesWhatFollowedTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  // a b c d a b c: the suffix "a b c" occurred at 0 and was followed by "d a b c".
  const std::vector<int32_t> t = {1, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(ProposeNgramDrafts(t, 3, 2, 3), (std::vector<int32_t>{4, 1, 2}));
  EXPECT_EQ(ProposeNgramDrafts(t, 8, 2, 3), (std::vector<int32_t>{4, 1, 2, 3}));  // to the end
  // The latest occurrence wins: x y 7 x y 8 x y -> 8 ...
  EXPECT_EQ(ProposeNgramDrafts(V{5, 6, 7, 5, 6, 8, 5, 6}, 2, 2, 2), (std::vector<int32_t>{8, 5}));
  // The longest suffix first: "2 3" last occurred at 5 (then 5), but "1 2 3" occurred at 0.
  EXPECT_EQ(ProposeNgramDrafts(V{1, 2, 3, 4, 9, 2, 3, 5, 1, 2, 3}, 1, 2, 3),
            (std::vector<int32_t>{4}));
  // Periodic text: the latest occurrence followed by enough tokens, else the earliest.
  EXPECT_EQ(ProposeNgramDrafts(V{9, 9, 9, 9, 9}, 2, 1, 3), (V{9, 9}));
  EXPECT_EQ(ProposeNgramDrafts(V{9, 9, 9, 9, 9}, 4, 1, 3), (V{9, 9}));
  EXPECT_EQ(ProposeNgramDrafts(V{1, 2, 1, 2, 1, 2, 1, 2}, 4, 2, 2), (V{1, 2, 1, 2}));
  EXPECT_TRUE(ProposeNgramDrafts(V{1, 2, 3, 4}, 4, 2, 3).empty());  // no repeat
  EXPECT_TRUE(ProposeNgramDrafts(V{7}, 4, 1, 3).empty());
}

TEST(SpeculativeConfigTest, ParsesVllmKeysAndRejectsTheRest) {
  Result<SpeculativeConfig> c = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
          "prompt_lookup_min": 2})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_max, 3);
  EXPECT_EQ(c->prompt_lookup_min, 2);
  c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 2})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_lookup_max, 5);
  EXPECT_EQ(c->prompt_lookup_min, 5);
  EXPECT_TRUE(c->draft_model.empty());
  c = ParseSpeculativeConfig(
      R"({"method": "draft_model", "model": "small.gguf", "num_speculative_tokens": 3})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->draft_model, "small.gguf");
  EXPECT_EQ(c->num_speculative_tokens, 3);
  for (const char* bad :
       {"", "[]", "{}", R"({"method": "eagle", "num_speculative_tokens": 2})",
        R"({"method": "ngram"})", R"({"method": "ngram", "num_speculative_tokens": 0})",
        R"({"method": "ngram", "num_speculative_tokens": "4"})",
        R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 5,
            "prompt_lookup_max": 2})",
        R"({"method": "ngram", "num_speculative_tokens": 4, "typo": 1})",
        R"({"method": "draft_model", "num_speculative_tokens": 4})",
        R"({"method": "draft_model", "model": "x.gguf", "num_speculative_tokens": 4,
            "prompt_lookup_max": 2})"}) {
    EXPECT_EQ(ParseSpeculativeConfig(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// ---- identity through the real engine ----

// A random tiny llama (vocab 512, outputs that vary), written once per process.
std::string TinyModelPath() {
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() /
                           fmt::format("kvserve-spec-test-{}.gguf", ::getpid()))
                              .string();
    model::DenseSpec spec = *model::FindDensePreset("llama", "tiny");
    spec.num_layers = 2;
    model::RandomWeights weights;
    weights.seed = 3;
    CHECK(model::DenseRandomWriter(spec, weights)->Write(p).ok());
    RemoveAtExit(p);
    return p;
  }();
  return path;
}

// The tiny model's first layer alone (the random weights depend on (seed, tensor name), so its
// embedding, layer 0 and output equal the target's): a weak draft that sometimes agrees.
std::string SmallDraftPath() {
  static const std::string path = [] {
    const std::string p = (std::filesystem::temp_directory_path() /
                           fmt::format("kvserve-spec-draft-{}.gguf", ::getpid()))
                              .string();
    model::DenseSpec spec = *model::FindDensePreset("llama", "tiny");
    spec.num_layers = 1;
    model::RandomWeights weights;
    weights.seed = 3;  // TinyModelPath's
    CHECK(model::DenseRandomWriter(spec, weights)->Write(p).ok());
    RemoveAtExit(p);
    return p;
  }();
  return path;
}

enum class Proposer { kNgram, kSelfDraft, kSmallDraft };

struct SpecCase {
  std::string name;
  bool stories;  // else the tiny random model
  Proposer proposer;
};

class SpeculativeTest : public ::testing::TestWithParam<SpecCase> {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    // Under the sanitizers (3-5x slower) one case covers the paths; the release run all four.
    if (GetParam().name != "TinyRandom_Ngram") GTEST_SKIP() << "release build only";
#endif
    path_ = GetParam().stories ? kStoriesPath : TinyModelPath();
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "missing " << path_;
  }

  std::unique_ptr<Engine> Load(bool speculate, int64_t budget, bool cpu_tier = false) const {
    EngineConfig config;
    config.max_num_seqs = 17;
    config.max_num_batched_tokens = budget;
    config.max_model_len = 256;
    config.kv_cache_bytes = 16 << 20;
    config.num_threads = 2;
    if (speculate) {
      switch (GetParam().proposer) {
        case Proposer::kNgram:
          config.speculative = *ParseSpeculativeConfig(
              R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
                  "prompt_lookup_min": 1})");
          break;
        case Proposer::kSelfDraft:  // the model drafts for itself: greedy drafts all pass
        case Proposer::kSmallDraft:
          config.speculative = SpeculativeConfig{
              3, 0, 0, GetParam().proposer == Proposer::kSelfDraft ? path_ : SmallDraftPath()};
          break;
      }
    }
    if (cpu_tier) {
      offload::OffloadConfig oc;
      oc.cpu_bytes_to_use = 64 << 20;
      config.offload = oc;
    }
    Result<std::unique_ptr<Engine>> engine = Engine::Load(path_, config);
    CHECK(engine.ok()) << engine.status().ToString();
    return std::move(engine).value();
  }

  // A short phrase repeated six times (36 tokens: two full blocks for the tier reload); what
  // the model writes after it repeats itself often enough for drafts to match. Greedy, or
  // temperature 0.8 / top-p 0.9 with a fixed seed.
  static EngineRequest Target(bool greedy) {
    std::mt19937 rng(11);
    EngineRequest r;
    std::vector<int32_t> passage = RandomPrompt(rng, 6, 400);
    for (int32_t& t : passage) t += 3;  // no special tokens
    for (int i = 0; i < 6; ++i) r.prompt.insert(r.prompt.end(), passage.begin(), passage.end());
    r.params.temperature = greedy ? 0.0f : 0.8f;
    r.params.top_p = greedy ? 1.0f : 0.9f;
    r.params.seed = 5;
    r.params.logprobs = 2;
    r.params.max_tokens = 64;
    r.params.ignore_eos = true;
    return r;
  }

  // 16 others around the target, some repetitive, some not, greedy and sampled.
  static std::vector<EngineRequest> Crowd(bool greedy) {
    std::mt19937 rng(17);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < 16; ++i) {
      EngineRequest r;
      r.prompt = RandomPrompt(rng, 6 + static_cast<int>(rng() % 20), 400);
      for (int32_t& t : r.prompt) t += 3;
      if (i % 3 == 0) r.prompt.insert(r.prompt.end(), r.prompt.begin(), r.prompt.end());
      r.params.temperature = i % 2 ? 0.0f : 1.0f;
      r.params.seed = 200 + i;
      r.params.max_tokens = 4 + static_cast<int32_t>(rng() % 30);
      r.params.logprobs = i % 3;
      r.params.ignore_eos = true;
      requests.push_back(std::move(r));
      if (i == 7) requests.push_back(Target(greedy));
    }
    return requests;
  }

  std::string path_;
};

TEST_P(SpeculativeTest, OutputsAreBitIdenticalWithAndWithoutDrafts) {
  for (bool greedy : {true, false}) {
    const std::string mode = greedy ? "greedy" : "sampled";
    const RunResult plain = RunAll(*Load(false, 2048), {Target(greedy)})[0];
    ASSERT_EQ(plain.tokens.size(), 64u);
    const std::vector<RunResult> plain_crowd = RunAll(*Load(false, 2048), Crowd(greedy));

    // Alone, then the same engine again (a prefix-cache hit of the prompt).
    auto engine = Load(true, 2048);
    ExpectSameOutputs(plain, RunAll(*engine, {Target(greedy)})[0], mode + " alone");
    ExpectSameOutputs(plain, RunAll(*engine, {Target(greedy)})[0], mode + " prefix hit");
    // Not vacuous: drafts were accepted (the random model's sampled text rarely repeats; a
    // random 1-layer draft rarely guesses the random target's sampled tokens).
    if (greedy || GetParam().stories) {
      EXPECT_GT(engine->Metrics().spec_num_accepted_tokens, 0) << mode << ": no draft accepted";
    }
    if (greedy && GetParam().proposer == Proposer::kSelfDraft) {
      // The model's own greedy drafts: its logits are the same whichever batch computes them.
      EXPECT_EQ(engine->Metrics().spec_num_draft_tokens,
                engine->Metrics().spec_num_accepted_tokens);
    } else {
      EXPECT_GT(engine->Metrics().spec_num_draft_tokens, engine->Metrics().spec_num_accepted_tokens)
          << mode << ": no draft rejected";
    }

    // Among 16, with small budgets: chunked prefill and drafts that do not all fit.
    for (int64_t budget : {16, 2048}) {
      const std::vector<RunResult> got = RunAll(*Load(true, budget), Crowd(greedy));
      ASSERT_EQ(got.size(), plain_crowd.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ExpectSameOutputs(plain_crowd[i], got[i], fmt::format("{} budget {} #{}", mode, budget, i));
      }
    }

    // Reloaded from the CPU tier after the device prefix cache was dropped.
    auto tiered = Load(true, 64, /*cpu_tier=*/true);
    ExpectSameOutputs(plain, RunAll(*tiered, {Target(greedy)})[0], mode + " cold, tiered");
    tiered->ResetPrefixCache();
    const int64_t loaded_before = tiered->Metrics().prefix_cache_loaded;
    ExpectSameOutputs(plain, RunAll(*tiered, {Target(greedy)})[0], mode + " CPU tier reload");
    EXPECT_GT(tiered->Metrics().prefix_cache_loaded, loaded_before) << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, SpeculativeTest,
    ::testing::Values(SpecCase{"Stories260K_Ngram", true, Proposer::kNgram},
                      SpecCase{"TinyRandom_Ngram", false, Proposer::kNgram},
                      SpecCase{"Stories260K_SelfDraft", true, Proposer::kSelfDraft},
                      SpecCase{"TinyRandom_SmallDraft", false, Proposer::kSmallDraft}),
    [](const ::testing::TestParamInfo<SpecCase>& info) { return info.param.name; });

// ---- rollback: rejected drafts never reach the KV pool's accounting or the prefix cache ----

// The chain-hash fake model (support/fake_model.h) turns any stale or wrong KV into different
// logits, and its pseudo-random logits reject almost every draft: random requests sharing
// prefixes run with and without speculation, in a small pool (preemption, eviction, prefix
// hits), and must give the same tokens; RunAll checks the pool's integrity after every step.
TEST(SpeculativeRollbackTest, RandomRequestsGiveTheSameTokensWithAndWithoutDrafts) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> prefixes;
    for (int p = 0; p < 3; ++p) prefixes.push_back(RandomPrompt(rng, 4 + rng() % 12, 50));
    std::vector<EngineRequest> requests;
    for (int i = 0; i < 24; ++i) {
      EngineRequest r;
      r.prompt = prefixes[rng() % prefixes.size()];
      const std::vector<int32_t> tail = RandomPrompt(rng, 1 + rng() % 10, 50);
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
      // Repeat part of the prompt so the ngram proposer drafts.
      r.prompt.insert(r.prompt.end(), r.prompt.begin(), r.prompt.begin() + r.prompt.size() / 2);
      r.params.temperature = 0.0f;
      r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 20);
      requests.push_back(std::move(r));
    }
    FakeEngineOptions o;
    o.num_blocks = 40;  // tight: preemption and eviction
    o.max_model_len = 96;
    o.config.max_num_batched_tokens = 24;
    const std::vector<RunResult> plain = RunAll(*MakeFakeEngine(o), requests);
    o.config.speculative = *ParseSpeculativeConfig(
        R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 2,
            "prompt_lookup_min": 1})");
    auto engine = MakeFakeEngine(o);
    const std::vector<RunResult> got = RunAll(*engine, requests);
    EXPECT_GT(engine->Metrics().spec_num_draft_tokens, 0) << "seed " << seed;
    for (size_t i = 0; i < requests.size(); ++i) {
      ExpectSameOutputs(plain[i], got[i], fmt::format("seed {} request {}", seed, i));
    }
    // Everything is freed; what the cache holds is consistent.
    EXPECT_TRUE(engine->kv().CheckIntegrity().ok());
  }
}

}  // namespace
}  // namespace kvserve::engine::testing
