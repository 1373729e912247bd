#include "server/stop_matcher.h"

#include <algorithm>

namespace kvserve::server {

size_t PartialSuffixLength(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t len = std::min(marker.size() - 1, text.size()); len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Step StopMatcher::Push(std::string_view delta) {
  pending_.append(delta);
  if (stops_.empty()) {
    Step step{std::move(pending_), false};
    pending_.clear();
    return step;
  }
  // The earliest completed stop string wins.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    Step step{pending_.substr(0, first), true};
    pending_.clear();
    return step;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string. Example: pending
  // "abc\n", stop "\n\n": suffix "\n" (length 1) is a prefix, so "abc" is released.
  size_t hold = 0;
  for (const std::string& stop : stops_) hold = std::max(hold, PartialSuffixLength(pending_, stop));
  Step step{pending_.substr(0, pending_.size() - hold), false};
  pending_.erase(0, pending_.size() - hold);
  return step;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvserve::server
