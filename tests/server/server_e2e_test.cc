// End-to-end tests of `kvserve serve` (the real binary, loopback, stories260K): every route,
// the error cases, streaming, stop strings across token boundaries, n, echo, logprobs.
// Concurrency, disconnect and shutdown tests are in server_load_test.cc.
#include <gtest/gtest.h>

#include "http_client.h"
#include "server_process.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;

class ServerE2eTest : public SharedServerTest<ServerE2eTest> {
 public:
  static std::vector<std::string> ServerFlags() {
    return {"--served-model-name", "stories", "--max-num-seqs", "8"};
  }

 protected:
  static json Completion(json extra) {
    json body = {{"model", "stories"},
                 {"prompt", "Once upon a time"},
                 {"max_tokens", 24},
                 {"temperature", 0}};
    body.update(extra);
    return body;
  }
  void ExpectError(const Reply& r, int status, const std::string& type) {
    EXPECT_EQ(r.status, status) << r.raw;
    ASSERT_TRUE(r.body.is_object()) << r.raw;
    ASSERT_TRUE(r.body.contains("error")) << r.raw;
    EXPECT_TRUE(r.body["error"]["message"].is_string());
    EXPECT_EQ(r.body["error"]["type"], type) << r.raw;
    EXPECT_EQ(r.body["error"]["code"], status);
  }
};

