// StreamDecoder: turns generated token ids, one at a time, into text deltas that are always
// whole, valid UTF-8 characters. A character whose bytes arrive in several byte tokens (e.g.
// "€" = <0xE2><0x82><0xAC>) is held back until it is complete; bytes that can never form a
// valid character become U+FFFD.
//
//   StreamDecoder dec(tokenizer);
//   for (int32_t id : generated) send(dec.Push(id));
//   send(dec.Flush());
//
// Thread safety: one decoder per stream; not thread-safe. Holds a reference to the Tokenizer,
// which must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {

struct StreamDecodeOptions {
  // Render control tokens (e.g. "<|im_end|>") as their text.
  bool render_special = false;
  // SPM with add_space_prefix: drop the leading space of the first token that is not BOS
  // (use when the stream is a whole text, not a continuation of a prompt).
  bool strip_leading_space = false;
};

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, StreamDecodeOptions options = {});

  // Adds one token; returns the text that became complete (possibly empty).
  // note: id must be valid for the vocabulary (CHECKed).
  std::string Push(int32_t id);
  // Ends the stream: returns U+FFFD if an incomplete character was held back, else "".
  std::string Flush();
  // Bytes held back, waiting for the rest of a character (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  StreamDecodeOptions options_;
  bool strip_pending_;   // the leading space is still to be stripped
  std::string pending_;  // an incomplete UTF-8 sequence's first bytes
};

// Appends the longest prefix of `bytes` made of complete characters to `out`, replacing each
// maximal invalid subsequence with U+FFFD (as the WHATWG / Unicode "best practice" decoders
// do), and returns how many bytes were consumed; the rest (an incomplete but so far valid
// sequence, at most 3 bytes) is left for more input.
size_t AppendCompleteUtf8(std::string_view bytes, std::string* out);

}  // namespace kvserve::tokenizer
