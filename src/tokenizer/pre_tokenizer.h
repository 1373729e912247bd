// BPE pre-tokenizers: split text into words before merges, as llama.cpp's
// unicode_regex_split does for each `tokenizer.ggml.pre` type, then byte-encode each word
// with the GPT-2 byte map.
//
// llama.cpp runs a list of regexes per type; each one refines the current partition (its
// matches and the text between them both become pieces). The GPT-2 and Llama-3 regexes are
// hand-written matchers there (with two quirks we keep: `\s+(?!\S)` takes a whole trailing
// whitespace run at the end of a piece, and only a position past the end of the piece counts
// as "no character"); the others run through std::regex on text whose non-ASCII codepoints are
// collapsed to one byte per category. Every regex the supported types use is either one of
// the two hand-written ones or of the form `P?C+`, `C`, `C{3}` or `\s+$` over character
// classes, so we implement exactly those shapes and get the same partition without a regex
// engine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvserve::tokenizer {

enum class PreTokenizerKind {
  kDefault,        // "default" (and a missing key): llama.cpp's fallback regex list
  kGpt2,           // "gpt-2", "phi-2", "jina-es", ...
  kLlama3,         // "llama3", "llama-v3", "llama-bpe", ...
  kQwen2,          // "qwen2", "deepseek-r1-qwen", "megrez"
  kDeepseekLlm,    // "deepseek-llm"
  kDeepseekCoder,  // "deepseek-coder"
  kStarcoder,      // "starcoder", "refact", "command-r", "smollm", ...
  kO200k,          // "gpt-4o": o200k (gpt-oss, GPT-4o), in llama.cpp's ASCII-cased form
};

// Maps a `tokenizer.ggml.pre` value to its kind; "" means absent and gives kDefault (llama.cpp
// warns and does the same). InvalidArgument names an unknown value.
Result<PreTokenizerKind> ParsePreTokenizer(std::string_view name);

// A canonical `tokenizer.ggml.pre` value for `kind` (e.g. kGpt2 -> "gpt-2").
std::string_view PreTokenizerName(PreTokenizerKind kind);

// Splits `text` into pre-tokenizer words, each already byte-encoded (every byte of the word's
// UTF-8 replaced by its GPT-2 character). Invalid UTF-8 bytes become U+FFFD first.
std::vector<std::string> PreTokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace kvserve::tokenizer
