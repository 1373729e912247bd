// The chat template formatters against the real templates in ../shared/chat-templates/:
// expected strings are what each Jinja template renders (derived by reading the template)
// for the same conversation with add_generation_prompt = true.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvserve::tokenizer {
namespace {

const std::string kDir = std::string(KVSERVE_SHARED_DIR) + "/chat-templates/";

std::optional<std::string> ReadTemplate(const std::string& name) {
  std::ifstream in(kDir + name);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<ChatMessage> kWithSystem = {{"system", "You are helpful."},
                                              {"user", "Hi"},
                                              {"assistant", "Hello!"},
                                              {"user", "How are you?"}};
const std::vector<ChatMessage> kNoSystem = {{"user", "Hi"},
                                            {"assistant", "Hello!"},
                                            {"user", "How are you?"}};

struct Case {
  const char* file;
  std::optional<ChatTemplateFamily> family;  // nullopt: not recognised (chatml fallback)
};

TEST(ChatTemplateTest, DetectsTheFamilyOfEveryRealTemplate) {
  const std::vector<Case> cases = {
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", std::nullopt},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ChatTemplateFamily::kChatMl},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ChatTemplateFamily::kChatMl},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ChatTemplateFamily::kChatMl},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ChatTemplateFamily::kDeepSeek},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ChatTemplateFamily::kDeepSeek},
      {"llama-cpp-deepseek-r1.jinja", ChatTemplateFamily::kDeepSeek},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ChatTemplateFamily::kLlama3},
      {"google-gemma-2-2b-it.jinja", ChatTemplateFamily::kGemma},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ChatTemplateFamily::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ChatTemplateFamily::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ChatTemplateFamily::kLlama3},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ChatTemplateFamily::kPhi3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ChatTemplateFamily::kMistral},
  };
  for (const Case& c : cases) {
    std::optional<std::string> text = ReadTemplate(c.file);
    if (!text) GTEST_SKIP() << "no " << kDir << c.file << " (shared data absent)";
    EXPECT_EQ(DetectChatTemplateFamily(*text), c.family) << c.file;
  }
}

void ExpectRender(const char* file, const std::string& bos, const std::string& eos,
                  const std::vector<ChatMessage>& messages, const std::string& expected) {
  std::optional<std::string> text = ReadTemplate(file);
  if (!text) GTEST_SKIP() << "no " << kDir << file << " (shared data absent)";
  ChatTemplate t = ChatTemplate::FromJinja(*text, bos, eos);
  ASSERT_TRUE(t.recognised()) << file;
  Result<std::string> out = t.Apply(messages, true);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, expected) << file;
}

