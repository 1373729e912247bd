// Unit tests on small vocabularies built in code: SPM merges and byte fallback, BPE merges,
// special tokens, BOS/EOS rules, metadata round trip through GGUF, and error cases.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"

namespace kvserve::tokenizer {
namespace {

const std::string kSp = "\xE2\x96\x81";  // "▁"

// <unk> <s> </s> <0x00>..<0xFF>, then pieces with scores (higher merges first).
VocabConfig SmallSpmConfig() {
  VocabConfig c;
  c.type = VocabType::kSpm;
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  c.scores = {0, 0, 0};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    c.token_types.push_back(TokenType::kByte);
    c.scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {kSp, -1},       {"a", -2},        {"b", -3},     {"c", -4},         {"ab", -5},
      {kSp + "a", -6}, {kSp + "ab", -7}, {"bc", -0.5f}, {"<|im_end|>", 0}, {"<tool>", 0}};
  for (const auto& [text, score] : pieces) {
    c.tokens.push_back(text);
    c.scores.push_back(score);
    c.token_types.push_back(TokenType::kNormal);
  }
  c.token_types[c.tokens.size() - 2] = TokenType::kControl;      // <|im_end|>
  c.token_types[c.tokens.size() - 1] = TokenType::kUserDefined;  // <tool>
  return c;
}

int32_t Id(const Tokenizer& t, const std::string& text) {
  return *t.vocab().FindToken(text);
}

Tokenizer MakeSpm(VocabConfig c = SmallSpmConfig()) {
  auto vocab = Vocab::FromConfig(std::move(c));
  CHECK(vocab.ok()) << vocab.status().ToString();
  return Tokenizer(*vocab);
}

TEST(SpmTest, MergesBestScoringPairFirst) {
  const Tokenizer t = MakeSpm();
  // "▁abc": "bc" (-0.5) beats "▁" + "a" (-6) and "ab" (-5); then nothing merges "▁a" + "bc".
  const std::vector<int32_t> ids = t.Encode("abc", {.add_special = false});
  EXPECT_EQ(ids, (std::vector<int32_t>{Id(t, kSp + "a"), Id(t, "bc")}));
  // "▁ab": ▁+a -> "▁a" (-6) vs a+b -> "ab" (-5): "ab" first, then "▁" + "ab" -> "▁ab".
  EXPECT_EQ(t.Encode("ab", {.add_special = false}), (std::vector<int32_t>{Id(t, kSp + "ab")}));
}

TEST(SpmTest, UnknownCharactersFallBackToBytes) {
  const Tokenizer t = MakeSpm();
  // "é" = C3 A9 is not a token: byte tokens <0xC3> <0xA9> (ids 3 + byte).
  const std::vector<int32_t> ids = t.Encode("\xC3\xA9", {.add_special = false});
  EXPECT_EQ(ids, (std::vector<int32_t>{Id(t, kSp), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.Decode(ids), "\xC3\xA9");
}

TEST(SpmTest, BosEosFollowMetadata) {
  VocabConfig c = SmallSpmConfig();
  c.add_eos = true;
  const Tokenizer t = MakeSpm(c);
  EXPECT_EQ(t.Encode("", {.add_special = true}), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(t.Encode("", {.add_special = false}), std::vector<int32_t>{});
  const std::vector<int32_t> ids = t.Encode("a", {.add_special = true});
  EXPECT_EQ(ids, (std::vector<int32_t>{1, Id(t, kSp + "a"), 2}));
  // Decode strips the prefix space of the first token after BOS; BOS/EOS render as nothing.
  EXPECT_EQ(t.Decode(ids), "a");
  EXPECT_EQ(t.Decode(ids, {.render_special = true}), "<s>a</s>");
  EXPECT_EQ(t.Decode(ids, {.strip_leading_space = false}), " a");

  VocabConfig no_bos = SmallSpmConfig();
  no_bos.add_bos = false;
  EXPECT_EQ(MakeSpm(no_bos).Encode("a", {.add_special = true}),
            (std::vector<int32_t>{Id(t, kSp + "a")}));
}

TEST(SpmTest, SpecialTokensParsedOnlyWhenAsked) {
  const Tokenizer t = MakeSpm();
  const int32_t im_end = Id(t, "<|im_end|>");
  const std::vector<int32_t> parsed = t.Encode("a<|im_end|>", {false, true});
  EXPECT_EQ(parsed, (std::vector<int32_t>{Id(t, kSp + "a"), im_end}));
  const std::vector<int32_t> plain = t.Encode("a<|im_end|>", {false, false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  EXPECT_GT(plain.size(), 3u);
  EXPECT_EQ(t.Decode(plain), "a<|im_end|>");
  // User-defined tokens are matched even without parse_special; text after a special token
  // gets the SPM space prefix again, as in llama.cpp.
  const int32_t tool = Id(t, "<tool>");
  EXPECT_EQ(t.Encode("<tool>a", {false, false}), (std::vector<int32_t>{tool, Id(t, kSp + "a")}));
  EXPECT_EQ(t.TokenPiece(im_end), "");
  EXPECT_EQ(t.TokenPiece(im_end, true), "<|im_end|>");
  EXPECT_TRUE(t.vocab().IsEog(im_end));
  EXPECT_TRUE(t.vocab().IsEog(2));
  EXPECT_FALSE(t.vocab().IsEog(Id(t, "a")));
}

// A byte-level BPE vocab over "hello world": all 256 byte characters, then merges.
VocabConfig SmallBpeConfig() {
  VocabConfig c;
  c.type = VocabType::kBpe;
  c.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    const uint8_t byte = static_cast<uint8_t>(b);
    // Printable ASCII stand for themselves; ' ' is "Ġ" (U+0120), '\n' is "Ċ" (U+010A).
    if (byte == ' ')
      s = "\xC4\xA0";
    else if (byte == '\n')
      s = "\xC4\x8A";
    else if (byte > 0x20 && byte < 0x7F)
      s = std::string(1, static_cast<char>(byte));
    else
      s = "<b" + std::to_string(b) + ">";  // unused placeholders keep the test small
    c.tokens.push_back(s);
  }
  c.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "l d"};
  for (const char* t :
       {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld", "<|endoftext|>"}) {
    c.tokens.push_back(t);
  }
  c.eos_id = static_cast<int32_t>(c.tokens.size()) - 1;
  c.bos_id = c.eos_id;
  return c;
}

TEST(BpeTest, MergesByRank) {
  auto vocab = Vocab::FromConfig(SmallBpeConfig());
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  const Tokenizer t(*vocab);
  const std::vector<int32_t> ids = t.Encode("hello world", {.add_special = true});
  EXPECT_EQ(ids, (std::vector<int32_t>{Id(t, "hello"), Id(t, "\xC4\xA0wor"), Id(t, "ld")}));
  EXPECT_EQ(t.Decode(ids), "hello world");
  EXPECT_EQ(t.TokenPiece(Id(t, "\xC4\xA0wor")), " wor");
  // GPT-2 adds no BOS by default; "<|endoftext|>" is recognised as control / end of text.
  EXPECT_FALSE(t.vocab().add_bos());
  EXPECT_TRUE(t.vocab().IsControl(Id(t, "<|endoftext|>")));
  EXPECT_TRUE(t.vocab().IsEog(Id(t, "<|endoftext|>")));
}

TEST(VocabTest, MetadataRoundTripsThroughGguf) {
  for (VocabConfig config : {SmallSpmConfig(), SmallBpeConfig()}) {
    auto vocab = Vocab::FromConfig(config);
    ASSERT_TRUE(vocab.ok());
    gguf::GgufWriter writer;
    WriteVocabMetadata(**vocab, writer);
    auto file = gguf::GgufFile::FromBuffer(writer.Serialize());
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto reread = Vocab::FromGguf(**file);
    ASSERT_TRUE(reread.ok()) << reread.status().ToString();
    EXPECT_EQ((*reread)->config().tokens, (*vocab)->config().tokens);
    EXPECT_EQ((*reread)->bos_id(), (*vocab)->bos_id());
    EXPECT_EQ((*reread)->eos_id(), (*vocab)->eos_id());
    EXPECT_EQ((*reread)->add_bos(), (*vocab)->add_bos());
    EXPECT_EQ((*reread)->add_space_prefix(), (*vocab)->add_space_prefix());
    const std::string text = "hello world abc <|im_end|> \xC3\xA9";
    EXPECT_EQ(Tokenizer(*reread).Encode(text, {true, true}),
              Tokenizer(*vocab).Encode(text, {true, true}));
  }
}

TEST(VocabTest, RejectsBadConfigs) {
  VocabConfig unknown_pre = SmallBpeConfig();
  unknown_pre.pre = "no-such-pre-tokenizer";
  auto r1 = Vocab::FromConfig(unknown_pre);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r1.status().message().find("no-such-pre-tokenizer"), std::string::npos);

  VocabConfig dup = SmallSpmConfig();
  dup.tokens.back() = "a";
  EXPECT_FALSE(Vocab::FromConfig(dup).ok());

  VocabConfig short_scores = SmallSpmConfig();
  short_scores.scores.pop_back();
  EXPECT_FALSE(Vocab::FromConfig(short_scores).ok());

  VocabConfig no_merges = SmallBpeConfig();
  no_merges.merges.clear();
  EXPECT_FALSE(Vocab::FromConfig(no_merges).ok());

  gguf::GgufWriter writer;
  writer.Set("tokenizer.ggml.model", gguf::Value::Str("t5"));
  writer.Set("tokenizer.ggml.tokens", gguf::Value::StrArray({"a", "b"}));
  auto file = gguf::GgufFile::FromBuffer(writer.Serialize());
  ASSERT_TRUE(file.ok());
  auto r2 = Vocab::FromGguf(**file);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kUnimplemented);
}

TEST(PreTokenizerTest, Gpt2SplitsWordsAndKeepsLastSpaceForNextWord) {
  auto words = PreTokenize(PreTokenizerKind::kGpt2, "Hi  there's 42!");
  // "Ġ" is the GPT-2 character for ' '.
  EXPECT_EQ(words, (std::vector<std::string>{"Hi", "\xC4\xA0", "\xC4\xA0there", "'s",
                                             "\xC4\xA0"
                                             "42",
                                             "!"}));
  EXPECT_EQ(PreTokenize(PreTokenizerKind::kLlama3, "12345"),
            (std::vector<std::string>{"123", "45"}));
  EXPECT_EQ(PreTokenize(PreTokenizerKind::kQwen2, "123"),
            (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_TRUE(PreTokenize(PreTokenizerKind::kDeepseekCoder, "").empty());
}

}  // namespace
}  // namespace kvserve::tokenizer
