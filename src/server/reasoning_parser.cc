#include "server/reasoning_parser.h"

#include "server/stop_matcher.h"

namespace kvserve::server {
namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
}  // namespace

ReasoningParser::Parts ReasoningParser::Push(std::string_view text) {
  Parts parts;
  if (!in_reasoning_) {
    parts.content = text;
    return parts;
  }
  pending_.append(text);
  if (at_start_) {
    if (pending_.size() < kOpen.size() && kOpen.substr(0, pending_.size()) == pending_) {
      return parts;  // maybe "<think>" still arriving
    }
    if (pending_.starts_with(kOpen)) pending_.erase(0, kOpen.size());
    at_start_ = false;
  }
  const size_t close = pending_.find(kClose);
  if (close != std::string::npos) {
    parts.reasoning = pending_.substr(0, close);
    parts.content = pending_.substr(close + kClose.size());
    pending_.clear();
    in_reasoning_ = false;
    return parts;
  }
  const size_t hold = PartialSuffixLength(pending_, kClose);
  parts.reasoning = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return parts;
}

ReasoningParser::Parts ReasoningParser::Flush() {
  Parts parts;
  parts.reasoning = std::move(pending_);
  pending_.clear();
  return parts;
}

}  // namespace kvserve::server
