#include "tokenizer/unicode.h"

#include <unicode/uchar.h>

#include <array>

namespace kvserve::tokenizer {
namespace {

struct Gpt2ByteTables {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 512> char_to_byte;  // indexed by codepoint; -1 = not a GPT-2 char
};

// bytes_to_unicode(): '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the
// other 68 bytes, in increasing order, become U+0100, U+0101, ... (e.g. ' ' (0x20) -> U+0120
// "Ġ", '\n' (0x0A) -> U+010A "Ċ").
Gpt2ByteTables BuildGpt2Tables() {
  Gpt2ByteTables t;
  t.char_to_byte.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : 256u + next_extra++;
    AppendUtf8(cpt, &t.byte_to_char[b]);
    t.char_to_byte[cpt] = static_cast<int16_t>(b);
  }
  return t;
}

const Gpt2ByteTables& Gpt2Tables() {
  static const Gpt2ByteTables tables = BuildGpt2Tables();
  return tables;
}

}  // namespace

bool IsWhitespace(uint32_t cpt) {
  if (cpt <= 0x20) return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
  if (cpt < 0x85) return false;
  switch (cpt) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cpt >= 0x2000 && cpt <= 0x200A;
  }
}

CodepointFlags FlagsOf(uint32_t cpt) {
  CodepointFlags f;
  f.in_range = true;
  f.is_whitespace = IsWhitespace(cpt);
  if (cpt > 0x10FFFF) {
    f.is_undefined = true;
    return f;
  }
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(cpt));
  if (mask & U_GC_L_MASK) {
    f.is_letter = true;
  } else if (mask & U_GC_N_MASK) {
    f.is_number = true;
  } else if (mask & U_GC_P_MASK) {
    f.is_punctuation = true;
  } else if (mask & U_GC_S_MASK) {
    f.is_symbol = true;
  } else if (mask & U_GC_M_MASK) {
    f.is_accent_mark = true;
  } else if (mask & U_GC_Z_MASK) {
    f.is_separator = true;
  } else if (mask & U_GC_CN_MASK) {
    f.is_undefined = true;
  } else {
    f.is_control = true;  // Cc, Cf, Co, Cs
  }
  return f;
}

uint32_t ToLower(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cpt)));
}

size_t Utf8SequenceLength(char lead) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(lead) >> 4];
}

std::vector<uint32_t> DecodeUtf8Lossy(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  auto cont = [&](size_t i) { return i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    size_t len = 0;
    uint32_t cpt = 0;
    if (b < 0x80) {
      len = 1;
      cpt = b;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      len = 2;
      cpt = ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3F);
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      len = 3;
      cpt = ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3F);
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      len = 4;
      cpt = ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
            (s[i + 3] & 0x3F);
    }
    // llama.cpp would throw later for a 4-byte form above U+10FFFF; we replace it instead.
    if (len == 0 || cpt > 0x10FFFF) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    out.push_back(cpt);
    i += len;
  }
  return out;
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

const std::string& ByteToGpt2Char(uint8_t b) {
  return Gpt2Tables().byte_to_char[b];
}

std::optional<uint8_t> Gpt2CharToByte(uint32_t cpt) {
  if (cpt >= 512) return std::nullopt;
  const int16_t b = Gpt2Tables().char_to_byte[cpt];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

}  // namespace kvserve::tokenizer
