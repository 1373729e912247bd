// ChatTemplate: renders OpenAI chat messages into a prompt string the way a model's Jinja
// chat template (GGUF `tokenizer.chat_template`) would, without a Jinja engine.
//
// The template text is matched against the markers of the common families and one
// hand-written formatter per family reproduces what the real template outputs for system,
// user and assistant messages (tools are not supported):
//   "<|im_start|>"                        chatml   (Qwen2.5's default system prompt included;
//                                                  Qwen3 drops past answers' reasoning)
//   "<|start_header_id|>"                 llama3   ("Cutting Knowledge Date" preamble of 3.1+,
//                                                  with today's date when it calls strftime_now)
//   "[INST]" with "<<SYS>>"               llama2
//   "[INST]" without "<<SYS>>"            mistral  (Mistral-Nemo spacing: "[INST]u[/INST]a</s>")
//   "<｜User｜>" / "<｜Assistant｜>"       deepseek (R1: the generation prompt opens "<think>\n")
//   "<start_of_turn>"                     gemma    (system folded into the first user turn)
//   "<|user|>" with "<|end|>"             phi3
//   "<|channel|>"                         harmony  (gpt-oss: system preamble with the reasoning
//                                                  effort, "medium" unless the request sets it,
//                                                  and the channels, system message as
//                                                  developer instructions, answers on "final")
// Nothing recognised (or no template at all): chatml, as llama.cpp's default.
//
// Thread safety: immutable after construction.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvserve::tokenizer {

enum class ChatTemplateFamily {
  kChatMl,
  kLlama2,
  kLlama3,
  kMistral,
  kDeepSeek,
  kGemma,
  kPhi3,
  kHarmony,
};

// "chatml", "llama2", "llama3", "mistral", "deepseek", "gemma", "phi3", "harmony".
const char* ChatTemplateFamilyName(ChatTemplateFamily family);
// The inverse; NotFound for other names.
Result<ChatTemplateFamily> ParseChatTemplateFamily(std::string_view name);
// The family whose markers the Jinja text contains; nullopt when none does.
std::optional<ChatTemplateFamily> DetectChatTemplateFamily(std::string_view jinja);

struct ChatMessage {
  std::string role;  // "system", "developer" (treated as system), "user" or "assistant"
  std::string content;
};

// What a request passes to the template besides its messages (vLLM's chat template kwargs).
struct ChatOptions {
  // gpt-oss (harmony): the system preamble's "Reasoning: " line, "low", "medium" or "high"
  // (IsReasoningEffort); empty: the template's default, "medium". Other families ignore it.
  std::string reasoning_effort;
};

// "low", "medium" or "high": the values of OpenAI's / vLLM's `reasoning_effort`.
bool IsReasoningEffort(std::string_view value);

class ChatTemplate {
 public:
  // bos_token / eos_token: the texts the template's {{ bos_token }} / {{ eos_token }} render.
  ChatTemplate(ChatTemplateFamily family, std::string bos_token, std::string eos_token);
  // Detects the family of `jinja` (empty: no template); the chatml fallback otherwise.
  static ChatTemplate FromJinja(std::string_view jinja, std::string bos_token,
                                std::string eos_token);

  // The prompt text. InvalidArgument for an empty conversation, an unknown role or a
  // reasoning effort other than those IsReasoningEffort accepts.
  Result<std::string> Apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            const ChatOptions& options = {}) const;

  ChatTemplateFamily family() const { return family_; }
  bool recognised() const { return recognised_; }  // false: the fallback is in use

 private:
  ChatTemplateFamily family_;
  std::string bos_, eos_;
  bool recognised_ = true;
  bool llama3_date_preamble_ = false;          // Llama 3.1+: system block always present
  bool llama3_today_ = false;                  // Llama 3.2: the preamble has today's date
  bool harmony_today_ = false;                 // gpt-oss: "Current date: " today
  bool deepseek_think_ = false;                // R1: the generation prompt opens <think>
  bool chatml_strips_reasoning_ = false;       // Qwen3: past answers lose their <think> part
  std::optional<std::string> default_system_;  // chatml: Qwen's default system prompt

  // One formatter per family; messages are normalized (roles system/user/assistant).
  std::string RenderChatMl(const std::vector<ChatMessage>& messages, bool gen) const;
  std::string RenderLlama2(std::vector<ChatMessage> messages) const;
  std::string RenderLlama3(std::vector<ChatMessage> messages, bool gen) const;
  std::string RenderMistral(std::vector<ChatMessage> messages) const;
  std::string RenderDeepSeek(const std::vector<ChatMessage>& messages, bool gen) const;
  std::string RenderGemma(std::vector<ChatMessage> messages, bool gen) const;
  std::string RenderPhi3(const std::vector<ChatMessage>& messages, bool gen) const;
  std::string RenderHarmony(const std::vector<ChatMessage>& messages, bool gen,
                            std::string_view reasoning_effort) const;
};

}  // namespace kvserve::tokenizer
