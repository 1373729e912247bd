#include "model/random_vocab.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/check.h"
#include "model/random_weights.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace kvserve::model {
namespace {

using tokenizer::TokenType;
using tokenizer::VocabConfig;

constexpr int64_t kMinVocab = 300;
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁"

// ---- chat templates (Jinja, the families' published formats in short) ----

constexpr std::string_view kLlama3Template =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}";

constexpr std::string_view kChatMlTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Qwen3: ChatML whose past answers (before the last user turn) lose their reasoning.
constexpr std::string_view kQwen3Template =
    "{%- set ns = namespace(last_user=0) %}{%- for message in messages %}{%- if message['role'] "
    "== 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}{%- for message "
    "in messages %}{%- set content = message['content'] %}{%- if message['role'] == 'assistant' "
    "and loop.index0 < ns.last_user and '</think>' in content %}{%- set content = "
    "content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{{- '<|im_start|>' + "
    "message['role'] + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

constexpr std::string_view kPhi3Template =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

// gpt-oss's harmony format (what its published template renders without tools, at reasoning
// effort "medium" and without a date): a system preamble, the request's system message as
// developer instructions, past answers on the final channel, and the assistant's turn opened
// for the model to pick its channel (analysis first, then final).
constexpr std::string_view kHarmonyTemplate =
    "{{ '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n"
    "Knowledge cutoff: 2024-06\\n\\nReasoning: medium\\n\\n# Valid channels: analysis, "
    "commentary, final. Channel must be included for every message.<|end|>' }}{% for message in "
    "messages %}{% if loop.first and message['role'] == 'system' %}{{ '<|start|>developer"
    "<|message|># Instructions\\n\\n' + message['content'] + '\\n\\n<|end|>' }}{% elif "
    "message['role'] == 'assistant' %}{{ '<|start|>assistant<|channel|>final<|message|>' + "
    "message['content'] + '<|end|>' }}{% else %}{{ '<|start|>' + message['role'] + '<|message|>' "
    "+ message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start|>assistant' }}{% endif %}";

// Gemma has no system role: a system message opens the first user turn.
constexpr std::string_view kGemmaTemplate =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] "
    "+ '\\n\\n' %}{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
    "{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else "
    "message['role'] %}{{ '<start_of_turn>' + role + '\\n' + ((system if loop.first else '') + "
    "message['content']) | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<start_of_turn>model\\n' }}{% endif %}";

// ---- byte-level BPE ----

// Grows a BPE vocabulary: tokens and merges, best (rank 0) first.
class BpeBuilder {
 public:
  explicit BpeBuilder(int64_t capacity) : capacity_(capacity) {
    for (int b = 0; b < 256; ++b) AddToken(tokenizer::ByteToGpt2Char(static_cast<uint8_t>(b)));
  }
  bool Full() const { return static_cast<int64_t>(tokens_.size()) >= capacity_; }

  // Adds `text` (plain UTF-8) as a token when the merges so far encode it as exactly two
  // tokens: the merge of those two becomes the next rank.
  void Offer(std::string_view text) {
    if (Full()) return;
    std::vector<std::string> symbols;
    for (const char c : text) symbols.push_back(tokenizer::ByteToGpt2Char(static_cast<uint8_t>(c)));
    if (symbols.size() < 2) return;
    Encode(symbols);
    if (symbols.size() != 2) return;
    const std::string merged = symbols[0] + symbols[1];
    if (ids_.count(merged) != 0) return;
    ranks_.emplace(symbols[0] + " " + symbols[1], static_cast<int32_t>(merges_.size()));
    merges_.push_back(symbols[0] + " " + symbols[1]);
    AddToken(merged);
  }

  std::vector<std::string> TakeTokens() { return std::move(tokens_); }
  std::vector<std::string> TakeMerges() { return std::move(merges_); }

 private:
  void AddToken(const std::string& t) {
    ids_.emplace(t, static_cast<int32_t>(tokens_.size()));
    tokens_.push_back(t);
  }
  // BPE: merge the adjacent pair of lowest rank until none merges.
  void Encode(std::vector<std::string>& s) const {
    while (s.size() > 1) {
      size_t best = 0;
      int32_t best_rank = -1;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const auto it = ranks_.find(s[i] + " " + s[i + 1]);
        if (it != ranks_.end() && (best_rank < 0 || it->second < best_rank)) {
          best = i;
          best_rank = it->second;
        }
      }
      if (best_rank < 0) return;
      s[best] += s[best + 1];
      s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
  }

