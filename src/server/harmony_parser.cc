#include "server/harmony_parser.h"

#include <algorithm>
#include <array>

#include "server/stop_matcher.h"

namespace kvserve::server {
namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|return|>", "<|call|>",
                                                       "<|start|>"};

// The channel a header names: the word after <|channel|> ("final <|constrain|>json" -> "final").
std::string_view ChannelOf(std::string_view header) {
  const size_t at = header.find(kChannel);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + kChannel.size());
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  return rest.substr(0, std::min(rest.find_first_of(" <"), rest.size()));
}

}  // namespace

void HarmonyParser::Emit(std::string_view text, ReasoningParser::Parts& parts) const {
  (reasoning_body_ ? parts.reasoning : parts.content).append(text);
}

ReasoningParser::Parts HarmonyParser::Push(std::string_view text) {
  ReasoningParser::Parts parts;
  pending_.append(text);
  while (true) {
    if (!in_body_) {
      const size_t message = pending_.find(kMessage);
      if (message == std::string::npos) return parts;  // the header is still arriving
      reasoning_body_ = ChannelOf(std::string_view(pending_).substr(0, message)) == "analysis";
      pending_.erase(0, message + kMessage.size());
      in_body_ = seen_message_ = true;
      continue;
    }
    size_t end = std::string::npos, end_len = 0;
    for (std::string_view marker : kBodyEnds) {
      const size_t at = pending_.find(marker);
      if (at < end) end = at, end_len = marker.size();
    }
    if (end != std::string::npos) {
      Emit(std::string_view(pending_).substr(0, end), parts);
      pending_.erase(0, end + end_len);
      in_body_ = false;
      continue;
    }
    size_t hold = 0;
    for (std::string_view marker : kBodyEnds) {
      hold = std::max(hold, PartialSuffixLength(pending_, marker));
    }
    Emit(std::string_view(pending_).substr(0, pending_.size() - hold), parts);
    pending_.erase(0, pending_.size() - hold);
    return parts;
  }
}

ReasoningParser::Parts HarmonyParser::Flush() {
  ReasoningParser::Parts parts;
  if (in_body_) {
    Emit(pending_, parts);
  } else if (!seen_message_) {
    parts.content = pending_;  // no harmony message at all: plain content
  }
  pending_.clear();
  return parts;
}

}  // namespace kvserve::server
