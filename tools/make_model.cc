// `kvserve make-model --preset tiny|110m [--type f32|f16|q8_0|q4_0] [--seed N] -o FILE`
#include "tools/make_model.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>

#include <CLI/CLI.hpp>

#include "gguf/gguf.h"
#include "model/v41_random_model.h"
#include "tensor/quant.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁", SentencePiece's word boundary

// Frequent English words and letter pairs, most frequent first: they come right after the
// single letters so even the tiny vocabulary has them.
constexpr std::array kCommonBigrams = {"th", "he", "in", "er", "an", "re", "on", "at", "en",
                                       "nd", "ti", "es", "or", "te", "of", "ed", "is", "it",
                                       "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as",
                                       "ou", "io", "le", "ve", "co", "me", "de", "hi", "ri",
                                       "ro", "ic", "ne", "ea", "ra", "ce", "ll", "ay", "ot"};
constexpr std::array kCommonWords = {
    "the",   "and",  "of",    "to",    "a",     "in",    "is",    "it",   "you",   "that",
    "he",    "was",  "for",   "on",    "are",   "with",  "as",    "I",    "his",   "they",
    "be",    "at",   "one",   "have",  "this",  "from",  "or",    "had",  "by",    "not",
    "word",  "but",  "what",  "some",  "we",    "can",   "out",   "other", "were", "all",
    "there", "when", "up",    "use",   "your",  "how",   "said",  "an",   "each",  "she",
    "which", "do",   "their", "time",  "if",    "will",  "way",   "about", "many", "then",
    "them",  "would", "write", "like", "so",    "these", "her",   "long", "make",  "thing",
    "see",   "him",  "two",   "has",   "look",  "more",  "day",   "could", "go",   "come",
    "did",   "my",   "sound", "no",    "most",  "people", "over", "know", "water", "than",
    "call",  "first", "who",  "may",   "down",  "side",  "been",  "now",  "find",  "any",
    "new",   "work", "part",  "take",  "get",   "place", "made",  "live", "where", "after",
    "back",  "little", "only", "round", "man",  "year",  "came",  "show", "every", "good",
    "me",    "give", "our",   "under", "name",  "very",  "through", "just", "form", "much",
    "great", "think", "say",  "help",  "low",   "line",  "before", "turn", "cause", "same",
    "mean",  "differ", "move", "right", "boy",  "old",   "too",   "does", "tell",  "sentence",
    "set",   "three", "want", "air",   "well",  "also",  "play",  "small", "end",  "put",
    "home",  "read", "hand",  "port",  "large", "spell", "add",   "even", "land",  "here",
    "must",  "big",  "high",  "such",  "follow", "act",  "why",   "ask",  "men",   "change",
    "went",  "light", "kind", "off",   "need",  "house", "picture", "try", "us",   "again",
    "animal", "point", "mother", "world", "near", "build", "self", "earth", "father", "story",
    "once",  "upon", "girl",  "happy", "friend", "play", "sun",   "tree", "dog",   "cat"};
constexpr std::string_view kPunctuation = ".,!?;:'\"-()";

class VocabBuilder {
 public:
  explicit VocabBuilder(int64_t vocab_size) : vocab_size_(vocab_size) {}
  void Add(std::string piece) {
    if (Full() || !seen_.insert(piece).second) return;
    tokens_.push_back(std::move(piece));
  }
  bool Full() const { return static_cast<int64_t>(tokens_.size()) >= vocab_size_; }
  std::vector<std::string> Take() { return std::move(tokens_); }

 private:
  int64_t vocab_size_;
  std::unordered_set<std::string> seen_;
  std::vector<std::string> tokens_;
};

void AddLetterCombinations(VocabBuilder& v, int length) {
  std::string s(length, 'a');
  for (int64_t i = 0, n = static_cast<int64_t>(std::pow(26, length)); i < n && !v.Full(); ++i) {
    for (int64_t k = length - 1, rest = i; k >= 0; --k, rest /= 26) s[k] = 'a' + rest % 26;
    v.Add(s);
  }
  for (int64_t i = 0, n = static_cast<int64_t>(std::pow(26, length)); i < n && !v.Full(); ++i) {
    for (int64_t k = length - 1, rest = i; k >= 0; --k, rest /= 26) s[k] = 'a' + rest % 26;
    v.Add(std::string(kSpace) + s);
  }
}

