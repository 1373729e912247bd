#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <vector>

namespace kvserve::tokenizer {
namespace {

constexpr std::array<std::pair<ChatTemplateFamily, const char*>, 8> kNames = {{
    {ChatTemplateFamily::kChatMl, "chatml"},
    {ChatTemplateFamily::kLlama2, "llama2"},
    {ChatTemplateFamily::kLlama3, "llama3"},
    {ChatTemplateFamily::kMistral, "mistral"},
    {ChatTemplateFamily::kDeepSeek, "deepseek"},
    {ChatTemplateFamily::kGemma, "gemma"},
    {ChatTemplateFamily::kPhi3, "phi3"},
    {ChatTemplateFamily::kHarmony, "harmony"},
}};

constexpr const char* kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
// What Llama 3.1+ templates print; their date_string is "26 Jul 2024" unless the template asks
// strftime_now (3.2) for today's.
constexpr const char* kLlama3KnowledgeDate = "Cutting Knowledge Date: December 2023\n";
constexpr const char* kLlama3DefaultDate = "26 Jul 2024";

// Today's local date as strftime(format), what Jinja's strftime_now gives HF and llama.cpp
// (Llama 3.2 asks "%d %b %Y", gpt-oss "%Y-%m-%d").
std::string Today(const char* format = "%d %b %Y") {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  return std::string(buffer, std::strftime(buffer, sizeof(buffer), format, &local));
}

// gpt-oss's system preamble (its template's defaults: model identity, knowledge cutoff, then
// the date when the template can ask for it, "Reasoning: " the effort, and the channels).
constexpr const char* kHarmonyIdentity =
    "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n";
constexpr const char* kHarmonyDefaultEffort = "medium";
constexpr const char* kHarmonyChannels =
    "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.";

bool Contains(std::string_view text, std::string_view marker) {
  return text.find(marker) != std::string_view::npos;
}

// Jinja's `|trim` / Python's strip(): ASCII whitespace at both ends.
std::string Trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(ws);
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(ws) - begin + 1));
}

// The conversation with "developer" folded into "system"; InvalidArgument for other roles.
Result<std::vector<ChatMessage>> Normalize(std::span<const ChatMessage> messages) {
  if (messages.empty()) return InvalidArgument("messages must not be empty");
  std::vector<ChatMessage> out(messages.begin(), messages.end());
  for (ChatMessage& m : out) {
    if (m.role == "developer") m.role = "system";
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return InvalidArgument(fmt::format(
          "unsupported message role '{}' (system, developer, user, assistant)", m.role));
    }
  }
  return out;
}

// Splits off a leading system message (Llama-2, Mistral, Gemma take it out of the loop).
std::optional<std::string> TakeSystem(std::vector<ChatMessage>& messages) {
  if (messages.empty() || messages.front().role != "system") return std::nullopt;
  std::string system = std::move(messages.front().content);
  messages.erase(messages.begin());
  return system;
}

}  // namespace

bool IsReasoningEffort(std::string_view value) {
  return value == "low" || value == "medium" || value == "high";
}

const char* ChatTemplateFamilyName(ChatTemplateFamily family) {
  for (const auto& [f, name] : kNames) {
    if (f == family) return name;
  }
  return "unknown";
}

Result<ChatTemplateFamily> ParseChatTemplateFamily(std::string_view name) {
  for (const auto& [f, n] : kNames) {
    if (name == n) return f;
  }
  return NotFound(
      fmt::format("unknown chat template '{}' (chatml, llama2, llama3, mistral, "
                  "deepseek, gemma, phi3, harmony)",
                  name));
}

std::optional<ChatTemplateFamily> DetectChatTemplateFamily(std::string_view jinja) {
  if (Contains(jinja, "<|channel|>")) return ChatTemplateFamily::kHarmony;
  if (Contains(jinja, "<|start_header_id|>")) return ChatTemplateFamily::kLlama3;
  if (Contains(jinja, "<|im_start|>")) return ChatTemplateFamily::kChatMl;
  if (Contains(jinja, "<｜User｜>") || Contains(jinja, "<｜Assistant｜>")) {
    return ChatTemplateFamily::kDeepSeek;
  }
  if (Contains(jinja, "<start_of_turn>")) return ChatTemplateFamily::kGemma;
  if (Contains(jinja, "[INST]")) {
    return Contains(jinja, "<<SYS>>") ? ChatTemplateFamily::kLlama2 : ChatTemplateFamily::kMistral;
  }
  if (Contains(jinja, "<|user|>") && Contains(jinja, "<|end|>")) return ChatTemplateFamily::kPhi3;
  return std::nullopt;
}

