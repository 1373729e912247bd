// StopMatcher: finds user stop strings in streamed text without ever releasing a partial one.
//
// Text arrives in deltas (one per token). Any suffix of the unreleased text that is a prefix
// of some stop string is held back until the next delta decides it; when a stop string is
// completed, everything before its first occurrence is released and the rest is dropped
// (OpenAI: the stop string itself is not returned).
//
// Worked example, stop = {"\n\n"}: Push("Hi\n") -> releases "Hi", holds "\n";
// Push("\nBye") -> finds "\n\n" at offset 0 of "\n\nBye", releases "", stopped.
//
// Thread safety: none; one per generated sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server {

// The length of the longest suffix of `text` that is a proper prefix of `marker`, e.g.
// ("abc</th", "</think>") -> 4.
size_t PartialSuffixLength(std::string_view text, std::string_view marker);

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Step {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string was completed; send `text` and end
  };
  // Adds a delta. note: not after a Step with stopped = true.
  Step Push(std::string_view delta);
  // The sequence ended for another reason: releases whatever was held back.
  std::string Flush();
  bool has_stops() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // unreleased text: a possible start of a stop string
};

}  // namespace kvserve::server