TEST_F(ServerE2eTest, HealthModelsVersion) {
  EXPECT_EQ(Get(port(), "/health").status, 200);
  Reply models = Get(port(), "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.body["object"], "list");
  EXPECT_EQ(models.body["data"][0]["id"], "stories");
  EXPECT_GT(models.body["data"][0]["max_model_len"].get<int>(), 0);
  EXPECT_EQ(Get(port(), "/version").status, 200);
}

TEST_F(ServerE2eTest, CompletionGreedyMatchesItsStream) {
  Reply r = Post(port(), "/v1/completions", Completion(json::object()));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "text_completion");
  const std::string text = r.body["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 24);
  Reply tok = Post(port(), "/tokenize", {{"prompt", "Once upon a time"}});
  ASSERT_EQ(tok.status, 200);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], tok.body["count"]);
  EXPECT_EQ(r.body["usage"]["total_tokens"], tok.body["count"].get<int>() + 24);
  EXPECT_TRUE(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number());

  StreamReply s = PostStream(port(), "/v1/completions",
                             Completion({{"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(StreamText(s), text);
  EXPECT_EQ(StreamFinish(s), "length");
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_TRUE(s.chunks.back()["choices"].empty());
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 24);
}

TEST_F(ServerE2eTest, ChatNonStreamingAndStreaming) {
  json body = {{"model", "stories"},
               {"max_tokens", 16},
               {"temperature", 0},
               {"messages",
                {{{"role", "system"}, {"content", "Tell a story."}},
                 {{"role", "user"}, {"content", "Once upon a time"}}}}};
  Reply r = Post(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  const std::string content = r.body["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());
  StreamReply s = PostStream(port(), "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(StreamText(s), content);
  EXPECT_EQ(StreamFinish(s), r.body["choices"][0]["finish_reason"]);
}

// Picks a stop string that straddles a token boundary of the greedy output and checks that
// both the JSON and the streamed text end right before its first occurrence.
TEST_F(ServerE2eTest, StopStringAcrossTokenBoundary) {
  Reply full = Post(port(), "/v1/completions",
                    Completion({{"max_tokens", 40}, {"logprobs", 0}, {"ignore_eos", true}}));
  ASSERT_EQ(full.status, 200) << full.raw;
  const std::string text = full.body["choices"][0]["text"];
  const json& tokens = full.body["choices"][0]["logprobs"]["tokens"];
  std::string joined;
  std::vector<size_t> boundaries;
  for (const json& t : tokens) {
    joined += t.get<std::string>();
    boundaries.push_back(joined.size());
  }
  ASSERT_EQ(joined, text);
  // A boundary in the middle with text on both sides.
  size_t b = 0;
  for (size_t i = tokens.size() / 2; i + 1 < boundaries.size(); ++i) {
    if (boundaries[i] >= 2 && boundaries[i] + 2 <= text.size()) {
      b = boundaries[i];
      break;
    }
  }
  ASSERT_GT(b, 0u);
  const std::string stop = text.substr(b - 2, 4);
  const std::string expected = text.substr(0, text.find(stop));
  json body =
      Completion({{"max_tokens", 40}, {"stop", {stop, "never-matches-xyz"}}, {"ignore_eos", true}});
  Reply r = Post(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["choices"][0]["text"], expected) << "stop '" << stop << "'";
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  StreamReply s = PostStream(port(), "/v1/completions", body);
  EXPECT_EQ(StreamText(s), expected);
  EXPECT_EQ(StreamFinish(s), "stop");
  EXPECT_TRUE(s.done);
}

TEST_F(ServerE2eTest, NChoicesEchoAndLogprobs) {
  Reply r = Post(
      port(), "/v1/completions",
      Completion({{"n", 2}, {"temperature", 1.0}, {"seed", 7}, {"echo", true}, {"logprobs", 3}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& c = r.body["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"].get<std::string>().rfind("Once upon a time", 0), 0u);
    const json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 24u);
    EXPECT_EQ(lp["top_logprobs"][0].size(), 3u);
    EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
    EXPECT_EQ(lp["text_offset"][0], std::string("Once upon a time").size());
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 48);
  // Seeded sampling is reproducible.
  Reply again = Post(
      port(), "/v1/completions",
      Completion({{"n", 2}, {"temperature", 1.0}, {"seed", 7}, {"echo", true}, {"logprobs", 3}}));
  EXPECT_EQ(again.body["choices"], r.body["choices"]);

  Reply chat = Post(port(), "/v1/chat/completions",
                    {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 5},
                     {"logprobs", true},
                     {"top_logprobs", 2}});
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const json& content = chat.body["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

TEST_F(ServerE2eTest, PromptFormsAndTokenizeRoundTrip) {
  Reply tok = Post(port(), "/tokenize", {{"prompt", "Once upon a time"}});
  ASSERT_EQ(tok.status, 200);
  Reply detok = Post(port(), "/detokenize", {{"tokens", tok.body["tokens"]}});
  ASSERT_EQ(detok.status, 200);
  EXPECT_NE(detok.body["prompt"].get<std::string>().find("Once upon a time"), std::string::npos);
  Reply by_ids = Post(port(), "/v1/completions", Completion({{"prompt", tok.body["tokens"]}}));
  Reply by_text = Post(port(), "/v1/completions", Completion(json::object()));
  ASSERT_EQ(by_ids.status, 200) << by_ids.raw;
  EXPECT_EQ(by_ids.body["choices"][0]["text"], by_text.body["choices"][0]["text"]);
  Reply many = Post(port(), "/v1/completions",
                    Completion({{"prompt", {"Once upon a time", "The cat"}}, {"max_tokens", 4}}));
  ASSERT_EQ(many.status, 200) << many.raw;
  EXPECT_EQ(many.body["choices"].size(), 2u);
}

TEST_F(ServerE2eTest, BadInputAnswersOpenAiErrorsAndHarmsNothing) {
  ExpectError(PostRaw(port(), "/v1/completions", "{not json"), 400, "invalid_request_error");
  ExpectError(PostRaw(port(), "/v1/completions", "[1, 2]"), 400, "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"max_tokens", "many"}})), 422,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"prompt", 12.5}})), 422,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"model", "gpt-9"}})), 404,
              "NotFoundError");
  ExpectError(Post(port(), "/v1/completions", Completion({{"temperature", -1}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"n", 0}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"logprobs", 99}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"prompt", {1, 2, 999999}}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", Completion({{"max_tokens", 1000000}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/completions", json::object({{"model", "stories"}})), 400,
              "invalid_request_error");
  ExpectError(Post(port(), "/v1/chat/completions",
                   {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}),
              400, "invalid_request_error");
  ExpectError(Post(port(), "/v1/chat/completions", {{"messages", "hi"}}), 422,
              "invalid_request_error");
  ExpectError(Get(port(), "/v1/nothing-here"), 404, "NotFoundError");
  ExpectError(Post(port(), "/detokenize", {{"tokens", {-1}}}), 400, "invalid_request_error");
  // Still serving.
  EXPECT_EQ(Post(port(), "/v1/completions", Completion(json::object())).status, 200);
}

TEST_F(ServerE2eTest, MetricsExposeTheEngine) {
  ASSERT_EQ(Post(port(), "/v1/completions", Completion(json::object())).status, 200);
  Reply m = Get(port(), "/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name :
       {"kvserve:num_requests_running", "kvserve:num_requests_waiting",
        "kvserve:kv_cache_usage_perc", "kvserve:kv_cache_used_blocks",
        "kvserve:prefix_cache_queries_total", "kvserve:prefix_cache_hits_total",
        "kvserve:num_preemptions_total", "kvserve:prompt_tokens_total",
        "kvserve:generation_tokens_total", "kvserve:time_to_first_token_seconds_count",
        "kvserve:inter_token_latency_seconds_count", "kvserve:e2e_request_latency_seconds_count",
        "kvserve:request_queue_time_seconds_count"}) {
    EXPECT_TRUE(MetricValue(m.raw, name).has_value()) << name;
  }
  EXPECT_GE(*MetricValue(m.raw, "kvserve:generation_tokens_total"), 24);
  EXPECT_GE(*MetricValue(m.raw, "kvserve:e2e_request_latency_seconds_count"), 1);
  EXPECT_NE(
      m.raw.find("kvserve:time_to_first_token_seconds_bucket{model_name=\"stories\",le=\"+Inf\"}"),
      std::string::npos);
}

}  // namespace
}  // namespace kvserve::server::testing
