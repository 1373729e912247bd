#include "model/random_weights.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/check.h"
#include "tensor/quant.h"

namespace kvserve::model {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁", SentencePiece's word boundary

// Frequent English words and letter pairs, most frequent first: they come right after the
// single letters so even the tiny vocabulary has them.
constexpr std::array kCommonBigrams = {
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of",
    "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "io", "le",
    "ve", "co", "me", "de", "hi", "ri", "ro", "ic", "ne", "ea", "ra", "ce", "ll", "ay", "ot"};
constexpr std::array kCommonWords = {
    "the",     "and",    "of",    "to",     "a",      "in",       "is",      "it",    "you",
    "that",    "he",     "was",   "for",    "on",     "are",      "with",    "as",    "I",
    "his",     "they",   "be",    "at",     "one",    "have",     "this",    "from",  "or",
    "had",     "by",     "not",   "word",   "but",    "what",     "some",    "we",    "can",
    "out",     "other",  "were",  "all",    "there",  "when",     "up",      "use",   "your",
    "how",     "said",   "an",    "each",   "she",    "which",    "do",      "their", "time",
    "if",      "will",   "way",   "about",  "many",   "then",     "them",    "would", "write",
    "like",    "so",     "these", "her",    "long",   "make",     "thing",   "see",   "him",
    "two",     "has",    "look",  "more",   "day",    "could",    "go",      "come",  "did",
    "my",      "sound",  "no",    "most",   "people", "over",     "know",    "water", "than",
    "call",    "first",  "who",   "may",    "down",   "side",     "been",    "now",   "find",
    "any",     "new",    "work",  "part",   "take",   "get",      "place",   "made",  "live",
    "where",   "after",  "back",  "little", "only",   "round",    "man",     "year",  "came",
    "show",    "every",  "good",  "me",     "give",   "our",      "under",   "name",  "very",
    "through", "just",   "form",  "much",   "great",  "think",    "say",     "help",  "low",
    "line",    "before", "turn",  "cause",  "same",   "mean",     "differ",  "move",  "right",
    "boy",     "old",    "too",   "does",   "tell",   "sentence", "set",     "three", "want",
    "air",     "well",   "also",  "play",   "small",  "end",      "put",     "home",  "read",
    "hand",    "port",   "large", "spell",  "add",    "even",     "land",    "here",  "must",
    "big",     "high",   "such",  "follow", "act",    "why",      "ask",     "men",   "change",
    "went",    "light",  "kind",  "off",    "need",   "house",    "picture", "try",   "us",
    "again",   "animal", "point", "mother", "world",  "near",     "build",   "self",  "earth",
    "father",  "story",  "once",  "upon",   "girl",   "happy",    "friend",  "play",  "sun",
    "tree",    "dog",    "cat"};
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

}  // namespace

Status RandomTensorWriter::Matrix(const std::string& name, int64_t fan_in, int64_t rows,
                                  float bound) {
  if (options_.list_only) {
    options_.list_only(name, {fan_in, rows});
    return Status::Ok();
  }
  const tensor::DType type = options_.TypeOf(name, fan_in, rows);
  return writer_.AddTensor(name, {fan_in, rows}, type,
                           RandomTensorData(name, fan_in, rows, bound, type, options_.seed));
}

Status RandomTensorWriter::Stacked(const std::string& name, int64_t fan_in, int64_t rows,
                                   int64_t count, float bound) {
  const tensor::DType type = options_.TypeOf(name, fan_in, rows);
  return writer_.AddTensor(
      name, {fan_in, rows, count}, type,
      RandomTensorData(name, fan_in, rows * count, bound, type, options_.seed));
}

Status RandomTensorWriter::Bias(const std::string& name, int64_t n, float bound) {
  return writer_.AddTensor(name, {n}, tensor::DType::kF32,
                           RandomTensorData(name, n, 1, bound, tensor::DType::kF32, options_.seed));
}

Status RandomTensorWriter::Norm(const std::string& name, int64_t n) {
  if (options_.list_only) {
    options_.list_only(name, {n});
    return Status::Ok();
  }
  SplitMix64 rng(options_.seed ^ NameHash(name));
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float v = 1.0f;
    if (options_.norm_spread != 0.0f) {
      v += options_.norm_spread * (static_cast<float>(rng.Next() >> 40) * 0x1.0p-23f - 1.0f);
    }
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  return writer_.AddTensor(name, {n}, tensor::DType::kF32, std::move(bytes));
}

Status RandomTensorWriter::Vector(const std::string& name, int64_t n, float bound) {
  std::vector<uint8_t> bytes =
      RandomTensorData(name, n, 1, bound, tensor::DType::kF32, options_.seed);
  return writer_.AddTensor(name, {n}, tensor::DType::kF32, std::move(bytes));
}

uint32_t LlamaFileType(tensor::DType type) {
  switch (type) {
    case tensor::DType::kF32: return 0;
    case tensor::DType::kF16: return 1;
    case tensor::DType::kQ4_0: return 2;
    case tensor::DType::kQ8_0: return 7;
    case tensor::DType::kBF16: return 32;
    default: CHECK(false) << "no llama file type for " << tensor::DTypeName(type);
  }
  return 0;
}

// tokenizer.ggml.*: SentencePiece-style ("llama"), scores falling with the piece's rank so
// shorter, more common pieces merge first.
void SetSpmTokenizer(int64_t vocab_size, gguf::GgufWriter& w) {
  using gguf::Value;
  std::vector<std::string> tokens = MakeVocabTokens(vocab_size);
  std::vector<float> scores(tokens.size(), 0.0f);
  std::vector<int32_t> types(tokens.size(), 1);    // normal
  types[0] = 2;                                    // <unk>: unknown
  types[1] = types[2] = 3;                         // <s>, </s>: control
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

}  // namespace kvserve::model
