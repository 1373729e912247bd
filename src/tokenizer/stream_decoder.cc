#include "tokenizer/stream_decoder.h"

namespace kvserve::tokenizer {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// For a lead byte: the number of continuation bytes and the allowed range of the first one
// (which excludes overlong forms, surrogates and codepoints above U+10FFFF). Example: 0xE0
// needs 2 more bytes and the first must be 0xA0..0xBF (0xE0 0x80..0x9F would be overlong).
struct LeadInfo {
  int num_continuations;  // -1: not a valid lead byte
  uint8_t first_lo = 0x80;
  uint8_t first_hi = 0xBF;
};

LeadInfo InfoForLead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {1};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {2};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1};
}

}  // namespace

size_t AppendCompleteUtf8(std::string_view bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    const LeadInfo info = InfoForLead(b);
    if (info.num_continuations < 0) {
      out->append(kReplacementUtf8);
      ++i;
      continue;
    }
    int j = 1;
    bool invalid = false;
    for (; j <= info.num_continuations && i + j < bytes.size(); ++j) {
      const uint8_t c = static_cast<uint8_t>(bytes[i + j]);
      const uint8_t lo = j == 1 ? info.first_lo : 0x80;
      const uint8_t hi = j == 1 ? info.first_hi : 0xBF;
      if (c < lo || c > hi) {
        invalid = true;
        break;
      }
    }
    if (invalid) {  // bytes [i, i + j) are a maximal invalid subpart
      out->append(kReplacementUtf8);
      i += j;
      continue;
    }
    if (j <= info.num_continuations) return i;  // incomplete: wait for more bytes
    out->append(bytes.substr(i, j));
    i += j;
  }
  return i;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, StreamDecodeOptions options)
    : tokenizer_(tokenizer),
      options_(options),
      strip_pending_(options.strip_leading_space && tokenizer.vocab().add_space_prefix()) {}

std::string StreamDecoder::Push(int32_t id) {
  std::string_view piece = tokenizer_.TokenPiece(id, options_.render_special);
  if (strip_pending_ && id != tokenizer_.vocab().bos_id()) {
    if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    strip_pending_ = false;
  }
  pending_.append(piece);
  std::string out;
  const size_t consumed = AppendCompleteUtf8(pending_, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::Flush() {
  if (pending_.empty()) return {};
  pending_.clear();
  return std::string(kReplacementUtf8);
}

}  // namespace kvserve::tokenizer
