// The two merge algorithms behind Tokenizer::Encode, applied to one run of plain text (special
// tokens already split out). Internal to the tokenizer module.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve::tokenizer {

// SentencePiece-style BPE (llama.cpp llm_tokenizer_spm): `text` already has spaces escaped to
// U+2581. Splits into UTF-8 characters, repeatedly merges the adjacent pair whose
// concatenation is the best-scoring vocab token (ties: leftmost), then emits each piece's id,
// or its bytes as <0xXX> tokens when the piece is not a token. Appends to `out`.
void SpmEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

// Byte-level BPE (llama.cpp llm_tokenizer_bpe): pre-tokenizes `text` with the vocab's
// pre-tokenizer, then in each word repeatedly merges the adjacent pair with the lowest merge
// rank (ties: leftmost). Appends to `out`.
void BpeEncode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

}  // namespace kvserve::tokenizer
