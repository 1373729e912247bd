// Vocab: a tokenizer vocabulary as GGUF metadata describes it (tokenizer.ggml.*), with the
// lookup tables the encoders need built once. Rules follow llama.cpp's llama-vocab.cpp.
//
// Metadata keys read (and written by WriteVocabMetadata):
//   tokenizer.ggml.model        "llama" (SentencePiece-style) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre          BPE pre-tokenizer name (see pre_tokenizer.h)
//   tokenizer.ggml.tokens       [string] token texts, id = index
//   tokenizer.ggml.scores       [f32] SPM merge scores (optional)
//   tokenizer.ggml.token_type   [i32] TokenType per token (optional, default normal)
//   tokenizer.ggml.merges       [string] BPE merges "left right", rank = index (BPE only)
//   tokenizer.ggml.{bos,eos,unknown,padding,eot}_token_id   u32 (optional)
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix   bool (optional)
//   general.name                only for llama.cpp's Phi-3 rstrip rule
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/string_index.h"

namespace kvserve::gguf {
class GgufFile;
class GgufWriter;
}  // namespace kvserve::gguf

namespace kvserve::tokenizer {

enum class VocabType { kSpm, kBpe };

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Token attribute bits (llama_token_attr): derived from TokenType, then adjusted by rules that
// recognise tokens by text (e.g. "<|endoftext|>" is always control).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 7,  // eat whitespace before the token when matching it in text
  kAttrRstrip = 1 << 8,  // eat whitespace after it
};

// Everything a vocabulary is made of, as plain data (what GGUF holds, or what code builds).
struct VocabConfig {
  VocabType type = VocabType::kSpm;
  std::string pre;                     // tokenizer.ggml.pre ("" = absent); BPE only
  std::vector<std::string> tokens;     // (num_tokens)
  std::vector<float> scores;           // (num_tokens) or empty = all 0
  std::vector<TokenType> token_types;  // (num_tokens) or empty = all normal
  std::vector<std::string> merges;     // BPE: "left right", best (rank 0) first
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id, eot_id;  // absent = default
  std::optional<bool> add_bos, add_eos, add_space_prefix;         // absent = default
  std::string model_name;                                         // general.name
};

// An immutable vocabulary. Built only through the factories, held by shared_ptr (the lookup
// tables point into its own strings, so it never moves). Thread-safe: all methods are const.
class Vocab {
 public:
  // Reads tokenizer.ggml.* from a GGUF file. Unimplemented for tokenizer models other than
  // "llama"/"gpt2"; InvalidArgument for an unknown pre-tokenizer, duplicate tokens, array
  // length mismatches or missing keys.
  static Result<std::shared_ptr<const Vocab>> FromGguf(const gguf::GgufFile& file);
  static Result<std::shared_ptr<const Vocab>> FromConfig(VocabConfig config);

  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabType type() const { return config_.type; }
  PreTokenizerKind pre_tokenizer() const { return pre_; }
  int32_t num_tokens() const { return static_cast<int32_t>(config_.tokens.size()); }
  bool IsValid(int32_t id) const { return id >= 0 && id < num_tokens(); }

  // note: id must be valid (CHECKed).
  const std::string& TokenText(int32_t id) const;
  float TokenScore(int32_t id) const;
  uint32_t TokenAttrs(int32_t id) const;
  bool IsControl(int32_t id) const { return TokenAttrs(id) & kAttrControl; }
  bool IsByte(int32_t id) const { return TokenAttrs(id) & kAttrByte; }
  bool IsUserDefined(int32_t id) const { return TokenAttrs(id) & kAttrUserDefined; }
  // End of generation: EOS, EOT and tokens llama.cpp recognises by text ("<|im_end|>", ...).
  bool IsEog(int32_t id) const;
  // The bytes token `id` stands for (SPM "▁" -> " ", <0xXX> -> that byte, BPE GPT-2 chars ->
  // bytes). Control and unknown tokens give their text here; Tokenizer hides them by default.
  std::string_view Piece(int32_t id) const;

  std::optional<int32_t> FindToken(std::string_view text) const;
  // SPM: "<0xXX>" (else the raw byte as a token); BPE: the byte's GPT-2 character.
  std::optional<int32_t> ByteToken(uint8_t byte) const;
  // BPE merge rank of (left, right); nullopt when they do not merge.
  std::optional<int32_t> MergeRank(std::string_view left, std::string_view right) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  std::optional<int32_t> eot_id() const { return eot_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_spaces() const { return clean_spaces_; }    // Decode's clean-up default
  bool ignore_merges() const { return ignore_merges_; }  // BPE: whole words in vocab win
  // Control, user-defined and unknown tokens, longest text first: the order Encode matches
  // them in text.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }
  const VocabConfig& config() const { return config_; }

 private:
  explicit Vocab(VocabConfig config) : config_(std::move(config)) {}
  Status Init();
  Status InitTypeDefaults();
  Status InitSpecialIds();
  void InitAttrs();
  void InitPieces();
  void AppendPiece(int32_t id, std::string* out) const;

  VocabConfig config_;
  PreTokenizerKind pre_ = PreTokenizerKind::kDefault;
  std::vector<uint32_t> attrs_;          // (num_tokens) TokenAttr bits
  std::string piece_bytes_;              // all pieces, concatenated
  std::vector<uint32_t> piece_offsets_;  // (num_tokens + 1) piece i = [offsets[i], offsets[i+1])
  StringIndex token_to_id_;              // over config_.tokens
  StringIndex merge_to_rank_;            // over config_.merges ("left right")
  std::vector<int32_t> special_tokens_;
  std::vector<int32_t> eog_ids_;  // sorted
  std::optional<int32_t> bos_id_, eos_id_, unk_id_, pad_id_, eot_id_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  bool ignore_merges_ = false;
};

// Writes the vocabulary's tokenizer.ggml.* keys (resolved special ids and flags included) so
// that Vocab::FromGguf of the written file gives the same tokenizer.
void WriteVocabMetadata(const Vocab& vocab, gguf::GgufWriter& writer);

}  // namespace kvserve::tokenizer