// splitmix64: a tiny, fast generator; each tensor gets its own stream.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

uint64_t NameHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return h;
}

// `rows` rows of `row_len` values uniform in [-bound, bound), converted to `type`. The stream
// depends on (seed, name) only. Buffer: (rows, RowBytes(type, row_len)) bytes.
std::vector<uint8_t> RandomTensorData(std::string_view name, int64_t row_len, int64_t rows,
                                      float bound, tensor::DType type, uint64_t seed) {
  SplitMix64 rng(seed ^ NameHash(name));
  const int64_t row_bytes = tensor::RowBytes(type, row_len);
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes * rows));
  std::vector<float> row(row_len);  // (row_len)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i + 1 < row_len; i += 2) {  // two 24-bit uniforms per draw
      const uint64_t bits = rng.Next();
      row[i] = bound * (static_cast<float>(bits >> 40) * 0x1.0p-23f - 1.0f);
      row[i + 1] = bound * (static_cast<float>((bits >> 8) & 0xFFFFFF) * 0x1.0p-23f - 1.0f);
    }
    if (row_len % 2 != 0) {
      row[row_len - 1] = bound * (static_cast<float>(rng.Next() >> 40) * 0x1.0p-23f - 1.0f);
    }
    tensor::QuantizeRow(type, row.data(), out.data() + r * row_bytes, row_len);
  }
  return out;
}

// llama.cpp's llama_ftype for a model whose matrices are all `type`.
uint32_t FileType(tensor::DType type) {
  switch (type) {
    case tensor::DType::kF32: return 0;
    case tensor::DType::kF16: return 1;
    case tensor::DType::kQ4_0: return 2;
    case tensor::DType::kQ8_0: return 7;
    default: CHECK(false) << "no llama file type for " << tensor::DTypeName(type);
  }
  return 0;
}

void SetModelMetadata(const LlamaShape& s, tensor::DType type, gguf::GgufWriter& w) {
  using gguf::Value;
  auto u32 = [](int64_t v) { return Value::U32(static_cast<uint32_t>(v)); };
  w.Set("general.architecture", Value::Str("llama"));
  w.Set("general.name", Value::Str("kvserve-random-" + s.name));
  w.Set("general.file_type", Value::U32(FileType(type)));
  if (type == tensor::DType::kQ8_0 || type == tensor::DType::kQ4_0) {
    w.Set("general.quantization_version", Value::U32(2));
  }
  w.Set("llama.vocab_size", u32(s.vocab_size));
  w.Set("llama.context_length", u32(s.context_length));
  w.Set("llama.embedding_length", u32(s.dim));
  w.Set("llama.block_count", u32(s.num_layers));
  w.Set("llama.feed_forward_length", u32(s.ffn_dim));
  w.Set("llama.attention.head_count", u32(s.num_heads));
  w.Set("llama.attention.head_count_kv", u32(s.num_kv_heads));
  w.Set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5f));
  w.Set("llama.rope.freq_base", Value::F32(10000.0f));
  w.Set("llama.rope.dimension_count", u32(s.HeadDim()));
}

