// `kvserve serve` on every architecture's make-model file: it starts, applies the family's chat
// template from the file's tokenizer.chat_template (auto-detected) and answers an OpenAI chat
// request. The tiny presets run always; the published shapes (qwen3-0.6b, gemma3-1b, Q4_0,
// ~0.35 and ~0.6 GB) run in the release build only (under ASan writing 1B random weights
// takes minutes), with a small --max-model-len and a few tokens.
//
// The template check: /tokenize of the messages (the server's own chat path) must give the
// tokens of the text the family's template renders, encoded with the file's vocabulary.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "http_client.h"
#include "server_process.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kBinary = KVSERVE_BINARY_DIR "/tools/kvserve";

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

struct Case {
  std::string name;
  std::string make_model_args;  // after `kvserve make-model`
  std::string rendered;         // what the family's template makes of kMessages
  bool real_shape = false;
  std::string max_model_len = "64";  // gpt-oss's preamble is longer
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

const json kMessages = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                    {{"role", "user"}, {"content", "Hello there"}}});

const char* const kChatMl =
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n"
    "<|im_start|>assistant\n";
const char* const kGemma =
    "<bos><start_of_turn>user\nYou are terse.\n\nHello there<end_of_turn>\n<start_of_turn>model\n";

// What gpt-oss's harmony template renders of kMessages at reasoning effort `effort`.
std::string Harmony(const std::string& effort) {
  return "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\n\nReasoning: " + effort +
         "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
         "message.<|end|><|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>"
         "<|start|>user<|message|>Hello there<|end|><|start|>assistant";
}

std::vector<Case> Cases() {
  return {
      {"llama3_tiny", "--arch llama --preset llama3-tiny",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"qwen2_tiny", "--arch qwen2 --preset tiny", kChatMl},
      {"qwen3_tiny", "--arch qwen3 --preset tiny", kChatMl},
      // Phi-3's template renders no BOS; its vocabulary adds one (the server, like llama.cpp).
      {"phi3_tiny", "--arch phi3 --preset tiny",
       "<s><|system|>\nYou are terse.<|end|>\n<|user|>\nHello there<|end|>\n<|assistant|>\n"},
      {"gemma2_tiny", "--arch gemma2 --preset tiny", kGemma},
      {"gemma3_tiny", "--arch gemma3 --preset tiny", kGemma},
      {"qwen2moe_tiny", "--arch qwen2moe --preset tiny", kChatMl},
      {"qwen3moe_tiny", "--arch qwen3moe --preset tiny", kChatMl},
      {"gpt_oss_tiny", "--arch gpt-oss --preset tiny --type mxfp4_moe", Harmony("medium"), false,
       "256"},
      {"qwen3_0_6b", "--arch qwen3 --preset qwen3-0.6b --type q4_0", kChatMl, true},
      {"gemma3_1b", "--arch gemma3 --preset gemma3-1b --type q4_0", kGemma, true},
  };
}

// `kvserve make-model ARGS -o DIR/model.gguf`; the path.
std::string MakeModelIn(const std::string& dir, const std::string& args) {
  const std::string path = dir + "/model.gguf";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string command = kBinary + " make-model " + args + " -o " + path + " >/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::printf("make-model %s: %.2f s\n", args.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return path;
}

// The flags every test here serves with (a small pool, two sequences, model name "m").
std::vector<std::string> ServeFlags(const std::string& max_model_len) {
  return {"--max-model-len", max_model_len, "--kv-cache-memory-bytes", "64MiB",
          "--max-num-seqs", "2", "--served-model-name", "m"};
}

// The tokenizer of the GGUF file at `path` (what the server reads from it); nullopt, with a
// failure, when it does not load.
std::optional<tokenizer::Tokenizer> FileTokenizer(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return std::nullopt;
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  if (!tok.ok()) return std::nullopt;
  return std::move(tok).value();
}

class ArchitectureServeTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().real_shape && kSanitized) {
      GTEST_SKIP() << "published shapes run in the release build (ASan makes 1B random weights "
                      "take minutes)";
    }
    ASSERT_TRUE(fs::exists(kBinary)) << "build the kvserve target first";
    std::string pattern = (fs::temp_directory_path() / "kvserve_arch_serve.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }

  std::string MakeModel(const std::string& args) { return MakeModelIn(dir_, args); }

  std::string dir_;
};

