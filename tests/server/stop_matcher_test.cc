#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include "server/reasoning_parser.h"

namespace kvserve::server {
namespace {

// Feeds `deltas` one at a time; returns the concatenated released text and whether it stopped.
std::pair<std::string, bool> Feed(std::vector<std::string> stops,
                                 const std::vector<std::string>& deltas) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const std::string& d : deltas) {
    StopMatcher::Step step = m.Push(d);
    out += step.text;
    if (step.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopMatcherTest, NoStopsPassesThrough) {
  EXPECT_EQ(Feed({}, {"a", "b\n"}), std::make_pair(std::string("ab\n"), false));
}

TEST(StopMatcherTest, StopAcrossDeltasIsTruncatedAndNeverLeaked) {
  StopMatcher m({"\n\n"});
  StopMatcher::Step s1 = m.Push("Hi\n");
  EXPECT_EQ(s1.text, "Hi");  // "\n" held back
  EXPECT_FALSE(s1.stopped);
  StopMatcher::Step s2 = m.Push("\nBye");
  EXPECT_EQ(s2.text, "");
  EXPECT_TRUE(s2.stopped);
}

TEST(StopMatcherTest, FalseStartIsReleased) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Push("ab ST").text, "ab ");
  EXPECT_EQ(m.Push("OR").text, "STOR");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(Feed({"world", "lo w"}, {"hel", "lo wor", "ld"}),
            std::make_pair(std::string("hel"), true));
  EXPECT_EQ(Feed({"xyz"}, {"abc", "xy"}), std::make_pair(std::string("abcxy"), false));
}

TEST(StopMatcherTest, StopInsideOneDelta) {
  EXPECT_EQ(Feed({"."}, {"one. two."}), std::make_pair(std::string("one"), true));
}

TEST(StopMatcherTest, PartialSuffixLength) {
  EXPECT_EQ(PartialSuffixLength("abc</th", "</think>"), 4u);
  EXPECT_EQ(PartialSuffixLength("abc", "</think>"), 0u);
  EXPECT_EQ(PartialSuffixLength("<", "<"), 0u);  // a whole marker is not a partial one
}

TEST(ReasoningParserTest, SplitsAcrossDeltas) {
  ReasoningParser p;
  std::string reasoning, content;
  for (const char* d : {"<thi", "nk>let me", " think</th", "ink>\n\nAnswer", " 42"}) {
    ReasoningParser::Parts parts = p.Push(d);
    reasoning += parts.reasoning;
    content += parts.content;
  }
  ReasoningParser::Parts tail = p.Flush();
  EXPECT_EQ(reasoning + tail.reasoning, "let me think");
  EXPECT_EQ(content + tail.content, "\n\nAnswer 42");
}

TEST(ReasoningParserTest, UnclosedReasoningIsAllReasoning) {
  ReasoningParser p;
  ReasoningParser::Parts a = p.Push("just thinking <");
  ReasoningParser::Parts b = p.Flush();
  EXPECT_EQ(a.reasoning + b.reasoning, "just thinking <");
  EXPECT_EQ(a.content + b.content, "");
}

}  // namespace
}  // namespace kvserve::server