ChatTemplate::ChatTemplate(ChatTemplateFamily family, std::string bos_token, std::string eos_token)
    : family_(family), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  llama3_date_preamble_ = family == ChatTemplateFamily::kLlama3;
  deepseek_think_ = family == ChatTemplateFamily::kDeepSeek;
}

ChatTemplate ChatTemplate::FromJinja(std::string_view jinja, std::string bos_token,
                                     std::string eos_token) {
  const std::optional<ChatTemplateFamily> family = DetectChatTemplateFamily(jinja);
  ChatTemplate t(family.value_or(ChatTemplateFamily::kChatMl), std::move(bos_token),
                 std::move(eos_token));
  t.recognised_ = family.has_value();
  if (!family) return t;
  t.llama3_date_preamble_ = Contains(jinja, "Cutting Knowledge Date");
  t.llama3_today_ = Contains(jinja, "strftime_now");
  t.harmony_today_ = t.llama3_today_;
  t.deepseek_think_ = Contains(jinja, "<think>");
  if (Contains(jinja, kQwenDefaultSystem)) t.default_system_ = kQwenDefaultSystem;
  t.chatml_strips_reasoning_ = Contains(jinja, "</think>");
  return t;
}

Result<std::string> ChatTemplate::Apply(std::span<const ChatMessage> input,
                                        bool add_generation_prompt,
                                        const ChatOptions& options) const {
  KV_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, Normalize(input));
  if (!options.reasoning_effort.empty() && !IsReasoningEffort(options.reasoning_effort)) {
    return InvalidArgument(fmt::format("reasoning effort '{}': expected low, medium or high",
                                       options.reasoning_effort));
  }
  switch (family_) {
    case ChatTemplateFamily::kChatMl: return RenderChatMl(messages, add_generation_prompt);
    case ChatTemplateFamily::kLlama2: return RenderLlama2(messages);
    case ChatTemplateFamily::kLlama3: return RenderLlama3(messages, add_generation_prompt);
    case ChatTemplateFamily::kMistral: return RenderMistral(messages);
    case ChatTemplateFamily::kDeepSeek: return RenderDeepSeek(messages, add_generation_prompt);
    case ChatTemplateFamily::kGemma: return RenderGemma(messages, add_generation_prompt);
    case ChatTemplateFamily::kPhi3: return RenderPhi3(messages, add_generation_prompt);
    case ChatTemplateFamily::kHarmony:
      return RenderHarmony(messages, add_generation_prompt, options.reasoning_effort);
  }
  return Internal("unknown chat template family");
}

