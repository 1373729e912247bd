// `kvserve serve --speculative-config` against the real binary: the same completions (text,
// logprobs, finish reasons, streamed or not, with stop strings) as a server without
// speculation, and the spec_decode counters on /metrics.
#include <gtest/gtest.h>

#include <map>

#include "http_client.h"
#include "server_process.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;

TEST(SpeculativeE2eTest, ServesTheSameCompletionsAsWithoutSpeculation) {
  const std::string model = TestModelPath();
  if (model.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
  ServerProcess plain, spec;
  ASSERT_TRUE(plain.Start(model, {"--served-model-name", "stories"}, 60)) << plain.error();
  ASSERT_TRUE(spec.Start(model,
                         {"--served-model-name", "stories", "--speculative-config",
                          R"({"method": "ngram", "num_speculative_tokens": 4,
                              "prompt_lookup_max": 3, "prompt_lookup_min": 1})"},
                         60))
      << spec.error() << spec.Log();
  const std::vector<json> bodies = {
      {{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}, {"logprobs", 2}},
      {{"prompt", "Lily and Ben"},
       {"max_tokens", 48},
       {"temperature", 0.8},
       {"top_p", 0.9},
       {"seed", 3},
       {"logprobs", 1}},
      {{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}, {"stop", {"park"}}},
      {{"prompt", "The cat"}, {"max_tokens", 40}, {"temperature", 0.7}, {"seed", 9}, {"n", 2}}};
  for (json body : bodies) {
    body["model"] = "stories";
    const Reply want = Post(plain.port(), "/v1/completions", body);
    const Reply got = Post(spec.port(), "/v1/completions", body);
    ASSERT_EQ(want.status, 200) << want.raw;
    ASSERT_EQ(got.status, 200) << got.raw;
    EXPECT_EQ(want.body["choices"], got.body["choices"]) << body.dump();
    EXPECT_EQ(want.body["usage"]["completion_tokens"], got.body["usage"]["completion_tokens"]);
    const StreamReply want_stream = PostStream(plain.port(), "/v1/completions", body);
    const StreamReply got_stream = PostStream(spec.port(), "/v1/completions", body);
    // Each choice's text (chunks of n > 1 choices interleave as they come).
    auto texts = [](const StreamReply& r) {
      std::map<int, std::string> by_index;
      for (const json& c : r.chunks) {
        for (const json& choice : c["choices"]) {
          by_index[choice["index"].get<int>()] += choice["text"].get<std::string>();
        }
      }
      return by_index;
    };
    EXPECT_TRUE(got_stream.done);
    EXPECT_EQ(texts(want_stream), texts(got_stream)) << body.dump();
  }
  const Reply metrics = Get(spec.port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.raw.find("kvserve:spec_decode_num_draft_tokens"), std::string::npos);
  EXPECT_NE(metrics.raw.find("kvserve:spec_decode_num_accepted_tokens_per_pos"), std::string::npos);
  EXPECT_EQ(plain.Stop(10), 0);
  EXPECT_EQ(spec.Stop(10), 0);
}

TEST(SpeculativeE2eTest, ABadConfigIsAStartupError) {
  const std::string model = TestModelPath();
  if (model.empty()) GTEST_SKIP() << "needs " << KVSERVE_SHARED_DIR << "/models/stories260K.gguf";
  ServerProcess server;
  EXPECT_FALSE(server.Start(model, {"--speculative-config", R"({"method": "medusa"})"}, 30));
  EXPECT_NE(server.Log().find("method 'medusa' is not supported"), std::string::npos)
      << server.Log();
}

}  // namespace
}  // namespace kvserve::server::testing
