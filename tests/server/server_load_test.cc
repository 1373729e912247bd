// End-to-end tests of `kvserve serve` under load and at the edges: 50 concurrent streaming
// clients against their solo runs, a client that hangs up mid-stream (its blocks come back),
// the queue limit (503 + Retry-After), the body limit (413), the API key (401) and SIGTERM.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "http_client.h"
#include "server_process.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;

#define REQUIRE_MODEL()                                                                 \
  const std::string model = TestModelPath();                                            \
  if (model.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR                     \
                                  << "/models/stories260K.gguf"

json StoryRequest(int i) {
  static const char* kPrompts[] = {"Once upon a time", "The little dog", "One day, a girl",
                                   "Tom and Sue", "The sun was"};
  return {{"prompt", kPrompts[i % 5]}, {"max_tokens", 48}, {"temperature", 0.9},
          {"seed", 1000 + i}, {"ignore_eos", true}};
}

TEST(ServerLoadTest, FiftyConcurrentStreamsMatchTheirSoloRuns) {
  REQUIRE_MODEL();
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--max-num-seqs", "64"}, 60)) << server.error();
  constexpr int kClients = 50;
  std::vector<std::string> solo(kClients);
  for (int i = 0; i < kClients; ++i) {
    Reply r = Post(server.port(), "/v1/completions", StoryRequest(i));
    ASSERT_EQ(r.status, 200) << r.raw;
    solo[i] = r.body["choices"][0]["text"];
  }
  std::vector<StreamReply> streamed(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      streamed[i] = PostStream(server.port(), "/v1/completions", StoryRequest(i));
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(streamed[i].status, 200) << i;
    EXPECT_TRUE(streamed[i].done) << i;
    EXPECT_EQ(StreamFinish(streamed[i]), "length") << i;
    EXPECT_EQ(StreamText(streamed[i]), solo[i]) << i;
  }
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

TEST(ServerLoadTest, ClientThatHangsUpIsAbortedAndItsBlocksFreed) {
  REQUIRE_MODEL();
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {}, 60)) << server.error();
  Reply models = Get(server.port(), "/v1/models");
  const int max_len = models.body["data"][0]["max_model_len"];
  const int max_tokens = max_len - 16;
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
  int chunks_seen = 0;
  StreamReply s = PostStream(server.port(), "/v1/completions", body, [&](const json&) {
    return ++chunks_seen == 2;  // hang up after two chunks
  });
  EXPECT_TRUE(s.cancelled);
  EXPECT_FALSE(s.done);
  // The server notices at its next write, aborts the request and frees its blocks.
  std::string metrics;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool idle = false;
  while (!idle && std::chrono::steady_clock::now() < deadline) {
    metrics = Get(server.port(), "/metrics").raw;
    idle = MetricValue(metrics, "kvserve:num_requests_running") == 0.0 &&
           MetricValue(metrics, "kvserve:kv_cache_used_blocks") == 0.0 &&
           MetricValue(metrics, "kvserve:num_requests_in_flight") == 0.0;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(idle) << metrics;
  // It was aborted, not run to the end.
  EXPECT_LT(*MetricValue(metrics, "kvserve:generation_tokens_total"), max_tokens) << metrics;
  // And the server still serves.
  EXPECT_EQ(Post(server.port(), "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 4}}).status,
            200);
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

TEST(ServerLoadTest, ApiKeyBodyLimitAndFullQueue) {
  REQUIRE_MODEL();
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--api-key", "s3cret", "--max-request-body", "4KiB",
                                   "--max-num-seqs", "1", "--max-waiting-requests", "0"},
                           60))
      << server.error();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}};
  Reply no_key = Post(server.port(), "/v1/completions", body);
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(no_key.body["error"]["type"], "authentication_error");
  EXPECT_EQ(Post(server.port(), "/v1/completions", body, {{"Authorization", "Bearer s3cre"}})
                .status, 401);
  EXPECT_EQ(Get(server.port(), "/v1/models", {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(Get(server.port(), "/health").status, 200);  // health needs no key
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret"}};
  EXPECT_EQ(Post(server.port(), "/v1/completions", body, auth).status, 200);
  // Two choices do not fit a queue of one running and none waiting.
  json two = body;
  two["n"] = 2;
  Reply full = Post(server.port(), "/v1/completions", two, auth);
  EXPECT_EQ(full.status, 503) << full.raw;
  EXPECT_EQ(full.body["error"]["code"], 503);
  bool has_retry_after = false;
  for (const auto& [k, v] : full.headers) has_retry_after |= k == "Retry-After";
  EXPECT_TRUE(has_retry_after);
  // Over the body limit.
  json big = body;
  big["prompt"] = std::string(8192, 'a');
  Reply too_big = Post(server.port(), "/v1/completions", big, auth);
  EXPECT_EQ(too_big.status, 413);
  EXPECT_EQ(too_big.body["error"]["code"], 413) << too_big.raw;
  EXPECT_EQ(Post(server.port(), "/v1/completions", body, auth).status, 200);
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

TEST(ServerLoadTest, SigtermDrainsInFlightStreamsAndExitsZero) {
  REQUIRE_MODEL();
  ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--shutdown-timeout", "20"}, 60)) << server.error();
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"ignore_eos", true}};
  bool terminated = false;
  StreamReply s = PostStream(server.port(), "/v1/completions", body, [&](const json&) {
    if (!terminated) server.Terminate();  // SIGTERM with the stream in flight
    terminated = true;
    return false;
  });
  EXPECT_TRUE(s.done);
  EXPECT_EQ(StreamFinish(s), "length");  // drained: ran to its end
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

}  // namespace
}  // namespace kvserve::server::testing
