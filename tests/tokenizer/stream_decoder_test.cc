#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

namespace kvserve::tokenizer {
namespace {

// SPM vocab: specials, the 256 byte tokens (<0x00> = id 3), and a few pieces.
std::shared_ptr<const Vocab> ByteVocab() {
  VocabConfig c;
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    c.token_types.push_back(TokenType::kByte);
  }
  for (const char* t : {"\xE2\x96\x81Hi", "!", "\xE2\x96\x81"}) {
    c.tokens.push_back(t);
    c.token_types.push_back(TokenType::kNormal);
  }
  auto v = Vocab::FromConfig(std::move(c));
  CHECK(v.ok()) << v.status().ToString();
  return *v;
}

constexpr int32_t Byte(uint8_t b) {
  return 3 + b;
}
constexpr int32_t kHi = 259;    // "▁Hi"
constexpr int32_t kBang = 260;  // "!"

TEST(StreamDecoderTest, HoldsBackSplitCharacters) {
  const Tokenizer t(ByteVocab());
  StreamDecoder dec(t);
  EXPECT_EQ(dec.Push(kHi), " Hi");
  // "€" = E2 82 AC arrives one byte token at a time.
  EXPECT_EQ(dec.Push(Byte(0xE2)), "");
  EXPECT_EQ(dec.num_pending_bytes(), 1u);
  EXPECT_EQ(dec.Push(Byte(0x82)), "");
  EXPECT_EQ(dec.Push(Byte(0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(dec.num_pending_bytes(), 0u);
  // A 4-byte emoji (F0 9F A6 99) followed by a normal token in the same Push.
  EXPECT_EQ(dec.Push(Byte(0xF0)), "");
  EXPECT_EQ(dec.Push(Byte(0x9F)), "");
  EXPECT_EQ(dec.Push(Byte(0xA6)), "");
  EXPECT_EQ(dec.Push(Byte(0x99)), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(dec.Push(kBang), "!");
  EXPECT_EQ(dec.Flush(), "");
}

TEST(StreamDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer t(ByteVocab());
  StreamDecoder dec(t);
  // A stray continuation byte is invalid at once.
  EXPECT_EQ(dec.Push(Byte(0x80)), "\xEF\xBF\xBD");
  // A lead byte followed by a non-continuation: U+FFFD, then the ASCII byte.
  EXPECT_EQ(dec.Push(Byte(0xE2)), "");
  EXPECT_EQ(dec.Push(Byte('A')),
            "\xEF\xBF\xBD"
            "A");
  // Overlong (C0 80) and surrogate (ED A0 80) forms are never valid.
  EXPECT_EQ(dec.Push(Byte(0xC0)), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Push(Byte(0xED)), "");
  EXPECT_EQ(dec.Push(Byte(0xA0)), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // An incomplete character at the end is flushed as one U+FFFD.
  EXPECT_EQ(dec.Push(Byte(0xF0)), "");
  EXPECT_EQ(dec.Push(Byte(0x9F)), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.Flush(), "");
}

TEST(StreamDecoderTest, OptionalLeadingSpaceStripAndSpecialTokens) {
  const Tokenizer t(ByteVocab());
  StreamDecoder dec(t, {.render_special = false, .strip_leading_space = true});
  EXPECT_EQ(dec.Push(1), "");  // BOS renders as nothing and does not use up the strip
  EXPECT_EQ(dec.Push(kHi), "Hi");
  EXPECT_EQ(dec.Push(kHi), " Hi");
  StreamDecoder special(t, {.render_special = true});
  EXPECT_EQ(special.Push(2), "</s>");
}

TEST(StreamDecoderTest, ConcatenationEqualsWholeDecodeForValidText) {
  const Tokenizer t(ByteVocab());
  const std::string text = "Hi \xE2\x82\xAC\xF0\x9F\xA6\x99 \xC3\xA9!";
  const std::vector<int32_t> ids = t.Encode(text, {.add_special = true});
  StreamDecoder dec(t, {.strip_leading_space = true});
  std::string streamed;
  for (const int32_t id : ids) streamed += dec.Push(id);
  streamed += dec.Flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(t.Decode(ids), text);
}

TEST(AppendCompleteUtf8Test, ConsumesOnlyCompleteCharacters) {
  std::string out;
  EXPECT_EQ(AppendCompleteUtf8("ab\xE2\x82", &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(AppendCompleteUtf8("\xF4\x90\x80\x80", &out), 4u);  // > U+10FFFF
  EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvserve::tokenizer