TEST_P(ArchitectureServeTest, AnswersAChatRequestWithTheFamilysTemplate) {
  const Case& c = GetParam();
  const std::string path = MakeModel(c.make_model_args);
  ServerProcess server;
  ASSERT_TRUE(server.Start(path, ServeFlags(c.max_model_len), c.real_shape ? 600 : 60))
      << server.error() << "\n"
      << server.Log();

  // The family's template, auto-detected from the file.
  const std::optional<tokenizer::Tokenizer> tok = FileTokenizer(path);
  ASSERT_TRUE(tok.has_value());
  const std::vector<int32_t> want =
      tok->Encode(c.rendered, {.add_special = false, .parse_special = true});
  const Reply tokens = Post(server.port(), "/tokenize", {{"messages", kMessages}});
  ASSERT_EQ(tokens.status, 200) << tokens.raw;
  EXPECT_EQ(tokens.body["tokens"].get<std::vector<int32_t>>(), want)
      << "rendered: "
      << tok->Decode(tokens.body["tokens"].get<std::vector<int32_t>>(), {.render_special = true});

  // An OpenAI chat request.
  const Reply chat = Post(server.port(), "/v1/chat/completions",
                          {{"model", "m"},
                           {"messages", kMessages},
                           {"max_tokens", 4},
                           {"temperature", 0},
                           {"ignore_eos", true}});
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  EXPECT_EQ(chat.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(chat.body["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(chat.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat.body["usage"]["prompt_tokens"].get<size_t>(), want.size());
  EXPECT_EQ(chat.body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
}

INSTANTIATE_TEST_SUITE_P(Presets, ArchitectureServeTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// gpt-oss's `reasoning_effort` (OpenAI / vLLM request field): the harmony system preamble says
// "Reasoning: low|medium|high" (/tokenize of the messages, and the chat request's prompt_tokens
// are that prompt's); any other value is an error naming the field, and the server keeps
// serving.
TEST(HarmonyServeTest, ReasoningEffortSetsTheSystemPreamble) {
  ASSERT_TRUE(fs::exists(kBinary)) << "build the kvserve target first";
  std::string dir = (fs::temp_directory_path() / "kvserve_harmony_serve.XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = MakeModelIn(dir, "--arch gpt-oss --preset tiny --type mxfp4_moe");
  std::vector<std::string> flags = ServeFlags("256");
  flags.insert(flags.end(), {"--reasoning-parser", "openai_gptoss"});
  ServerProcess server;
  ASSERT_TRUE(server.Start(path, flags, 60)) << server.error() << "\n" << server.Log();
  const std::optional<tokenizer::Tokenizer> tok = FileTokenizer(path);
  ASSERT_TRUE(tok.has_value());
  for (const char* effort : {"low", "medium", "high"}) {
    SCOPED_TRACE(effort);
    const std::vector<int32_t> want =
        tok->Encode(Harmony(effort), {.add_special = false, .parse_special = true});
    const Reply tokens = Post(server.port(), "/tokenize",
                              {{"messages", kMessages}, {"reasoning_effort", effort}});
    ASSERT_EQ(tokens.status, 200) << tokens.raw;
    EXPECT_EQ(tokens.body["tokens"].get<std::vector<int32_t>>(), want);
    const Reply chat = Post(server.port(), "/v1/chat/completions",
                            {{"model", "m"},
                             {"messages", kMessages},
                             {"reasoning_effort", effort},
                             {"max_tokens", 2},
                             {"temperature", 0}});
    ASSERT_EQ(chat.status, 200) << chat.raw;
    EXPECT_EQ(chat.body["usage"]["prompt_tokens"].get<size_t>(), want.size());
  }
  // Unknown values: 400; not a string: 422 (as every wrongly typed field).
  for (const auto& [bad, status] : std::vector<std::pair<json, int>>{
           {"minimal", 400}, {"High", 400}, {"", 400}, {3, 422}}) {
    SCOPED_TRACE(bad.dump());
    const Reply chat = Post(server.port(), "/v1/chat/completions",
                            {{"model", "m"}, {"messages", kMessages}, {"reasoning_effort", bad}});
    EXPECT_EQ(chat.status, status) << chat.raw;
    EXPECT_EQ(chat.body["error"]["param"], "reasoning_effort") << chat.raw;
  }
  EXPECT_EQ(Get(server.port(), "/health").status, 200);
  EXPECT_EQ(server.Stop(30), 0) << server.Log();
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace
}  // namespace kvserve::server::testing
