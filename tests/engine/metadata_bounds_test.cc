// Model files whose metadata a hand or a bad converter got wrong, through the real engine: a
// NaN or infinite float parameter is a load error naming the key (not garbage output or a
// failed check), and counts past any context (a kvserve-v41 sliding window or indexer top-k of
// 2^31 - 1 or 2^32 - 1) mean the whole context, as they do at the context's length (not an
// allocation of 2^30 rows per thread, or a negative top-k). Found by setting every numeric
// metadata key of every architecture's tiny file to edge values (0, 1, 2^31 - 1, 2^32 - 1,
// NaN, +-inf, ...) and running `kvserve generate` on it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine_test_util.h"
#include "model/architecture.h"
#include "model/v41_random_model.h"
#include "support/temp_path.h"
#include "v41_test_model.h"

namespace kvserve::engine::testing {
namespace {

Result<std::unique_ptr<Engine>> LoadFile(const std::string& path) {
  EngineConfig config;
  config.max_num_seqs = 4;
  config.max_num_batched_tokens = 64;
  config.max_model_len = 128;
  config.block_size = 4;
  config.kv_cache_bytes = 8 << 20;
  config.num_threads = 2;
  return Engine::Load(path, config);
}

// The tiny preset of `arch` with `key` set to `value`, in a temp file.
std::string TinyWith(std::string_view arch, const std::string& key, gguf::Value value) {
  Result<const model::Architecture*> a = model::FindArchitecture(arch);
  CHECK(a.ok());
  Result<gguf::GgufWriter> w = (*a)->write_random("tiny", model::RandomWeights{});
  CHECK(w.ok()) << w.status().ToString();
  CHECK(w->Find(key) != nullptr) << key;
  w->Set(key, std::move(value));
  const std::string path = kvserve::testing::TempPath(fmt::format("{}_bad.gguf", arch));
  CHECK(w->Write(path).ok());
  return path;
}

TEST(ModelMetadataBounds, NonFiniteFloatParameterIsALoadErrorNamingTheKey) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string arch, key;
    float value;
  };
  for (const Case& c : {Case{"deepseek2", "deepseek2.rope.scaling.yarn_log_multiplier", nan},
                        Case{"qwen3moe", "qwen3moe.attention.layer_norm_rms_epsilon", inf},
                        Case{"gpt-oss", "gpt-oss.rope.freq_base", -inf},
                        Case{"llama", "llama.attention.layer_norm_rms_epsilon", nan}}) {
    SCOPED_TRACE(c.key);
    Result<std::unique_ptr<Engine>> engine = LoadFile(TinyWith(c.arch, c.key, gguf::Value::F32(c.value)));
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(engine.status().message().find(c.key), std::string::npos) << engine.status().ToString();
    EXPECT_NE(engine.status().message().find("finite"), std::string::npos);
  }
}

EngineRequest Request() {
  std::mt19937 rng(11);
  EngineRequest r;
  r.prompt = RandomPrompt(rng, 40, 128);  // past the window of 8 and the top-k of 4
  r.params.temperature = 0.0f;
  r.params.logprobs = 2;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  return r;
}

// The small v41 model with its window and top-k set (U32 as make-model writes them).
std::string V41With(uint32_t window, uint32_t top_k) {
  Result<gguf::GgufWriter> w = model::V41ModelWriter(SmallSpec());
  CHECK(w.ok());
  w->Set("kvserve-v41.attention.sliding_window", gguf::Value::U32(window));
  w->Set("kvserve-v41.indexer.top_k", gguf::Value::U32(top_k));
  const std::string path = kvserve::testing::TempPath(fmt::format("v41_{}_{}.gguf", window, top_k));
  CHECK(w->Write(path).ok());
  return path;
}

TEST(ModelMetadataBounds, V41WindowAndTopKPastAnyContextMeanTheWholeContext) {
  // max_model_len 128: a window and a top-k of 128 see every token and every entry.
  Result<std::unique_ptr<Engine>> whole = LoadFile(V41With(128, 128));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  const RunResult want = RunAll(**whole, {Request()})[0];
  ASSERT_EQ(want.tokens.size(), 12u);
  for (auto [window, top_k] : {std::pair<uint32_t, uint32_t>{0x7FFFFFFF, 0xFFFFFFFF},
                               {0xFFFFFFFF, 0x7FFFFFFF}}) {
    Result<std::unique_ptr<Engine>> engine = LoadFile(V41With(window, top_k));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ExpectSameOutputs(want, RunAll(**engine, {Request()})[0],
                      fmt::format("window {} top-k {}", window, top_k));
  }
}

}  // namespace
}  // namespace kvserve::engine::testing
