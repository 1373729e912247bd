// Unicode helpers for the tokenizers: UTF-8 decoding the way llama.cpp's unicode.cpp does it,
// codepoint category flags (from ICU, grouped like llama.cpp's generated tables), and the
// GPT-2 byte <-> printable-character map that byte-level BPE vocabularies are written in.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// The category groups llama.cpp's regex splitters test. Exactly one of the category bits is set
// for an assigned or unassigned codepoint (`is_undefined` for Cn); `is_whitespace` is the
// Unicode White_Space property and may come on top of a category.
struct CodepointFlags {
  bool in_range = false;        // false only for the "past the end of the fragment" sentinel
  bool is_undefined = false;    // Cn
  bool is_number = false;       // N*
  bool is_letter = false;       // L*
  bool is_separator = false;    // Z*
  bool is_accent_mark = false;  // M*
  bool is_punctuation = false;  // P*
  bool is_symbol = false;       // S*
  bool is_control = false;      // Cc Cf Co Cs
  bool is_whitespace = false;   // U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, ...
};

// Flags of one codepoint (in_range = true). Codepoints above U+10FFFF are "undefined".
CodepointFlags FlagsOf(uint32_t cpt);

// The White_Space property: the set llama.cpp's `\s` and `is_whitespace` use.
bool IsWhitespace(uint32_t cpt);

// Simple lowercase mapping (one codepoint to one codepoint).
uint32_t ToLower(uint32_t cpt);

// The byte length llama.cpp assumes for a UTF-8 sequence from its lead byte's high nibble
// (1 for ASCII and for stray continuation bytes, 2 for 0xC_/0xD_, 3 for 0xE_, 4 for 0xF_).
size_t Utf8SequenceLength(char lead);

// Decodes UTF-8 to codepoints; each byte that does not start a well-formed sequence becomes
// one U+FFFD (llama.cpp's unicode_cpts_from_utf8 behaviour, overlong forms accepted).
std::vector<uint32_t> DecodeUtf8Lossy(std::string_view utf8);

// Appends the UTF-8 encoding of `cpt` (must be <= 0x10FFFF).
void AppendUtf8(uint32_t cpt, std::string* out);

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 + n.
// Returns the UTF-8 text of the character byte `b` is written as.
const std::string& ByteToGpt2Char(uint8_t b);
// The inverse: the byte a GPT-2 character stands for, or nullopt for any other codepoint.
std::optional<uint8_t> Gpt2CharToByte(uint32_t cpt);

}  // namespace kvserve::tokenizer