// Qwen2.5 / ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message. Qwen3 (a
// template that knows "</think>") drops the reasoning of answers before the last user turn:
// only what follows their last "</think>", leading newlines stripped.
std::string ChatTemplate::RenderChatMl(const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  std::string out;
  if (default_system_ && messages.front().role != "system") {
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  }
  size_t last_user = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string_view content = messages[i].content;
    const size_t think_end = content.rfind("</think>");
    if (chatml_strips_reasoning_ && messages[i].role == "assistant" && i < last_user &&
        think_end != std::string_view::npos) {
      content.remove_prefix(think_end + 8);
      content.remove_prefix(std::min(content.find_first_not_of('\n'), content.size()));
    }
    out.append("<|im_start|>").append(messages[i].role).append("\n").append(content);
    out.append("<|im_end|>\n");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Meta's Llama-2-chat: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>".
std::string ChatTemplate::RenderLlama2(std::vector<ChatMessage> messages) const {
  const std::optional<std::string> system = TakeSystem(messages);
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string content = messages[i].content;
    if (i == 0 && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
    if (messages[i].role == "user") {
      out.append(bos_).append("[INST] ").append(Trim(content)).append(" [/INST]");
    } else if (messages[i].role == "assistant") {
      out.append(" ").append(Trim(content)).append(" ").append(eos_);
    }
  }
  return out;
}

// Llama 3: "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>"; 3.1+
// always open with a system block carrying the knowledge-date preamble.
std::string ChatTemplate::RenderLlama3(std::vector<ChatMessage> messages,
                                       bool add_generation_prompt) const {
  std::string out = bos_;
  if (llama3_date_preamble_) {
    const std::optional<std::string> system = TakeSystem(messages);
    out += "<|start_header_id|>system<|end_header_id|>\n\n";
    out.append(kLlama3KnowledgeDate).append("Today Date: ");
    out.append(llama3_today_ ? Today() : kLlama3DefaultDate).append("\n\n");
    out.append(system ? Trim(*system) : "").append("<|eot_id|>");
  }
  for (const ChatMessage& m : messages) {
    out +=
        "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) + "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Mistral (Nemo): "<s>[INST]{user}[/INST]{answer}</s>"; the system message goes before the
// last user message. The template has no generation prompt.
std::string ChatTemplate::RenderMistral(std::vector<ChatMessage> messages) const {
  const std::optional<std::string> system = TakeSystem(messages);
  std::string out = bos_;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      const bool last = i + 1 == messages.size();
      out += "[INST]" + (last && system ? *system + "\n\n" : std::string()) + m.content + "[/INST]";
    } else if (m.role == "assistant") {
      out += m.content + eos_;
    }
  }
  return out;
}

// DeepSeek (V3 / R1): "<s>{system}<｜User｜>{user}<｜Assistant｜>{answer}<｜end▁of▁sentence｜>";
// an answer's "...</think>" reasoning is dropped; R1 opens the generation with "<think>\n".
std::string ChatTemplate::RenderDeepSeek(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const {
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") system = m.content;
  }
  std::string out = bos_ + system;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += "<｜User｜>" + m.content;
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      const size_t think_end = content.rfind("</think>");
      if (think_end != std::string_view::npos) content.remove_prefix(think_end + 8);
      out += "<｜Assistant｜>" + std::string(content) + "<｜end▁of▁sentence｜>";
    }
  }
  if (add_generation_prompt)
    out += deepseek_think_ ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>";
  return out;
}

// Gemma: "<bos><start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n". Gemma has no
// system role: a system message is prepended to the first user message ("{system}\n\n").
std::string ChatTemplate::RenderGemma(std::vector<ChatMessage> messages,
                                      bool add_generation_prompt) const {
  const std::optional<std::string> system = TakeSystem(messages);
  std::string out = bos_;
  bool system_pending = system.has_value();
  for (const ChatMessage& m : messages) {
    std::string content = m.content;
    if (system_pending && m.role == "user") {
      content = *system + "\n\n" + content;
      system_pending = false;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n" + Trim(content) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

// Phi-3: "<|{role}|>\n{content}<|end|>\n"; empty system messages are skipped; without a
// generation prompt the text ends with EOS.
std::string ChatTemplate::RenderPhi3(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" && m.content.empty()) continue;
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  out += add_generation_prompt ? "<|assistant|>\n" : eos_;
  return out;
}

// gpt-oss (harmony): the system preamble (with "Reasoning: low|medium|high"), a leading system
// message as developer instructions, user turns, past answers on the final channel, then
// "<|start|>assistant" for the model to open its channel (analysis, then final).
std::string ChatTemplate::RenderHarmony(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt,
                                        std::string_view reasoning_effort) const {
  std::string out = std::string("<|start|>system<|message|>") + kHarmonyIdentity;
  if (harmony_today_) out += "Current date: " + Today("%Y-%m-%d") + "\n";
  out.append("\nReasoning: ")
      .append(reasoning_effort.empty() ? kHarmonyDefaultEffort : reasoning_effort)
      .append(kHarmonyChannels)
      .append("<|end|>");
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    out += "<|start|>developer<|message|># Instructions\n\n" + messages[0].content + "\n\n<|end|>";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += m.role == "assistant" ? "<|start|>assistant<|channel|>final<|message|>"
                                 : "<|start|>" + m.role + "<|message|>";
    out += m.content + "<|end|>";
  }
  if (add_generation_prompt) out += "<|start|>assistant";
  return out;
}

}  // namespace kvserve::tokenizer
