// Vocabularies and chat templates for random-weight models: each family's tokenizer kind with
// made-up pieces, so `make-model` files tokenize and chat like the family's real GGUFs (what
// llama.cpp reads from tokenizer.ggml.* and tokenizer.chat_template) without any download.
//
//   kLlamaSpm  SentencePiece ("llama"): <unk> <s> </s>, byte tokens, pieces (Llama 2, TinyStories)
//   kLlama3    byte-level BPE, pre-tokenizer "llama-bpe", <|begin_of_text|> ... <|eot_id|>,
//              Llama 3 chat template
//   kQwen2     byte-level BPE, pre-tokenizer "qwen2", <|endoftext|> <|im_start|> <|im_end|>
//              (and Qwen3's <think> </think>), ChatML template
//   kPhi3      SentencePiece with Phi-3's <|endoftext|> <|assistant|> <|system|> <|end|>
//              <|user|>..., Phi-3 chat template
//   kGemma     SentencePiece without a space prefix, <pad> <eos> <bos> <unk> <start_of_turn>
//              <end_of_turn>, Gemma chat template
//   kGptOss    byte-level BPE, pre-tokenizer "gpt-4o" (o200k), gpt-oss's harmony specials
//              <|startoftext|> <|endoftext|> <|return|> <|constrain|> <|channel|> <|start|>
//              <|end|> <|message|> <|call|> (EOS <|return|>), a harmony chat template
//
// BPE vocabularies are built the way BPE is trained: after the 256 byte tokens, each candidate
// piece (common words with and without a leading space, letter pairs, triples, ...) that the
// merges so far encode as exactly two tokens gets the merge of those two, so every token is
// reachable by tokenizing its own text. The same arguments always give the same vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kvserve::model {

enum class VocabFamily { kLlamaSpm, kLlama3, kQwen2, kQwen3, kPhi3, kGemma, kGptOss };

// Writes tokenizer.ggml.* for a vocabulary of exactly `vocab_size` tokens of `family`, and
// tokenizer.chat_template (none for kLlamaSpm). InvalidArgument when vocab_size is too small
// for the family's byte and special tokens (< 300).
Status SetRandomVocab(VocabFamily family, int64_t vocab_size, gguf::GgufWriter& writer);

// The chat template make-model writes for `family` (Jinja; empty for kLlamaSpm).
std::string_view ChatTemplateOf(VocabFamily family);

}  // namespace kvserve::model
