// ReasoningParser (--reasoning-parser deepseek): splits DeepSeek-R1 style output
// "<think>reasoning</think>answer" into reasoning_content and content, also when streamed.
//
// The output starts inside the reasoning (R1's chat template opens "<think>\n" in the
// prompt); a "<think>" at the very start of the output is dropped. Text that could be the
// start of "</think>" is held back until it is decided. An output that never closes the
// reasoning is all reasoning (as vLLM's deepseek_r1 parser).
//
// Thread safety: none; one per generated sequence.
#pragma once

#include <string>
#include <string_view>

namespace kvserve::server {

// --reasoning-parser: none, deepseek (ReasoningParser), openai_gptoss (HarmonyParser,
// server/harmony_parser.h).
enum class ReasoningFormat { kNone, kDeepseek, kHarmony };

class ReasoningParser {
 public:
  struct Parts {
    std::string reasoning;
    std::string content;
  };
  Parts Push(std::string_view text);
  Parts Flush();

 private:
  bool in_reasoning_ = true;
  bool at_start_ = true;  // "<think>" may still open the output
  std::string pending_;
};

}  // namespace kvserve::server