TEST(ChatTemplateTest, Qwen25ChatMl) {
  ExpectRender("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", kWithSystem,
               "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?"
               "<|im_end|>\n<|im_start|>assistant\n");
  ExpectRender("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", {{"user", "Hi"}},
               "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
               "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama31) {
  const std::string expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  ExpectRender("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
               kWithSystem, expected);
  ExpectRender("meta-llama-Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
               kWithSystem, expected);
  // 3.2 asks strftime_now for today's date, as HF and llama.cpp render it.
  char today[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string with_today = expected;
  with_today.replace(with_today.find("26 Jul 2024"), 11,
                     std::string(today, std::strftime(today, sizeof(today), "%d %b %Y", &local)));
  ExpectRender("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
               kWithSystem, with_today);
}

// Qwen3's template (not in ../shared; its reasoning rule in short): answers before the last
// user turn keep only what follows "</think>".
TEST(ChatTemplateTest, Qwen3DropsReasoningOfPastAnswers) {
  const char* jinja =
      "{%- for message in messages %}{%- if message.role == 'assistant' and '</think>' in "
      "message.content %}{%- set content = message.content.split('</think>')[-1].lstrip('\\n') "
      "%}{%- endif %}<|im_start|>...{%- endfor %}";
  ChatTemplate t = ChatTemplate::FromJinja(jinja, "", "<|im_end|>");
  ASSERT_EQ(t.family(), ChatTemplateFamily::kChatMl);
  Result<std::string> out = t.Apply(
      std::vector<ChatMessage>{
          {"user", "Q"}, {"assistant", "<think>\nhmm\n</think>\n\nA"}, {"user", "Q2"}},
      true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, MistralNemo) {
  ExpectRender("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", kWithSystem,
               "<s>[INST]Hi[/INST]Hello!</s>[INST]You are helpful.\n\nHow are you?[/INST]");
}

TEST(ChatTemplateTest, DeepSeekR1) {
  const std::string expected =
      "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello!"
      "<｜end▁of▁sentence｜><｜User｜>How are you?<｜Assistant｜><think>\n";
  ExpectRender("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜begin▁of▁sentence｜>",
               "<｜end▁of▁sentence｜>", kWithSystem, expected);
  ExpectRender("llama-cpp-deepseek-r1.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
               kWithSystem, expected);
  ExpectRender("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
               "<｜end▁of▁sentence｜>", kWithSystem, expected);
}

TEST(ChatTemplateTest, DeepSeekDropsReasoningOfPastAnswers) {
  ChatTemplate t(ChatTemplateFamily::kDeepSeek, "<s>", "</s>");
  Result<std::string> out = t.Apply(
      std::vector<ChatMessage>{{"user", "Q"}, {"assistant", "<think>hmm</think>A"}}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<s><｜User｜>Q<｜Assistant｜>A<｜end▁of▁sentence｜>");
}

TEST(ChatTemplateTest, Gemma2) {
  ExpectRender("google-gemma-2-2b-it.jinja", "<bos>", "<eos>", kNoSystem,
               "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
               "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n"
               "<start_of_turn>model\n");
}

TEST(ChatTemplateTest, Phi35) {
  ExpectRender("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", kWithSystem,
               "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
               "Hello!<|end|>\n<|user|>\nHow are you?<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, Llama2ByName) {
  Result<ChatTemplateFamily> family = ParseChatTemplateFamily("llama2");
  ASSERT_TRUE(family.ok());
  ChatTemplate t(*family, "<s>", "</s>");
  Result<std::string> out = t.Apply(kWithSystem, true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
                  "<s>[INST] How are you? [/INST]");
}

TEST(ChatTemplateTest, FallbackAndErrors) {
  ChatTemplate t = ChatTemplate::FromJinja("{{ messages }}", "", "");
  EXPECT_FALSE(t.recognised());
  EXPECT_EQ(t.family(), ChatTemplateFamily::kChatMl);
  Result<std::string> out = t.Apply(std::vector<ChatMessage>{{"developer", "D"}, {"user", "U"}},
                                    true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<|im_start|>system\nD<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                  "<|im_start|>assistant\n");
  EXPECT_FALSE(t.Apply(std::vector<ChatMessage>{}, true).ok());
  EXPECT_FALSE(t.Apply(std::vector<ChatMessage>{{"wizard", "x"}}, true).ok());
  EXPECT_FALSE(ParseChatTemplateFamily("jinja2").ok());
}

// gpt-oss's harmony format by name (no published template in ../shared/chat-templates/): the
// system preamble carries the request's reasoning effort ("medium" by default, as the
// template's `reasoning_effort is not defined` branch), a system message becomes developer
// instructions, past answers sit on the final channel.
TEST(ChatTemplateTest, HarmonyReasoningEffort) {
  ChatTemplate t(ChatTemplateFamily::kHarmony, "<|startoftext|>", "<|return|>");
  auto render = [&](const std::string& effort) {
    const std::string preamble =
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\n\nReasoning: " + effort +
        "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
        "message.<|end|>";
    return preamble +
           "<|start|>developer<|message|># Instructions\n\nYou are helpful.\n\n<|end|>"
           "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!"
           "<|end|><|start|>user<|message|>How are you?<|end|><|start|>assistant";
  };
  Result<std::string> out = t.Apply(kWithSystem, true);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, render("medium"));
  for (const char* effort : {"low", "medium", "high"}) {
    out = t.Apply(kWithSystem, true, ChatOptions{effort});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, render(effort));
  }
  for (const char* bad : {"minimal", "HIGH", "medium\n"}) {
    EXPECT_FALSE(t.Apply(kWithSystem, true, ChatOptions{bad}).ok()) << bad;
  }
  // Other families take the option and render as without it.
  ChatTemplate chatml(ChatTemplateFamily::kChatMl, "", "");
  EXPECT_EQ(*chatml.Apply(kWithSystem, true, ChatOptions{"high"}),
            *chatml.Apply(kWithSystem, true));
}

}  // namespace
}  // namespace kvserve::tokenizer