// tokenizer.ggml.*: SentencePiece-style ("llama"), scores falling with the piece's rank so
// shorter, more common pieces merge first.
void SetTokenizerMetadata(int64_t vocab_size, gguf::GgufWriter& w) {
  using gguf::Value;
  std::vector<std::string> tokens = MakeVocabTokens(vocab_size);
  std::vector<float> scores(tokens.size(), 0.0f);
  std::vector<int32_t> types(tokens.size(), 1);  // normal
  types[0] = 2;                                  // <unk>: unknown
  types[1] = types[2] = 3;                       // <s>, </s>: control
  for (int i = 3; i < 3 + 256; ++i) types[i] = 6;  // <0xXX>: byte
  for (size_t i = 3 + 256; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  w.Set("tokenizer.ggml.model", Value::Str("llama"));
  w.Set("tokenizer.ggml.tokens", Value::StrArray(tokens));
  w.Set("tokenizer.ggml.scores", Value::F32Array(scores));
  w.Set("tokenizer.ggml.token_type", Value::I32Array(types));
  w.Set("tokenizer.ggml.bos_token_id", Value::U32(1));
  w.Set("tokenizer.ggml.eos_token_id", Value::U32(2));
  w.Set("tokenizer.ggml.unknown_token_id", Value::U32(0));
  w.Set("tokenizer.ggml.add_bos_token", Value::Bool(true));
  w.Set("tokenizer.ggml.add_eos_token", Value::Bool(false));
}

// Weights: matrices uniform with variance 1/fan_in (bound sqrt(3 / fan_in)), so activations
// keep their scale; embeddings with variance 1; the output with variance 4/dim, so logits have
// standard deviation ~2 (peaked, not degenerate); norm weights 1.
Status AddWeights(const LlamaShape& s, tensor::DType type, uint64_t seed, gguf::GgufWriter& w) {
  auto matrix = [&](const std::string& name, int64_t fan_in, int64_t rows, float bound) {
    return w.AddTensor(name, {fan_in, rows}, type,
                       RandomTensorData(name, fan_in, rows, bound, type, seed));
  };
  auto ones = [&](const std::string& name) {
    std::vector<float> v(s.dim, 1.0f);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return w.AddTensor(name, {s.dim}, tensor::DType::kF32, std::move(bytes));
  };
  auto scaled = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  KV_RETURN_IF_ERROR(matrix("token_embd.weight", s.dim, s.vocab_size, std::sqrt(3.0f)));
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    KV_RETURN_IF_ERROR(ones(p + "attn_norm.weight"));
    KV_RETURN_IF_ERROR(matrix(p + "attn_q.weight", s.dim, s.dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(matrix(p + "attn_k.weight", s.dim, s.KvDim(), scaled(s.dim)));
    KV_RETURN_IF_ERROR(matrix(p + "attn_v.weight", s.dim, s.KvDim(), scaled(s.dim)));
    KV_RETURN_IF_ERROR(matrix(p + "attn_output.weight", s.dim, s.dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(ones(p + "ffn_norm.weight"));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", s.dim, s.ffn_dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", s.dim, s.ffn_dim, scaled(s.dim)));
    KV_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", s.ffn_dim, s.dim, scaled(s.ffn_dim)));
  }
  KV_RETURN_IF_ERROR(ones("output_norm.weight"));
  if (s.tied_output) return Status::Ok();
  return matrix("output.weight", s.dim, s.vocab_size, 2.0f * scaled(s.dim));
}

int64_t NumParams(const LlamaShape& s) {
  const int64_t per_layer = 2 * s.dim + 2 * s.dim * s.dim + 2 * s.dim * s.KvDim() +
                            3 * s.dim * s.ffn_dim;
  return (s.tied_output ? 1 : 2) * s.vocab_size * s.dim + s.dim + s.num_layers * per_layer;
}

// --arch kvserve-v41: model/v41_random_model.h's presets, plus the tokenizer when weighted.
Status MakeV41Model(const MakeModelOptions& options) {
  KV_ASSIGN_OR_RETURN(model::V41ModelSpec spec, model::FindV41Preset(options.preset));
  spec.matrix_dtype = options.type;
  spec.seed = options.seed;
  gguf::GgufWriter writer = model::V41ModelWriter(spec);
  writer.Set("general.name", gguf::Value::Str("kvserve-random-" + options.preset));
  if (spec.with_weights) SetTokenizerMetadata(spec.config.vocab_size, writer);
  return writer.Write(options.output_path);
}

}  // namespace

Result<LlamaShape> FindPreset(std::string_view name) {
  if (name == "tiny") return LlamaShape{"tiny", 128, 4, 4, 2, 384, 512, 2048};
  if (name == "110m") return LlamaShape{"110m", 768, 12, 12, 12, 2048, 32000, 32768, true};
  return InvalidArgument(fmt::format("unknown preset '{}' (expected tiny or 110m)", name));
}

std::vector<std::string> MakeVocabTokens(int64_t vocab_size) {
  CHECK_GE(vocab_size, 260);
  VocabBuilder v(vocab_size);
  v.Add("<unk>");
  v.Add("<s>");
  v.Add("</s>");
  for (int b = 0; b < 256; ++b) v.Add(fmt::format("<0x{:02X}>", b));
  v.Add(std::string(kSpace));
  for (char c = 'a'; c <= 'z'; ++c) v.Add(std::string(1, c));
  for (char c = 'a'; c <= 'z'; ++c) v.Add(std::string(kSpace) + c);
  for (const char* bigram : kCommonBigrams) v.Add(bigram);
  for (const char* word : kCommonWords) v.Add(std::string(kSpace) + word);
  for (char c = 'A'; c <= 'Z'; ++c) v.Add(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) v.Add(std::string(kSpace) + c);
  for (char c = '0'; c <= '9'; ++c) v.Add(std::string(1, c));
  for (char c : kPunctuation) v.Add(std::string(1, c));
  for (const char* word : kCommonWords) {
    std::string capital = word;
    capital[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(capital[0])));
    v.Add(std::string(kSpace) + capital);
  }
  for (const char* word : kCommonWords) v.Add(word);
  for (int length = 2; length <= 4 && !v.Full(); ++length) AddLetterCombinations(v, length);
  std::vector<std::string> tokens = v.Take();
  CHECK_EQ(static_cast<int64_t>(tokens.size()), vocab_size);
  return tokens;
}

