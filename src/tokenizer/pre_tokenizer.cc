#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <variant>

#include "tokenizer/unicode.h"

namespace kvserve::tokenizer {
namespace {

// A partition of the text's codepoints: lengths of consecutive pieces, summing to the total.
using Pieces = std::vector<size_t>;
using Range = std::pair<uint32_t, uint32_t>;  // inclusive

// Cased letters of the DeepSeek LLM pre-tokenizer regex (`\s?[A-Za-zµÀ-Ö...]+`).
constexpr std::array<Range, 84> kDeepseekLatin = {{
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
}};

// `[!-/:-~！-／：-～‘-‟　-。]` of the DeepSeek LLM regex.
constexpr std::array<Range, 6> kDeepseekPunct = {{{0x21, 0x2F},
                                                  {0x3A, 0x7E},
                                                  {0xFF01, 0xFF0F},
                                                  {0xFF1A, 0xFF5E},
                                                  {0x2018, 0x201F},
                                                  {0x3000, 0x3002}}};
// `[一-龥ࠀ-一가-퟿]` of both DeepSeek regex lists.
constexpr std::array<Range, 3> kDeepseekCjk = {
    {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}}};

// One character class as llama.cpp's std::regex sees it. Classes written with \p{..} run on
// the "collapsed" text (ASCII as is, other codepoints by category, non-ASCII whitespace as
// \v); literal-range classes run on codepoints with non-ASCII whitespace replaced by \v.
enum class Class {
  kSpace,          // \s
  kCrLf,           // [\r\n]
  kLetter,         // \p{L}
  kNumber,         // \p{N}
  kPunct,          // \p{P}
  kDefaultPunct,   // [\p{P}\$\+<=>\^~\|]
  kAsciiDigit,     // [0-9]
  kDeepseekLatin,  // the cased-letter list above
  kDeepseekPunct,
  kDeepseekCjk,
};

template <size_t N>
bool InRanges(uint32_t cpt, const std::array<Range, N>& ranges) {
  for (const Range& r : ranges) {
    if (cpt >= r.first && cpt <= r.second) return true;
  }
  return false;
}

bool IsAsciiPunct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F && c != '$' && c != '+') || c == ':' || c == ';' || c == '?' ||
         c == '@' || (c >= 0x5B && c <= 0x5D) || c == '_' || c == '{' || c == '}';
}

bool InClass(Class cls, uint32_t c) {
  const bool ascii = c < 0x80;
  const bool non_ascii_space = !ascii && IsWhitespace(c);
  switch (cls) {
    case Class::kSpace: return (c >= 0x09 && c <= 0x0D) || c == ' ' || non_ascii_space;
    case Class::kCrLf: return c == '\r' || c == '\n';
    case Class::kAsciiDigit: return c >= '0' && c <= '9';
    case Class::kLetter:
      return ascii ? ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
                   : !non_ascii_space && FlagsOf(c).is_letter;
    case Class::kNumber:
      return ascii ? (c >= '0' && c <= '9') : !non_ascii_space && FlagsOf(c).is_number;
    case Class::kPunct:
      return ascii ? IsAsciiPunct(c) : !non_ascii_space && FlagsOf(c).is_punctuation;
    case Class::kDefaultPunct:
      return InClass(Class::kPunct, c) || c == '$' || c == '+' || c == '<' || c == '=' ||
             c == '>' || c == '^' || c == '~' || c == '|';
    case Class::kDeepseekLatin: return !non_ascii_space && InRanges(c, kDeepseekLatin);
    case Class::kDeepseekPunct: return !non_ascii_space && InRanges(c, kDeepseekPunct);
    case Class::kDeepseekCjk: return !non_ascii_space && InRanges(c, kDeepseekCjk);
  }
  return false;
}

// A regex of the shape `prefix? body{min,max}`, or `\s+$` when `to_end`.
struct ClassPattern {
  std::optional<Class> prefix;
  Class body;
  size_t min_count = 1;
  size_t max_count = SIZE_MAX;
  bool to_end = false;
};

