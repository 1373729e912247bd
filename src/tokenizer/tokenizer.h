// Tokenizer: text <-> token ids for a Vocab, matching llama.cpp's llama_tokenize /
// llama_detokenize / llama_token_to_piece.
//
//   auto tok = Tokenizer::FromGguf(file);              // or Tokenizer(vocab)
//   std::vector<int32_t> ids = tok->Encode("Hello", {.add_special = true});
//   std::string text = tok->Decode(ids);
//
// Thread safety: immutable after construction; every method may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kvserve::gguf {
class GgufFile;
}

namespace kvserve::tokenizer {

struct EncodeOptions {
  // Add BOS / EOS as the vocab's add_bos / add_eos say.
  bool add_special = true;
  // Match control-token texts (e.g. "<|im_end|>") in the input and emit their ids. When false
  // they are tokenized as plain text. User-defined tokens are always matched (as llama.cpp and
  // Hugging Face do).
  bool parse_special = false;
};

struct DecodeOptions {
  // Render control and unknown tokens as their text (else they produce nothing).
  bool render_special = false;
  // Drop the leading BOS / trailing EOS when the vocab adds them.
  bool remove_special = false;
  // SPM with add_space_prefix: remove the space Encode prepended from the first text token
  // (the first token after a leading BOS).
  bool strip_leading_space = true;
  // Undo tokenizer spacing (" ," -> ",", " 's" -> "'s", ...) where the vocab asks for it
  // (GPT-2, StarCoder; llama.cpp's clean_spaces).
  bool clean_spaces = true;
};

class Tokenizer {
 public:
  explicit Tokenizer(std::shared_ptr<const Vocab> vocab);
  static Result<Tokenizer> FromGguf(const gguf::GgufFile& file);

  const Vocab& vocab() const { return *vocab_; }
  const std::shared_ptr<const Vocab>& shared_vocab() const { return vocab_; }

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;

  // The concatenated pieces of `ids` (raw bytes: may be invalid UTF-8 when `ids` ends inside a
  // character; StreamDecoder is the UTF-8-safe path). note: every id must be valid (CHECKed).
  std::string Decode(const std::vector<int32_t>& ids, const DecodeOptions& options = {}) const;

  // The bytes of one token; control and unknown tokens render as their text only when
  // `render_special`. note: id must be valid (CHECKed).
  std::string_view TokenPiece(int32_t id, bool render_special = false) const;

 private:
  struct Fragment {  // a run of text still to tokenize, or an already-matched special token
    std::optional<int32_t> token;
    size_t offset = 0;  // into the input text
    size_t length = 0;
  };
  std::vector<Fragment> SplitSpecialTokens(std::string_view text, bool parse_special) const;
  void SplitOnToken(std::string_view text, int32_t id, std::vector<Fragment>* fragments) const;

  std::shared_ptr<const Vocab> vocab_;
};

}  // namespace kvserve::tokenizer