  int64_t capacity_;
  std::vector<std::string> tokens_;
  std::vector<std::string> merges_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::string, int32_t> ranks_;
};

// Candidate pieces, most useful first: the SPM piece list (model/random_weights.h) read as
// text ("▁" = a leading space), then longer letter runs.
void OfferCandidates(BpeBuilder& b, int64_t vocab_size) {
  const std::vector<std::string> pieces = MakeVocabTokens(std::max<int64_t>(vocab_size, 4096));
  for (size_t i = 3 + 256; i < pieces.size() && !b.Full(); ++i) {
    std::string text = pieces[i];
    if (text.starts_with(kSpmSpace)) text.replace(0, kSpmSpace.size(), 1, ' ');
    // Build the piece up from its prefixes so that each merge has its parts.
    for (size_t n = 2; n <= text.size() && !b.Full(); ++n) b.Offer(text.substr(0, n));
  }
  for (const char* run : {"  ", "    ", "\n\n", " \n", ".\n", "00", "000", "...", "--"})
    b.Offer(run);
  for (int length = 2; length <= 5 && !b.Full(); ++length) {
    std::string s(length, 'a');
    for (int64_t i = 0, n = static_cast<int64_t>(std::pow(26, length)); i < n && !b.Full(); ++i) {
      for (int64_t k = length - 1, rest = i; k >= 0; --k, rest /= 26) s[k] = 'a' + rest % 26;
      b.Offer(s);
      b.Offer(std::string(1, ' ').append(s));
    }
  }
}

struct Special {
  std::string text;
  TokenType type;
};

std::vector<Special> SpecialsOf(VocabFamily family) {
  const TokenType c = TokenType::kControl;
  switch (family) {
    case VocabFamily::kLlama3:
      return {{"<|begin_of_text|>", c},
              {"<|end_of_text|>", c},
              {"<|start_header_id|>", c},
              {"<|end_header_id|>", c},
              {"<|eot_id|>", c}};
    case VocabFamily::kQwen2: return {{"<|endoftext|>", c}, {"<|im_start|>", c}, {"<|im_end|>", c}};
    case VocabFamily::kQwen3:
      return {{"<|endoftext|>", c},
              {"<|im_start|>", c},
              {"<|im_end|>", c},
              {"<think>", TokenType::kUserDefined},
              {"</think>", TokenType::kUserDefined}};
    case VocabFamily::kPhi3:
      return {{"<|endoftext|>", c},    {"<|assistant|>", c},    {"<|placeholder1|>", c},
              {"<|placeholder2|>", c}, {"<|placeholder3|>", c}, {"<|placeholder4|>", c},
              {"<|system|>", c},       {"<|end|>", c},          {"<|placeholder5|>", c},
              {"<|placeholder6|>", c}, {"<|user|>", c}};
    case VocabFamily::kGemma:
      return {{"<pad>", c},           {"<eos>", c},
              {"<bos>", c},           {"<unk>", TokenType::kUnknown},
              {"<start_of_turn>", c}, {"<end_of_turn>", c}};
    case VocabFamily::kGptOss:
      return {{"<|startoftext|>", c}, {"<|endoftext|>", c}, {"<|return|>", c},
              {"<|constrain|>", c},   {"<|channel|>", c},   {"<|start|>", c},
              {"<|end|>", c},         {"<|message|>", c},   {"<|call|>", c}};
    case VocabFamily::kLlamaSpm: return {};
  }
  return {};
}

std::optional<int32_t> IdOf(const VocabConfig& v, std::string_view text) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == text) return static_cast<int32_t>(i);
  }
  return std::nullopt;
}

// Byte-level BPE: bytes, merges, then the family's special tokens at the end.
VocabConfig BpeVocab(VocabFamily family, int64_t vocab_size) {
  const std::vector<Special> specials = SpecialsOf(family);
  BpeBuilder builder(vocab_size - static_cast<int64_t>(specials.size()));
  OfferCandidates(builder, vocab_size);
  CHECK(builder.Full()) << "not enough BPE candidates for " << vocab_size << " tokens";
  VocabConfig v;
  v.type = tokenizer::VocabType::kBpe;
  v.pre = family == VocabFamily::kLlama3   ? "llama-bpe"
          : family == VocabFamily::kGptOss ? "gpt-4o"
                                           : "qwen2";
  v.tokens = builder.TakeTokens();
  v.merges = builder.TakeMerges();
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  for (const Special& s : specials) {
    v.tokens.push_back(s.text);
    v.token_types.push_back(s.type);
  }
  if (family == VocabFamily::kLlama3) {
    v.bos_id = IdOf(v, "<|begin_of_text|>");
    v.eos_id = IdOf(v, "<|eot_id|>");
    v.add_bos = true;
  } else if (family == VocabFamily::kGptOss) {  // as gpt-oss's GGUFs: BOS, EOS, padding
    v.bos_id = IdOf(v, "<|startoftext|>");
    v.eos_id = IdOf(v, "<|return|>");
    v.pad_id = IdOf(v, "<|endoftext|>");
    v.add_bos = false;
  } else {
    v.bos_id = v.pad_id = IdOf(v, "<|endoftext|>");
    v.eos_id = IdOf(v, "<|im_end|>");
    v.add_bos = false;
  }
  v.add_eos = false;
  return v;
}