Status MakeModel(const MakeModelOptions& options) {
  using tensor::DType;
  if (options.arch == model::kV41Architecture) {
    if (options.type != DType::kF32 && options.type != DType::kF16 &&
        options.type != DType::kQ8_0 && options.type != DType::kQ4_0) {
      return InvalidArgument("--type must be one of f32, f16, q8_0, q4_0");
    }
    return MakeV41Model(options);
  }
  if (options.arch != "llama") {
    return InvalidArgument(fmt::format("unknown --arch '{}' (llama, {})", options.arch,
                                       model::kV41Architecture));
  }
  KV_ASSIGN_OR_RETURN(LlamaShape shape, FindPreset(options.preset));
  if (options.type != DType::kF32 && options.type != DType::kF16 &&
      options.type != DType::kQ8_0 && options.type != DType::kQ4_0) {
    return InvalidArgument(fmt::format("--type {} is not one of f32, f16, q8_0, q4_0",
                                       tensor::DTypeName(options.type)));
  }
  gguf::GgufWriter writer;
  SetModelMetadata(shape, options.type, writer);
  SetTokenizerMetadata(shape.vocab_size, writer);
  KV_RETURN_IF_ERROR(AddWeights(shape, options.type, options.seed, writer));
  return writer.Write(options.output_path);
}

void RegisterMakeModel(CLI::App& app) {
  auto options = std::make_shared<MakeModelOptions>();
  auto type_name = std::make_shared<std::string>("f32");
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a GGUF llama model with deterministic random weights and a vocab");
  cmd->add_option("--arch", options->arch, "Architecture")
      ->check(CLI::IsMember({std::string("llama"), std::string(model::kV41Architecture)}))
      ->capture_default_str();
  cmd->add_option("--preset", options->preset,
                  "Model shape: tiny, 110m (llama); mini, v41-flash-shape (kvserve-v41)")
      ->check(CLI::IsMember({"tiny", "110m", "mini", "v41-flash-shape"}))
      ->capture_default_str();
  cmd->add_option("--type", *type_name, "Type of the weight matrices")
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}))
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("-o,--output", options->output_path, "Output .gguf file")->required();
  cmd->callback([options, type_name] {
    options->type = *tensor::DTypeFromName(*type_name);
    const auto start = std::chrono::steady_clock::now();
    if (Status s = MakeModel(*options); !s.ok()) {
      fmt::print(stderr, "error: make-model: {}\n", s.ToString());
      SetExitCode(1);
      return;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options->arch == model::kV41Architecture) {
      fmt::print("wrote {}: {} preset {}, {} matrices, seed {} ({:.2f} s)\n",
                 options->output_path, options->arch, options->preset, *type_name,
                 options->seed, seconds);
      return;
    }
    const LlamaShape shape = *FindPreset(options->preset);
    fmt::print("wrote {}: preset {}, {} matrices, {} parameters, seed {} ({:.2f} s)\n",
               options->output_path, shape.name, *type_name, NumParams(shape), options->seed,
               seconds);
  });
}

}  // namespace kvserve::tools
