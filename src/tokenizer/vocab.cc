#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/unicode.h"

namespace kvserve::tokenizer {
namespace {

// Texts llama.cpp takes as the EOT token when the metadata names none (first found wins).
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
// Texts that end generation whatever the metadata says; they are forced to control type.
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<｜end▁of▁sentence｜>",
                                          "[e~["};
// Fill-in-the-middle tokens: forced to control type (the pad/repo/file-separator ones also end
// generation).
constexpr std::string_view kFimTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>",  "<SUF>", "▁<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>",   "<MID>", "▁<MID>"};
constexpr std::string_view kFimEogTexts[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>"};

uint32_t AttrFromType(TokenType type) {
  switch (type) {
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
    case TokenType::kUndefined: return kAttrUndefined;
  }
  return kAttrUndefined;
}

// "▁" (U+2581), SentencePiece's escaped space.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Result<std::shared_ptr<const Vocab>> Vocab::FromConfig(VocabConfig config) {
  std::shared_ptr<Vocab> vocab(new Vocab(std::move(config)));
  KV_RETURN_IF_ERROR(vocab->Init());
  return std::shared_ptr<const Vocab>(std::move(vocab));
}

Status Vocab::Init() {
  const size_t n = config_.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("too many tokens");
  if (!config_.scores.empty() && config_.scores.size() != n) {
    return InvalidArgument("tokenizer.ggml.scores has " + std::to_string(config_.scores.size()) +
                           " entries for " + std::to_string(n) + " tokens");
  }
  if (!config_.token_types.empty() && config_.token_types.size() != n) {
    return InvalidArgument("tokenizer.ggml.token_type has " +
                           std::to_string(config_.token_types.size()) + " entries for " +
                           std::to_string(n) + " tokens");
  }
  KV_RETURN_IF_ERROR(InitTypeDefaults());
  for (size_t i = 0; i < n; ++i) {
    std::string& text = config_.tokens[i];
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp does
  }
  const std::vector<int32_t> duplicates = token_to_id_.Build(config_.tokens);
  if (!duplicates.empty()) {
    const std::string& text = config_.tokens[duplicates[0]];
    return InvalidArgument("duplicate token '" + text + "' at ids " +
                           std::to_string(*token_to_id_.Find(text)) + " and " +
                           std::to_string(duplicates[0]));
  }
  // A repeated merge keeps its first (best) rank, as in llama.cpp.
  if (config_.type == VocabType::kBpe) (void)merge_to_rank_.Build(config_.merges);
  KV_RETURN_IF_ERROR(InitSpecialIds());
  InitAttrs();
  InitPieces();
  return Status::Ok();
}

// Defaults by tokenizer model and pre-tokenizer (llama_vocab::impl::load).
Status Vocab::InitTypeDefaults() {
  if (config_.type == VocabType::kSpm) {
    bos_id_ = 1, eos_id_ = 2, unk_id_ = 0;
    add_bos_ = true;
    add_space_prefix_ = true;
  } else {
    KV_ASSIGN_OR_RETURN(pre_, ParsePreTokenizer(config_.pre));
    // llama.cpp defaults BPE BOS/EOS to id 11 (a Falcon leftover); we default to none.
    clean_spaces_ = true;
    switch (pre_) {
      case PreTokenizerKind::kLlama3:
        ignore_merges_ = true;
        add_bos_ = true;
        break;
      case PreTokenizerKind::kDeepseekLlm:
      case PreTokenizerKind::kDeepseekCoder:
      case PreTokenizerKind::kQwen2: clean_spaces_ = false; break;
      default: break;
    }
    if (config_.merges.empty()) return InvalidArgument("BPE vocab without tokenizer.ggml.merges");
  }
  if (config_.add_space_prefix) add_space_prefix_ = *config_.add_space_prefix;
  return Status::Ok();
}

Status Vocab::InitSpecialIds() {
  auto resolve = [&](std::optional<int32_t>& id, const std::optional<int32_t>& given) {
    if (id && !IsValid(*id)) id.reset();       // a default beyond the vocab is disabled
    if (given && IsValid(*given)) id = given;  // an out-of-range value keeps the default
  };
  resolve(bos_id_, config_.bos_id);
  resolve(eos_id_, config_.eos_id);
  resolve(unk_id_, config_.unk_id);
  resolve(pad_id_, config_.pad_id);
  resolve(eot_id_, config_.eot_id);
  if (config_.add_bos) add_bos_ = *config_.add_bos;
  if (config_.add_eos) add_eos_ = *config_.add_eos;
  if (add_bos_ && !bos_id_) {
    return InvalidArgument("tokenizer.ggml.add_bos_token is true but there is no BOS token");
  }
  if (add_eos_ && !eos_id_) {
    return InvalidArgument("tokenizer.ggml.add_eos_token is true but there is no EOS token");
  }
  return Status::Ok();
}

void Vocab::InitAttrs() {
  const int32_t n = num_tokens();
  attrs_.assign(n, kAttrNormal);
  if (!config_.token_types.empty()) {
    for (int32_t i = 0; i < n; ++i) attrs_[i] = AttrFromType(config_.token_types[i]);
  }
  std::vector<int32_t> eog;
  auto force_control = [&](std::string_view text, bool end_of_generation) {
    const std::optional<int32_t> id = FindToken(text);
    if (!id) return id;
    attrs_[*id] |= kAttrControl;
    if (end_of_generation) eog.push_back(*id);
    return id;
  };
  for (std::string_view text : kEotTexts) {
    if (eot_id_) break;
    eot_id_ = force_control(text, false);
  }
  for (std::string_view text : kFimTexts) force_control(text, false);
  for (std::string_view text : kFimEogTexts) force_control(text, true);
  for (std::string_view text : kEogTexts) force_control(text, true);
  if (eos_id_) eog.push_back(*eos_id_);
  if (eot_id_) eog.push_back(*eot_id_);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = std::move(eog);

  for (int32_t i = 0; i < n; ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens_.push_back(i);
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int32_t a, int32_t b) { return TokenText(a).size() > TokenText(b).size(); });