// Refines `pieces` with one ClassPattern: in each piece, leftmost-first non-overlapping
// matches become pieces, and so do the runs of text between them (regex_iterator semantics).
// Example: `\s?\p{L}+` on "ab, cd" gives "ab" | "," | " cd".
Pieces SplitByPattern(const std::vector<uint32_t>& cpts, const Pieces& pieces,
                      const ClassPattern& pat) {
  Pieces out;
  out.reserve(pieces.size());
  size_t begin = 0;
  for (const size_t len : pieces) {
    const size_t end = begin + len;
    auto run_end = [&](size_t from) {  // end of the body run starting at `from`, capped at max
      size_t p = from;
      while (p < end && p - from < pat.max_count && InClass(pat.body, cpts[p])) ++p;
      return p;
    };
    size_t trailing_space = end;  // start of the whitespace run that reaches the end
    if (pat.to_end) {
      while (trailing_space > begin && InClass(Class::kSpace, cpts[trailing_space - 1])) {
        --trailing_space;
      }
    }
    size_t last = begin;
    for (size_t pos = begin; pos < end;) {
      size_t match_end = pos;
      if (pat.to_end) {
        match_end = pos == trailing_space ? end : pos;
      } else {
        if (pat.prefix && InClass(*pat.prefix, cpts[pos]) && pos + 1 < end) {
          const size_t e = run_end(pos + 1);
          if (e - (pos + 1) >= pat.min_count) match_end = e;
        }
        if (match_end == pos) {
          const size_t e = run_end(pos);
          if (e - pos >= pat.min_count) match_end = e;
        }
      }
      if (match_end == pos) {
        ++pos;
        continue;
      }
      if (pos > last) out.push_back(pos - last);
      out.push_back(match_end - pos);
      last = pos = match_end;
    }
    if (end > last) out.push_back(end - last);
    begin = end;
  }
  return out;
}

// Reads codepoints and flags of one piece; positions outside [begin, end) read as
// "no character" (kOutOfRange / flags with in_range = false).
struct PieceView {
  static constexpr uint32_t kOutOfRange = 0xFFFFFFFF;
  const std::vector<uint32_t>& cpts;
  size_t begin;
  size_t end;
  uint32_t Cpt(size_t p) const { return p >= begin && p < end ? cpts[p] : kOutOfRange; }
  CodepointFlags Flags(size_t p) const {
    return p >= begin && p < end ? FlagsOf(cpts[p]) : CodepointFlags{};
  }
  bool IsOther(const CodepointFlags& f) const {  // [^\s\p{L}\p{N}] at an in-range position
    return f.in_range && !(f.is_whitespace || f.is_letter || f.is_number);
  }
};

