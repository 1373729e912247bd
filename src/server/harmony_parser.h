// HarmonyParser (--reasoning-parser openai_gptoss, vLLM's name): splits gpt-oss's harmony
// output into reasoning_content and content, also when streamed.
//
// The harmony chat template's generation prompt opens the assistant's message
// ("<|start|>assistant"), so the output is a sequence of messages, special tokens rendered as
// text (Choice decodes with render_special for this parser):
//   <|channel|>analysis<|message|>THINKING<|end|><|start|>assistant<|channel|>final<|message|>
//   ANSWER<|return|>
// A message's header (everything up to <|message|>) names its channel; the bodies of
// "analysis" messages are reasoning, the others ("final", "commentary") content. Headers and
// the markers that end a body (<|end|>, <|return|>, <|call|>, <|start|>) never reach the
// output; text that may be the start of a marker is held back until it is decided. An output
// that never reaches a <|message|> is all content (the model did not follow the format).
//
// Thread safety: none; one per generated sequence.
#pragma once

#include <string>
#include <string_view>

#include "server/reasoning_parser.h"

namespace kvserve::server {

class HarmonyParser {
 public:
  ReasoningParser::Parts Push(std::string_view text);
  ReasoningParser::Parts Flush();

 private:
  void Emit(std::string_view text, ReasoningParser::Parts& parts) const;

  bool in_body_ = false;
  bool reasoning_body_ = false;  // the current body is on the analysis channel
  bool seen_message_ = false;
  std::string pending_;  // a header so far, or body text that may start a marker
};

}  // namespace kvserve::server