  // Phi-3: special tokens (and "</s>") swallow the whitespace after them.
  std::string name = config_.model_name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens_) attrs_[id] |= kAttrRstrip;
    auto set_rstrip = [&](std::string_view text, bool on) {
      if (auto id = FindToken(text))
        attrs_[*id] = on ? (attrs_[*id] | kAttrRstrip) : (attrs_[*id] & ~kAttrRstrip);
    };
    set_rstrip("</s>", true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(text, false);
  }
}

void Vocab::InitPieces() {
  piece_offsets_.reserve(config_.tokens.size() + 1);
  piece_offsets_.push_back(0);
  for (int32_t id = 0; id < num_tokens(); ++id) {
    AppendPiece(id, &piece_bytes_);
    CHECK_LE(piece_bytes_.size(), UINT32_MAX) << "vocabulary pieces exceed 4 GiB";
    piece_offsets_.push_back(static_cast<uint32_t>(piece_bytes_.size()));
  }
}

// llama_vocab::impl::token_to_piece with special = true.
void Vocab::AppendPiece(int32_t id, std::string* out) const {
  const uint32_t attr = attrs_[id];
  const std::string& text = TokenText(id);
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
    out->append(text);
  } else if (attr & kAttrNormal) {
    if (config_.type == VocabType::kSpm) {
      out->append(ReplaceAll(text, kSpmSpace, " "));
      return;
    }
    if (std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7F; })) {
      out->append(text);  // printable ASCII stands for itself (the common case)
      return;
    }
    for (const uint32_t cpt : DecodeUtf8Lossy(text)) {
      if (const std::optional<uint8_t> b = Gpt2CharToByte(cpt)) {
        out->push_back(static_cast<char>(*b));
        continue;
      }
      std::string utf8;
      AppendUtf8(cpt, &utf8);
      out->append("[UNK_BYTE_0x");
      static constexpr char kHex[] = "0123456789abcdef";
      for (const char c : utf8) {
        out->push_back(kHex[static_cast<uint8_t>(c) >> 4]);
        out->push_back(kHex[static_cast<uint8_t>(c) & 15]);
      }
      out->append(text + "]");
    }
  } else if ((attr & kAttrByte) && text.size() == 6 && text.compare(0, 3, "<0x") == 0) {
    const int hi = HexValue(text[3]), lo = HexValue(text[4]);
    if (hi >= 0 && lo >= 0) out->push_back(static_cast<char>(hi * 16 + lo));
  }
  // Unused and undefined tokens render as nothing.
}

const std::string& Vocab::TokenText(int32_t id) const {
  CHECK(IsValid(id)) << "token id " << id;
  return config_.tokens[id];
}

float Vocab::TokenScore(int32_t id) const {
  CHECK(IsValid(id)) << "token id " << id;
  return config_.scores.empty() ? 0.0f : config_.scores[id];
}

uint32_t Vocab::TokenAttrs(int32_t id) const {
  CHECK(IsValid(id)) << "token id " << id;
  return attrs_[id];
}

std::string_view Vocab::Piece(int32_t id) const {
  CHECK(IsValid(id)) << "token id " << id;
  return std::string_view(piece_bytes_)
      .substr(piece_offsets_[id], piece_offsets_[id + 1] - piece_offsets_[id]);
}

bool Vocab::IsEog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::optional<int32_t> Vocab::FindToken(std::string_view text) const {
  return token_to_id_.Find(text);
}

std::optional<int32_t> Vocab::ByteToken(uint8_t byte) const {
  if (config_.type == VocabType::kBpe) return FindToken(ByteToGpt2Char(byte));
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  if (auto id = FindToken(std::string_view(buf, 6))) return id;
  const char raw = static_cast<char>(byte);
  return FindToken(std::string_view(&raw, 1));
}

std::optional<int32_t> Vocab::MergeRank(std::string_view left, std::string_view right) const {
  thread_local std::string key;
  key.assign(left);
  key.push_back(' ');
  key.append(right);
  return merge_to_rank_.Find(key);
}

}  // namespace kvserve::tokenizer
