// Differential test: for the pre-tokenizers that llama.cpp runs through std::regex (Qwen2,
// DeepSeek Coder), our hand-written splitters must give the same words as std::regex applied
// the way llama.cpp's unicode_regex_split applies it (category-collapsed text for \p{..}
// regexes, codepoints with non-ASCII whitespace as \v otherwise), on random mixed-script text.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "tokenizer/unicode.h"

// GCC 12 warns about std::function members inside libstdc++'s own <regex> at -O2 with ASan.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvserve::tokenizer {
namespace {

// One codepoint as one char, per llama.cpp: ASCII as is, non-ASCII whitespace as \v, other
// codepoints as a byte naming their category.
char Collapse(uint32_t cpt) {
  if (cpt < 0x80) return static_cast<char>(cpt);
  const CodepointFlags f = FlagsOf(cpt);
  if (f.is_whitespace) return 0x0B;
  if (f.is_number) return static_cast<char>(0xD1);
  if (f.is_letter) return static_cast<char>(0xD2);
  if (f.is_punctuation) return static_cast<char>(0xD3);
  if (f.is_accent_mark) return static_cast<char>(0xD4);
  if (f.is_symbol) return static_cast<char>(0xD5);
  return static_cast<char>(0xD0);
}

// A regex step: `collapsed` regexes run on Collapse()d chars, the others on wide codepoints.
struct RefRegex {
  RefRegex(bool c, const std::string& n, const std::wstring& w) : collapsed(c) {
    if (collapsed) {
      narrow.assign(n, std::regex_constants::ECMAScript);
    } else {
      wide.assign(w, std::regex_constants::ECMAScript);
    }
  }
  bool collapsed;
  std::regex narrow;
  std::wregex wide;
};

template <typename CharT>
std::vector<size_t> RefSplit(const std::basic_string<CharT>& text,
                             const std::basic_regex<CharT>& re, const std::vector<size_t>& pieces) {
  std::vector<size_t> out;
  size_t start = 0;
  for (const size_t len : pieces) {
    std::regex_iterator<const CharT*> it(text.data() + start, text.data() + start + len, re), end;
    size_t prev = 0;
    for (; it != end; ++it) {
      const size_t pos = it->position(), n = it->length();
      if (pos > prev) out.push_back(pos - prev);
      out.push_back(n);
      prev = pos + n;
    }
    if (prev < len) out.push_back(len - prev);
    start += len;
  }
  return out;
}

std::vector<std::string> RefPreTokenize(const std::vector<RefRegex>& regexes,
                                        const std::string& text) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lossy(text);
  std::string collapsed;
  std::wstring wide;
  for (const uint32_t c : cpts) {
    collapsed.push_back(Collapse(c));
    wide.push_back(static_cast<wchar_t>(c > 0x7F && IsWhitespace(c) ? 0x0B : c));
  }
  std::vector<size_t> pieces;
  if (!cpts.empty()) pieces.push_back(cpts.size());
  for (const RefRegex& r : regexes) {
    pieces = r.collapsed ? RefSplit(collapsed, r.narrow, pieces) : RefSplit(wide, r.wide, pieces);
  }
  std::vector<std::string> words;
  size_t start = 0;
  for (const size_t len : pieces) {
    std::string utf8, word;
    for (size_t i = start; i < start + len; ++i) AppendUtf8(cpts[i], &utf8);
    for (const char c : utf8) word += ByteToGpt2Char(static_cast<uint8_t>(c));
    words.push_back(word);
    start += len;
  }
  return words;
}

// Random strings over an alphabet that exercises every branch: ASCII classes, contractions,
// whitespace runs, CR/LF, non-ASCII letters/digits/marks/symbols/whitespace, CJK, unassigned.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> kAlphabet = {"a",
                                                     "Z",
                                                     "q",
                                                     "0",
                                                     "7",
                                                     " ",
                                                     " ",
                                                     "  ",
                                                     "\t",
                                                     "\n",
                                                     "\r\n",
                                                     ",",
                                                     ".",
                                                     "!",
                                                     "'",
                                                     "'s",
                                                     "'LL",
                                                     "$",
                                                     "+",
                                                     "<",
                                                     "~",
                                                     "_",
                                                     "(",
                                                     "\xC3\xA9",
                                                     "\xD0\xB6",
                                                     "\xD9\xA3",
                                                     "\xCC\x81",
                                                     "\xC2\xA0",
                                                     "\xE3\x80\x80",
                                                     "\xE4\xB8\xAD",
                                                     "\xEA\xB0\x80",
                                                     "\xF0\x9F\xA6\x99",
                                                     "\xCD\xB8",
                                                     "\xE2\x80\x8B",
                                                     "\xEF\xBC\x81",
                                                     "\xE2\x80\x9C",
                                                     "\xC2\xB5"};
  std::uniform_int_distribution<int> len_dist(0, 16);
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string s;
  for (int i = len_dist(rng); i > 0; --i) s += kAlphabet[pick(rng)];
  return s;
}

void ExpectSameAsRegex(PreTokenizerKind kind, const std::vector<RefRegex>& regexes) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000; ++i) {
    const std::string text = RandomText(rng);
    ASSERT_EQ(PreTokenize(kind, text), RefPreTokenize(regexes, text))
        << PreTokenizerName(kind) << " on '" << text << "'";
  }
}

const std::string kL =
    "\xD2"
    "A-Za-z";
const std::string kN =
    "\xD1"
    "0-9";

TEST(PreTokenizerDifferentialTest, Qwen2MatchesStdRegex) {
  const std::string re = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n" + kL +
                         kN + "]?[" + kL + "]+|[" + kN + "]| ?[^\\s" + kL + kN +
                         "]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  ExpectSameAsRegex(PreTokenizerKind::kQwen2, {{true, re, {}}});
}

TEST(PreTokenizerDifferentialTest, DeepseekCoderMatchesStdRegex) {
  const std::string punct = "\xD3!-#%-*,-/:-;?-@\\[-\\]_\\{\\}";
  ExpectSameAsRegex(PreTokenizerKind::kDeepseekCoder,
                    {{false, {}, L"[\r\n]"},
                     {true, "\\s?[" + kL + "]+", {}},
                     {true, "\\s?[" + punct + "]+", {}},
                     {false, {}, L"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+"},
                     {true, "[" + kN + "]", {}}});
}

// o200k ("gpt-4o": gpt-oss), llama.cpp's form of it (letters cased by ASCII only).
TEST(PreTokenizerDifferentialTest, O200kMatchesStdRegex) {
  const std::string upper = "((?=[" + kL + "])([^a-z]))";
  const std::string lower = "((?=[" + kL + "])([^A-Z]))";
  const std::string contraction = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
  const std::string prefix = "[^\\r\\n" + kL + kN + "]?";
  const std::string re = prefix + upper + "*" + lower + "+" + contraction + "|" + prefix + upper +
                         "+" + lower + "*" + contraction + "|[" + kN + "]{1,3}| ?[^\\s" + kL + kN +
                         "]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  ExpectSameAsRegex(PreTokenizerKind::kO200k, {{true, re, {}}});
  EXPECT_EQ(PreTokenize(PreTokenizerKind::kO200k, "HELLOworld's CAF\xC3\x89 123456"),
            (std::vector<std::string>{"HELLOworld's",
                                      "\xC4\xA0"
                                      "CAF\xC3\x83\xC4\xAB",
                                      "\xC4\xA0", "123", "456"}));
}

}  // namespace
}  // namespace kvserve::tokenizer