// Length of a contraction ('s 't 're 've 'm 'll 'd) at `pos`, or 0.
size_t ContractionLength(const PieceView& v, size_t pos, bool ignore_case) {
  if (v.Cpt(pos) != '\'' || pos + 1 >= v.end) return 0;
  auto lower = [&](uint32_t c) { return ignore_case ? ToLower(c) : c; };
  const uint32_t c1 = lower(v.Cpt(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= v.end) return 0;
  const uint32_t c2 = lower(v.Cpt(pos + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// End of the whitespace alternatives at `pos` (`\s*[\r\n]+` when `newline_rule`, then
// `\s+(?!\S)`, then `\s+`), or `pos` when there is no whitespace there.
size_t WhitespaceEnd(const PieceView& v, size_t pos, bool newline_rule) {
  size_t n = 0;
  size_t last_newline_end = 0;
  while (v.Flags(pos + n).is_whitespace) {
    const uint32_t c = v.Cpt(pos + n);
    if (c == '\r' || c == '\n') last_newline_end = pos + n + 1;
    ++n;
  }
  if (newline_rule && last_newline_end > 0) return last_newline_end;
  // `\s+(?!\S)` leaves the last space for the next word, unless the run ends the piece.
  if (n > 1 && v.Cpt(pos + n) != PieceView::kOutOfRange) return pos + n - 1;
  return pos + n;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t Gpt2TokenEnd(const PieceView& v, size_t pos) {
  if (const size_t n = ContractionLength(v, pos, false)) return pos + n;
  const uint32_t cpt = v.Cpt(pos);
  CodepointFlags f = cpt == ' ' ? v.Flags(pos + 1) : v.Flags(pos);
  const size_t start = pos + (cpt == ' ' ? 1 : 0);
  if (f.is_letter || f.is_number || v.IsOther(f)) {
    const bool letter = f.is_letter, number = f.is_number;
    size_t p = start;
    while (letter ? f.is_letter : number ? f.is_number : v.IsOther(f)) f = v.Flags(++p);
    return p;
  }
  const size_t ws_end = WhitespaceEnd(v, pos, false);
  return ws_end > pos ? ws_end : pos + 1;
}

// Llama-3 (digits_per_group = 3) and Qwen2 (1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
size_t Llama3TokenEnd(const PieceView& v, size_t pos, size_t digits_per_group) {
  if (const size_t n = ContractionLength(v, pos, true)) return pos + n;
  const uint32_t cpt = v.Cpt(pos);
  const CodepointFlags flags = v.Flags(pos);
  if (!(cpt == '\r' || cpt == '\n' || flags.is_number) &&
      (flags.is_letter || v.Flags(pos + 1).is_letter)) {
    size_t p = pos + 1;
    while (v.Flags(p).is_letter) ++p;
    return p;
  }
  if (flags.is_number) {
    size_t p = pos;
    while (p - pos < digits_per_group && v.Flags(p).is_number) ++p;
    return p;
  }
  CodepointFlags f2 = cpt == ' ' ? v.Flags(pos + 1) : flags;
  if (!(f2.is_whitespace || f2.is_letter || f2.is_number) && flags.in_range) {
    size_t p = pos + (cpt == ' ' ? 1 : 0);
    while (v.IsOther(f2)) f2 = v.Flags(++p);
    while (v.Cpt(p) == '\r' || v.Cpt(p) == '\n') ++p;
    return p;
  }
  const size_t ws_end = WhitespaceEnd(v, pos, true);
  return ws_end > pos ? ws_end : pos + 1;
}

// o200k ("gpt-4o"), as llama.cpp runs it (std::regex on the collapsed text, so "upper" and
// "lower" are decided for ASCII letters only; other letters count as both):
//   [^\r\n\p{L}\p{N}]?U*L+C? | [^\r\n\p{L}\p{N}]?U+L*C? | \p{N}{1,3} |
//   ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// U = a letter other than a-z, L = a letter other than A-Z, C = 's 't 're 've 'm 'll 'd in
// either case. Example: "HELLOworld's CAFÉ" -> "HELLOworld's" | " CAFÉ".
bool IsCasedUpper(uint32_t c) {
  return c != PieceView::kOutOfRange && InClass(Class::kLetter, c) && !(c >= 'a' && c <= 'z');
}
bool IsCasedLower(uint32_t c) {
  return c != PieceView::kOutOfRange && InClass(Class::kLetter, c) && !(c >= 'A' && c <= 'Z');
}

// End of U*L+C? (`upper_first`: U+L*C?) from `s`, or 0 when it does not match there.
size_t O200kWordEnd(const PieceView& v, size_t s, bool upper_first) {
  size_t u = s;
  while (IsCasedUpper(v.Cpt(u))) ++u;
  size_t e = 0;
  if (upper_first) {
    if (u == s) return 0;
    e = u;
  } else {  // U* gives back letters until L+ can start (a letter that is both, or a-z)
    size_t k = u;
    while (!IsCasedLower(v.Cpt(k)) && k > s) --k;
    if (!IsCasedLower(v.Cpt(k))) return 0;
    e = k;
  }
  while (IsCasedLower(v.Cpt(e))) ++e;
  return e + ContractionLength(v, e, true);
}

size_t O200kTokenEnd(const PieceView& v, size_t pos) {
  const uint32_t c = v.Cpt(pos);
  const bool prefix = c != '\r' && c != '\n' && !InClass(Class::kLetter, c) &&
                      !InClass(Class::kNumber, c) && pos + 1 < v.end;
  for (const bool upper_first : {false, true}) {
    if (prefix) {
      if (const size_t e = O200kWordEnd(v, pos + 1, upper_first)) return e;
    }
    if (const size_t e = O200kWordEnd(v, pos, upper_first)) return e;
  }
  const CodepointFlags flags = v.Flags(pos);
  if (flags.is_number) {
    size_t p = pos;
    while (p - pos < 3 && v.Flags(p).is_number) ++p;
    return p;
  }
  const bool space_then_other = c == ' ' && v.IsOther(v.Flags(pos + 1));
  if (space_then_other || v.IsOther(flags)) {
    size_t p = pos + (space_then_other ? 1 : 0);
    while (v.IsOther(v.Flags(p))) ++p;
    while (v.Cpt(p) == '\r' || v.Cpt(p) == '\n' || v.Cpt(p) == '/') ++p;
    return p;
  }
  const size_t ws_end = WhitespaceEnd(v, pos, true);
  return ws_end > pos ? ws_end : pos + 1;
}

enum class Custom { kGpt2, kLlama3, kQwen2, kO200k };

Pieces SplitCustom(const std::vector<uint32_t>& cpts, const Pieces& pieces, Custom kind) {
  Pieces out;
  out.reserve(pieces.size());
  size_t begin = 0;
  for (const size_t len : pieces) {
    const PieceView v{cpts, begin, begin + len};
    for (size_t pos = begin; pos < v.end;) {
      size_t e = kind == Custom::kGpt2     ? Gpt2TokenEnd(v, pos)
                 : kind == Custom::kLlama3 ? Llama3TokenEnd(v, pos, 3)
                 : kind == Custom::kO200k  ? O200kTokenEnd(v, pos)
                                           : Llama3TokenEnd(v, pos, 1);
      out.push_back(e - pos);
      pos = e;
    }
    begin += len;
  }
  return out;
}

using Step = std::variant<Custom, ClassPattern>;

std::vector<Step> StepsFor(PreTokenizerKind kind) {
  const ClassPattern crlf{.prefix = {}, .body = Class::kCrLf, .max_count = 1};
  const ClassPattern cjk{.prefix = {}, .body = Class::kDeepseekCjk};
  switch (kind) {
    case PreTokenizerKind::kGpt2: return {Custom::kGpt2};
    case PreTokenizerKind::kLlama3: return {Custom::kLlama3};
    case PreTokenizerKind::kQwen2: return {Custom::kQwen2};
    case PreTokenizerKind::kO200k: return {Custom::kO200k};
    case PreTokenizerKind::kStarcoder:
      return {ClassPattern{.prefix = {}, .body = Class::kNumber, .max_count = 1}, Custom::kGpt2};
    case PreTokenizerKind::kDeepseekLlm:
      return {crlf,
              ClassPattern{.prefix = Class::kSpace, .body = Class::kDeepseekLatin},
              ClassPattern{.prefix = Class::kSpace, .body = Class::kDeepseekPunct},
              ClassPattern{.prefix = {}, .body = Class::kSpace, .to_end = true},
              cjk,
              ClassPattern{.prefix = {}, .body = Class::kNumber}};
    case PreTokenizerKind::kDeepseekCoder:
      return {crlf, ClassPattern{.prefix = Class::kSpace, .body = Class::kLetter},
              ClassPattern{.prefix = Class::kSpace, .body = Class::kPunct}, cjk,
              ClassPattern{.prefix = {}, .body = Class::kNumber, .max_count = 1}};
    case PreTokenizerKind::kDefault:
      return {
          ClassPattern{.prefix = {}, .body = Class::kDefaultPunct}, Custom::kGpt2,
          ClassPattern{.prefix = {}, .body = Class::kNumber},
          ClassPattern{.prefix = {}, .body = Class::kAsciiDigit, .min_count = 3, .max_count = 3}};
  }
  return {};
}

}  // namespace

Result<PreTokenizerKind> ParsePreTokenizer(std::string_view name) {
  using K = PreTokenizerKind;
  struct Alias {
    std::string_view name;
    K kind;
  };
  static constexpr Alias kAliases[] = {
      {"", K::kDefault},
      {"default", K::kDefault},
      {"gpt-2", K::kGpt2},
      {"phi-2", K::kGpt2},
      {"jina-es", K::kGpt2},
      {"jina-de", K::kGpt2},
      {"mpt", K::kGpt2},
      {"olmo", K::kGpt2},
      {"jais", K::kGpt2},
      {"llama3", K::kLlama3},
      {"llama-v3", K::kLlama3},
      {"llama-bpe", K::kLlama3},
      {"falcon3", K::kLlama3},
      {"dbrx", K::kLlama3},
      {"smaug-bpe", K::kLlama3},
      {"qwen2", K::kQwen2},
      {"deepseek-r1-qwen", K::kQwen2},
      {"megrez", K::kQwen2},
      {"stablelm2", K::kQwen2},
      {"deepseek-llm", K::kDeepseekLlm},
      {"deepseek-coder", K::kDeepseekCoder},
      {"starcoder", K::kStarcoder},
      {"refact", K::kStarcoder},
      {"command-r", K::kStarcoder},
      {"smollm", K::kStarcoder},
      {"codeshell", K::kStarcoder},
      {"exaone", K::kStarcoder},
      {"minerva-7b", K::kStarcoder},
      {"gpt-4o", K::kO200k},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.kind;
  }
  return InvalidArgument("unknown BPE pre-tokenizer tokenizer.ggml.pre = '" + std::string(name) +
                         "'");
}

std::string_view PreTokenizerName(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kDefault: return "default";
    case PreTokenizerKind::kGpt2: return "gpt-2";
    case PreTokenizerKind::kLlama3: return "llama-bpe";
    case PreTokenizerKind::kQwen2: return "qwen2";
    case PreTokenizerKind::kDeepseekLlm: return "deepseek-llm";
    case PreTokenizerKind::kDeepseekCoder: return "deepseek-coder";
    case PreTokenizerKind::kStarcoder: return "starcoder";
    case PreTokenizerKind::kO200k: return "gpt-4o";
  }
  return "default";
}

std::vector<std::string> PreTokenize(PreTokenizerKind kind, std::string_view text) {
  const std::vector<uint32_t> cpts = DecodeUtf8Lossy(text);
  Pieces pieces;
  if (!cpts.empty()) pieces.push_back(cpts.size());
  for (const Step& step : StepsFor(kind)) {
    if (const Custom* c = std::get_if<Custom>(&step)) {
      pieces = SplitCustom(cpts, pieces, *c);
    } else {
      pieces = SplitByPattern(cpts, pieces, std::get<ClassPattern>(step));
    }
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  std::string utf8;
  size_t begin = 0;
  for (const size_t len : pieces) {
    utf8.clear();
    for (size_t i = begin; i < begin + len; ++i) AppendUtf8(cpts[i], &utf8);
    std::string& word = words.emplace_back();
    word.reserve(utf8.size() * 2);
    for (const char c : utf8) word += ByteToGpt2Char(static_cast<uint8_t>(c));
    begin += len;
  }
  return words;
}

}  // namespace kvserve::tokenizer
