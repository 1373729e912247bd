#include "tokenizer/tokenizer.h"

#include "gguf/gguf.h"
#include "tokenizer/merge_encoders.h"

namespace kvserve::tokenizer {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// SentencePiece's space escape: ' ' -> U+2581.
std::string EscapeSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// llama.cpp's clean_up_tokenization_spaces, in place, pass by pass:
//   " ?" " !" " ." " ,"  -> drop the space
//   " ' "                -> "'"
//   " 's" " 'm" " 're" " 've" -> drop the space (" 't", " 'd", " 'll" stay)
void CleanSpaces(std::string& text) {
  size_t total = text.size();
  const size_t total1 = total;  // pass 1
  total = total ? 1 : 0;
  for (size_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    text[total++] = x;
  }
  const size_t total2 = total;  // pass 2
  total = total ? 1 : 0;
  for (size_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      --total;
      text[++i] = '\0';
    }
    text[total++] = x;
  }
  const size_t total3 = total;  // pass 3
  total = total ? 1 : 0;
  for (size_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    text[total++] = x;
  }
  text.resize(total);
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {
  CHECK(vocab_ != nullptr);
}

Result<Tokenizer> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const Vocab> vocab, Vocab::FromGguf(file));
  return Tokenizer(std::move(vocab));
}

std::string_view Tokenizer::TokenPiece(int32_t id, bool render_special) const {
  if (!render_special && (vocab_->TokenAttrs(id) & (kAttrControl | kAttrUnknown))) return {};
  return vocab_->Piece(id);
}

// Splits every text fragment at each occurrence of token `id`'s text (llama.cpp's
// tokenizer_st_partition for one token). Example with "<s>": fragment "a<s>b" becomes
// "a" | <s> | "b". Lstrip/rstrip tokens also swallow the ASCII whitespace next to them.
void Tokenizer::SplitOnToken(std::string_view text, int32_t id,
                             std::vector<Fragment>* fragments) const {
  const std::string& needle = vocab_->TokenText(id);
  const uint32_t attrs = vocab_->TokenAttrs(id);
  // Most special tokens occur nowhere in the text (Llama 3 has 256): leave the fragments
  // untouched then, without copying them. An empty token text (a malformed vocabulary) never
  // matches: it would split every position forever.
  if (needle.empty()) return;
  bool occurs = false;
  for (const Fragment& f : *fragments) {
    if (!f.token && text.substr(f.offset, f.length).find(needle) != std::string_view::npos) {
      occurs = true;
      break;
    }
  }
  if (!occurs) return;
  std::vector<Fragment> out;
  out.reserve(fragments->size());
  for (const Fragment& f : *fragments) {
    if (f.token) {
      out.push_back(f);
      continue;
    }
    size_t base = f.offset;
    size_t len = f.length;
    while (len > 0) {
      const size_t match = text.substr(0, base + len).find(needle, base);
      if (match == std::string_view::npos) {
        out.push_back(Fragment{std::nullopt, base, len});
        break;
      }
      size_t left_len = match - base;
      if (attrs & kAttrLstrip) {
        while (left_len > 0 && IsAsciiSpace(text[base + left_len - 1])) --left_len;
      }
      if (left_len > 0) out.push_back(Fragment{std::nullopt, base, left_len});
      out.push_back(Fragment{id, 0, 0});
      size_t right = match + needle.size();
      size_t right_len = base + len - right;
      if (attrs & kAttrRstrip) {
        while (right_len > 0 && IsAsciiSpace(text[right])) ++right, --right_len;
      }
      base = right;
      len = right_len;
    }
  }
  *fragments = std::move(out);
}

std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecialTokens(std::string_view text,
                                                               bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{std::nullopt, 0, text.size()});
  for (const int32_t id : vocab_->special_tokens()) {
    // Control and unknown tokens only with parse_special; user-defined ones always.
    if (!parse_special && (vocab_->TokenAttrs(id) & (kAttrControl | kAttrUnknown))) continue;
    SplitOnToken(text, id, &fragments);
  }
  return fragments;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special && v.add_bos()) out.push_back(*v.bos_id());
  const std::vector<Fragment> fragments = SplitSpecialTokens(text, options.parse_special);
  bool prev_special = true;  // SPM: the first text run, and each one after a special token,
                             // gets the space prefix
  for (const Fragment& f : fragments) {
    if (f.token) {
      out.push_back(*f.token);
      prev_special = true;
      continue;
    }
    const std::string_view run = text.substr(f.offset, f.length);
    if (v.type() == VocabType::kSpm) {
      std::string escaped = v.add_space_prefix() && prev_special ? EscapeSpaces(" ") : "";
      escaped += EscapeSpaces(run);
      SpmEncode(v, escaped, &out);
    } else {
      BpeEncode(v, run, &out);
    }
    prev_special = false;
  }
  if (options.add_special && v.add_eos()) out.push_back(*v.eos_id());
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, const DecodeOptions& options) const {
  const Vocab& v = *vocab_;
  size_t begin = 0;
  size_t end = ids.size();
  if (options.remove_special && v.add_bos() && end > 0 && ids[0] == v.bos_id()) ++begin;
  if (options.remove_special && v.add_eos() && end > begin && ids[end - 1] == v.eos_id()) --end;
  bool strip = options.strip_leading_space && v.add_space_prefix();
  std::string text;
  for (size_t i = begin; i < end; ++i) {
    std::string_view piece = TokenPiece(ids[i], options.render_special);
    if (strip) {
      if (i == 0 && ids[i] == v.bos_id()) {
        text.append(piece);
        continue;  // strip the token after the BOS instead
      }
      if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
      strip = false;
    }
    text.append(piece);
  }
  if (options.clean_spaces && v.clean_spaces()) CleanSpaces(text);
  return text;
}

}  // namespace kvserve::tokenizer
