// Helpers for engine tests: engines over the fake model or a GGUF file, and a driver that
// runs requests to completion and collects every token output.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "support/fake_model.h"

namespace kvserve::engine::testing {

// The fake model, sleeping `sleep_us` per step (to give other threads time in async tests).
class SlowFakeModel final : public model::Model {
 public:
  SlowFakeModel(int32_t vocab, int sleep_us) : inner_(vocab, 99), sleep_us_(sleep_us) {}
  std::string_view architecture() const override { return inner_.architecture(); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  void Forward(const model::Batch& batch, const model::KvViews& kv, ThreadPool& pool,
               float* logits) override {
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    inner_.Forward(batch, kv, pool, logits);
  }

 private:
  FakeModel inner_;
  int sleep_us_;
};

struct FakeEngineOptions {
  int sleep_us = 0;
  int64_t num_blocks = 256;  // usable blocks
  int block_size = 4;
  int64_t max_model_len = 128;
  EngineConfig config;
  int32_t vocab_size = 50;
};

inline std::unique_ptr<Engine> MakeFakeEngine(const FakeEngineOptions& o) {
  kv::KvCacheConfig kv_config;
  kv_config.num_layers = 1;
  kv_config.block_size = o.block_size;
  kv_config.max_model_len = o.max_model_len;
  kv_config.groups.push_back({kv::FullAttention{1, 2, tensor::DType::kF32}, {0}, {}});
  kv::KvCacheManagerOptions kv_options;
  kv_options.enable_prefix_caching = o.config.enable_prefix_caching;
  kv_options.fingerprint.block_size = o.block_size;
  EngineConfig config = o.config;
  config.block_size = o.block_size;
  config.kv_cache_bytes = static_cast<uint64_t>((o.num_blocks + 1) * kv::GroupBlockBytes(kv_config, 0));
  auto engine = Engine::Create(std::make_unique<SlowFakeModel>(o.vocab_size, o.sleep_us), kv_config,
                               kv_options, config, std::nullopt);
  CHECK(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

struct RunResult {
  std::vector<TokenOutput> tokens;
  std::optional<FinishReason> finish;
  std::string error;
};

// Adds every request (in order), steps until all finish; results in request order.
inline std::vector<RunResult> RunAll(Engine& engine, const std::vector<EngineRequest>& requests) {
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<RequestId> id = engine.AddRequest(requests[i]);
    CHECK(id.ok()) << id.status().ToString();
    index[*id] = i;
  }
  std::vector<RunResult> results(requests.size());
  for (int steps = 0; engine.HasUnfinished(); ++steps) {
    CHECK_LT(steps, 100000) << "engine did not finish";
    for (RequestOutput& out : engine.Step()) {
      RunResult& r = results[index.at(out.id)];
      EXPECT_FALSE(r.finish.has_value()) << "output after finish";
      for (TokenOutput& t : out.tokens) r.tokens.push_back(std::move(t));
      if (out.finish) {
        r.finish = out.finish;
        r.error = out.error;
      }
    }
    const Status integrity = engine.kv().CheckIntegrity();
    CHECK(integrity.ok()) << integrity.ToString();
  }
  return results;
}

// Deletes `path` when the test process exits (temporary model files).
inline void RemoveAtExit(const std::string& path) {
  static std::vector<std::string> paths;
  static const bool registered = [] {
    std::atexit([] {
      for (const std::string& p : paths) std::remove(p.c_str());
    });
    return true;
  }();
  (void)registered;
  paths.push_back(path);
}

inline std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len, int vocab) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

// Bit-identical tokens, logprobs and top logprobs.
inline void ExpectSameOutputs(const RunResult& want, const RunResult& got, const std::string& what) {
  ASSERT_EQ(want.tokens.size(), got.tokens.size()) << what;
  EXPECT_EQ(want.finish, got.finish) << what;
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    EXPECT_EQ(want.tokens[i].token, got.tokens[i].token) << what << " token " << i;
    EXPECT_EQ(want.tokens[i].logprob, got.tokens[i].logprob) << what << " token " << i;
    ASSERT_EQ(want.tokens[i].top_logprobs.size(), got.tokens[i].top_logprobs.size()) << what;
    for (size_t k = 0; k < want.tokens[i].top_logprobs.size(); ++k) {
      EXPECT_EQ(want.tokens[i].top_logprobs[k].token, got.tokens[i].top_logprobs[k].token) << what;
      EXPECT_EQ(want.tokens[i].top_logprobs[k].logprob, got.tokens[i].top_logprobs[k].logprob) << what;
    }
  }
}

}  // namespace kvserve::engine::testing