// SentencePiece: the family's control tokens first (Gemma) or last (Phi-3), byte tokens and
// pieces of MakeVocabTokens, scores falling with the piece's rank.
VocabConfig SpmVocab(VocabFamily family, int64_t vocab_size) {
  const std::vector<Special> specials = SpecialsOf(family);
  const bool gemma = family == VocabFamily::kGemma;
  const int64_t num_specials = static_cast<int64_t>(specials.size());
  // MakeVocabTokens: <unk> <s> </s>, 256 bytes, pieces. Gemma replaces the first three.
  std::vector<std::string> base = MakeVocabTokens(vocab_size - num_specials + (gemma ? 3 : 0));
  VocabConfig v;
  v.type = tokenizer::VocabType::kSpm;
  auto add = [&](std::string text, TokenType type, float score) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
    v.scores.push_back(score);
  };
  if (gemma) {
    for (const Special& s : specials) add(s.text, s.type, 0.0f);
  } else {
    add(base[0], TokenType::kUnknown, 0.0f);
    add(base[1], TokenType::kControl, 0.0f);
    add(base[2], TokenType::kControl, 0.0f);
  }
  for (size_t i = 3; i < base.size(); ++i) {
    const bool byte = i < 3 + 256;
    add(base[i], byte ? TokenType::kByte : TokenType::kNormal,
        byte ? 0.0f : -static_cast<float>(i - 259));
  }
  if (!gemma) {
    for (const Special& s : specials) add(s.text, s.type, 0.0f);
  }
  if (gemma) {
    v.pad_id = 0, v.eos_id = 1, v.bos_id = 2, v.unk_id = 3;
    v.add_space_prefix = false;
  } else {
    v.unk_id = 0, v.bos_id = 1;
    v.eos_id = v.pad_id = IdOf(v, "<|endoftext|>");
  }
  v.add_bos = true;
  v.add_eos = false;
  return v;
}

}  // namespace

std::string_view ChatTemplateOf(VocabFamily family) {
  switch (family) {
    case VocabFamily::kLlama3: return kLlama3Template;
    case VocabFamily::kQwen2: return kChatMlTemplate;
    case VocabFamily::kQwen3: return kQwen3Template;
    case VocabFamily::kPhi3: return kPhi3Template;
    case VocabFamily::kGemma: return kGemmaTemplate;
    case VocabFamily::kGptOss: return kHarmonyTemplate;
    case VocabFamily::kLlamaSpm: return "";
  }
  return "";
}

Status SetRandomVocab(VocabFamily family, int64_t vocab_size, gguf::GgufWriter& writer) {
  if (vocab_size < kMinVocab) {
    return InvalidArgument(
        fmt::format("a vocabulary needs at least {} tokens, got {}", kMinVocab, vocab_size));
  }
  if (family == VocabFamily::kLlamaSpm) {
    SetSpmTokenizer(vocab_size, writer);
    return Status::Ok();
  }
  const bool bpe = family == VocabFamily::kLlama3 || family == VocabFamily::kQwen2 ||
                   family == VocabFamily::kQwen3 || family == VocabFamily::kGptOss;
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const tokenizer::Vocab> vocab,
                      tokenizer::Vocab::FromConfig(bpe ? BpeVocab(family, vocab_size)
                                                       : SpmVocab(family, vocab_size)));
  CHECK_EQ(vocab->num_tokens(), vocab_size);
  tokenizer::WriteVocabMetadata(*vocab, writer);
  writer.Set("tokenizer.chat_template", gguf::Value::Str(std::string(ChatTemplateOf(family))));
  return Status::Ok();
}

}  // namespace kvserve::model
