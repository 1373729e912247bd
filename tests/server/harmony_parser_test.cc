// HarmonyParser: gpt-oss's analysis channel -> reasoning_content, the final channel ->
// content, whole or streamed a character at a time; headers and markers never reach the text.
#include "server/harmony_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace kvserve::server {
namespace {

ReasoningParser::Parts ParseAll(std::string_view text, size_t piece) {
  HarmonyParser parser;
  ReasoningParser::Parts all;
  for (size_t i = 0; i < text.size(); i += piece) {
    ReasoningParser::Parts p = parser.Push(text.substr(i, piece));
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  ReasoningParser::Parts p = parser.Flush();
  all.reasoning += p.reasoning;
  all.content += p.content;
  return all;
}

TEST(HarmonyParserTest, AnalysisIsReasoningAndFinalIsContentWholeOrStreamed) {
  const std::string out =
      "<|channel|>analysis<|message|>User says hi. Answer <briefly>.<|end|><|start|>assistant"
      "<|channel|>final<|message|>Hello! <|x|> 2 < 3<|return|>";
  for (size_t piece : {out.size(), size_t{1}, size_t{3}, size_t{7}}) {
    SCOPED_TRACE(piece);
    const ReasoningParser::Parts p = ParseAll(out, piece);
    EXPECT_EQ(p.reasoning, "User says hi. Answer <briefly>.");
    EXPECT_EQ(p.content, "Hello! <|x|> 2 < 3");
  }
}

TEST(HarmonyParserTest, CommentaryAndConstrainedFinalAreContent) {
  const ReasoningParser::Parts p = ParseAll(
      "<|channel|>final <|constrain|>json<|message|>{\"a\": 1}<|end|>"
      "<|start|>assistant<|channel|>commentary<|message|>calling<|call|>",
      5);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "{\"a\": 1}calling");
}

TEST(HarmonyParserTest, UnfinishedOutputs) {
  // Cut inside the reasoning: all of it is reasoning, the held-back "<|en" included.
  EXPECT_EQ(ParseAll("<|channel|>analysis<|message|>thinking <|en", 4).reasoning, "thinking <|en");
  // No harmony message at all: plain content.
  EXPECT_EQ(ParseAll("just text", 2).content, "just text");
  // A header that never completes is dropped.
  const ReasoningParser::Parts p =
      ParseAll("<|channel|>analysis<|message|>a<|end|><|start|>assi", 3);
  EXPECT_EQ(p.reasoning, "a");
  EXPECT_EQ(p.content, "");
}

}  // namespace
}  // namespace kvserve::server
