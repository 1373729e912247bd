// The seed's offload validation against the real `kvserve serve` binary (stories260K, skipped
// when absent): a small device pool, an 8 GiB-style CPU tier (64 MiB here) and a file tier
// with blocks_per_chunk 1 and 8 read / 8 write threads. A long chat prompt is answered cold,
// pushed out of the device pool, answered three times from the CPU tier, then the server is
// restarted three times and each time answers it from the file tier. Every answer (content,
// reasoning_content, logprobs) is identical to the cold one and /metrics shows the hits per
// tier. The same through Redis: a real redis-server on loopback shared by two servers, the
// second serving the first's prefix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "http_client.h"
#include "offload/redis_server.h"
#include "server_process.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;

constexpr const char* kLongText =
    "Once upon a time there was a little girl named Lily who lived near the park. Every "
    "morning she went outside to play with her dog Max.";

json Chat(const std::string& text) {
  return {{"model", "stories"},
          {"messages", json::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", 16},
          {"temperature", 0.7},
          {"seed", 5},
          {"logprobs", true},
          {"top_logprobs", 2}};
}

// What must not change between a cold answer and a reloaded one.
json Answer(const Reply& r) {
  const json& choice = r.body["choices"][0];
  return {{"content", choice["message"]["content"]},
          {"reasoning_content", choice["message"].value("reasoning_content", json(nullptr))},
          {"logprobs", choice["logprobs"]},
          {"finish_reason", choice["finish_reason"]}};
}

int64_t Cached(const Reply& r) {
  return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
}

double TierMetric(int port, const std::string& name, const std::string& tier) {
  const Reply m = Get(port, "/metrics");
  return MetricValue(m.raw, "kvserve:offload_" + name + "{tier=\"" + tier + "\"}").value_or(-1);
}

class OffloadE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = TestModelPath();
    if (model_.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_offload_e2e_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // 10 blocks of 16 tokens (stories260K: 1280 B per token): one long request at a time.
  std::vector<std::string> Flags(const json& secondary_tiers) const {
    const json config = {
        {"kv_connector", "OffloadingConnector"},
        {"kv_role", "kv_both"},
        {"kv_connector_extra_config",
         {{"spec_name", "TieringOffloadingSpec"},
          {"cpu_bytes_to_use", 64 << 20},
          {"blocks_per_chunk", 1},
          {"eviction_policy", "lru"},
          {"secondary_tiers", secondary_tiers}}}};
    return {"--served-model-name", "stories", "--kv-cache-memory-bytes", "200KiB",
            "--max-model-len", "144", "--chat-template", "deepseek", "--reasoning-parser",
            "deepseek", "--kv-transfer-config", config.dump()};
  }

  json FileTier() const {
    return json::array({{{"type", "fs"},
                         {"root_dir", (dir_ / "fs").string()},
                         {"n_read_threads", 8},
                         {"n_write_threads", 8}}});
  }

  // Two different long prompts: together they need every device block.
  static void PushOut(int port, int round) {
    for (int i = 0; i < 2; ++i) {
      const std::string text = std::string(kLongText).replace(0, 4, "Far " + std::to_string(round * 2 + i));
      ASSERT_EQ(Post(port, "/v1/chat/completions", Chat(text)).status, 200);
    }
  }

  std::string model_;
  std::filesystem::path dir_;
};

TEST_F(OffloadE2eTest, CpuTierThenFileTierAfterRestartsGiveTheColdAnswer) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(model_, Flags(FileTier()), 60)) << server.error();
  const Reply cold = Post(server.port(), "/v1/chat/completions", Chat(kLongText));
  ASSERT_EQ(cold.status, 200) << cold.raw;
  EXPECT_EQ(Cached(cold), 0);
  const json want = Answer(cold);
  ASSERT_FALSE(want["reasoning_content"].get<std::string>().empty()) << cold.raw;
  const int64_t prompt_tokens = cold.body["usage"]["prompt_tokens"];
  const int64_t full_hit = (prompt_tokens - 1) / 16 * 16;
  ASSERT_GE(full_hit, 64) << "the prompt should span several blocks";

  for (int round = 0; round < 3; ++round) {
    PushOut(server.port(), round);
    const double cpu_hits = TierMetric(server.port(), "hits_total", "cpu");
    const Reply r = Post(server.port(), "/v1/chat/completions", Chat(kLongText));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(Answer(r), want) << "CPU-tier reload " << round;
    EXPECT_EQ(Cached(r), full_hit) << "CPU-tier reload " << round;
    EXPECT_GT(TierMetric(server.port(), "hits_total", "cpu"), cpu_hits) << "round " << round;
  }
  ASSERT_EQ(server.Stop(30), 0) << server.Log();

  for (int restart = 0; restart < 3; ++restart) {
    ServerProcess again;
    ASSERT_TRUE(again.Start(model_, Flags(FileTier()), 60)) << again.error();
    const Reply r = Post(again.port(), "/v1/chat/completions", Chat(kLongText));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(Answer(r), want) << "file-tier reload after restart " << restart;
    EXPECT_EQ(Cached(r), full_hit) << "restart " << restart;
    EXPECT_GE(TierMetric(again.port(), "hits_total", "file"), full_hit / 16) << again.Log();
    EXPECT_EQ(TierMetric(again.port(), "failed_checksums_total", "file"), 0);
    ASSERT_EQ(again.Stop(30), 0) << again.Log();
  }
}

TEST_F(OffloadE2eTest, RedisSharedByTwoServers) {
  if (!offload::testing::RedisServer::Available()) GTEST_SKIP() << "redis-server not installed";
  offload::testing::RedisServer redis;
  ASSERT_TRUE(redis.running());
  const json tiers = json::array(
      {{{"type", "redis"}, {"url", "redis://127.0.0.1:" + std::to_string(redis.port())}}});
  ServerProcess first, second;
  ASSERT_TRUE(first.Start(model_, Flags(tiers), 60)) << first.error();
  ASSERT_TRUE(second.Start(model_, Flags(tiers), 60)) << second.error();
  const Reply cold = Post(first.port(), "/v1/chat/completions", Chat(kLongText));
  ASSERT_EQ(cold.status, 200) << cold.raw;
  const int64_t full_hit = (cold.body["usage"]["prompt_tokens"].get<int64_t>() - 1) / 16 * 16;
  // The first server writes its computed blocks through to Redis on its write threads.
  for (int i = 0; i < 500 && TierMetric(first.port(), "stores_total", "redis") < full_hit / 16;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(TierMetric(first.port(), "stores_total", "redis"), full_hit / 16) << first.Log();
  const Reply shared = Post(second.port(), "/v1/chat/completions", Chat(kLongText));
  ASSERT_EQ(shared.status, 200) << shared.raw;
  EXPECT_EQ(Answer(shared), Answer(cold));
  EXPECT_EQ(Cached(shared), full_hit);
  EXPECT_GE(TierMetric(second.port(), "hits_total", "redis"), full_hit / 16) << second.Log();
}

}  // namespace
}  // namespace kvserve::server::testing
