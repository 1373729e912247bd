// Vocab <-> GGUF metadata (tokenizer.ggml.*).
#include <limits>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace kvserve::tokenizer {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kBosKey = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kEosKey = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kUnkKey = "tokenizer.ggml.unknown_token_id";
constexpr std::string_view kPadKey = "tokenizer.ggml.padding_token_id";
constexpr std::string_view kEotKey = "tokenizer.ggml.eot_token_id";
constexpr std::string_view kAddBosKey = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEosKey = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kAddSpaceKey = "tokenizer.ggml.add_space_prefix";

// An optional token id; values that are not an int32 (e.g. 0xFFFFFFFF for "none") read as
// absent, like llama.cpp's "bad special token, using default".
Result<std::optional<int32_t>> ReadId(const gguf::GgufFile& file, std::string_view key) {
  if (file.Find(key) == nullptr) return std::optional<int32_t>();
  KV_ASSIGN_OR_RETURN(const int64_t v, file.GetInt(key));
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) return std::optional<int32_t>();
  return std::optional<int32_t>(static_cast<int32_t>(v));
}

Result<std::optional<bool>> ReadFlag(const gguf::GgufFile& file, std::string_view key) {
  if (file.Find(key) == nullptr) return std::optional<bool>();
  KV_ASSIGN_OR_RETURN(const bool v, file.GetBool(key));
  return std::optional<bool>(v);
}

Status ReadArrays(const gguf::GgufFile& file, VocabConfig* config) {
  KV_ASSIGN_OR_RETURN(config->tokens, file.GetStringArray(kTokensKey));
  if (file.Find(kScoresKey) != nullptr) {
    KV_ASSIGN_OR_RETURN(const std::vector<double> scores, file.GetFloatArray(kScoresKey));
    config->scores.assign(scores.begin(), scores.end());
  }
  if (file.Find(kTypesKey) != nullptr) {
    KV_ASSIGN_OR_RETURN(const std::vector<int64_t> types, file.GetIntArray(kTypesKey));
    config->token_types.reserve(types.size());
    for (const int64_t t : types) {
      const bool known = t >= 0 && t <= static_cast<int64_t>(TokenType::kByte);
      config->token_types.push_back(known ? static_cast<TokenType>(t) : TokenType::kUndefined);
    }
  }
  if (config->type == VocabType::kBpe) {
    KV_ASSIGN_OR_RETURN(config->merges, file.GetStringArray(kMergesKey));
  }
  return Status::Ok();
}

Result<VocabConfig> ReadConfig(const gguf::GgufFile& file) {
  VocabConfig config;
  KV_ASSIGN_OR_RETURN(const std::string model, file.GetString(kModelKey));
  if (model == "llama") {
    config.type = VocabType::kSpm;
  } else if (model == "gpt2") {
    config.type = VocabType::kBpe;
  } else {
    return Unimplemented("tokenizer model '" + model + "' is not supported (llama, gpt2)");
  }
  KV_ASSIGN_OR_RETURN(config.pre, file.GetStringOr(kPreKey, ""));
  KV_RETURN_IF_ERROR(ReadArrays(file, &config));
  KV_ASSIGN_OR_RETURN(config.bos_id, ReadId(file, kBosKey));
  KV_ASSIGN_OR_RETURN(config.eos_id, ReadId(file, kEosKey));
  KV_ASSIGN_OR_RETURN(config.unk_id, ReadId(file, kUnkKey));
  KV_ASSIGN_OR_RETURN(config.pad_id, ReadId(file, kPadKey));
  KV_ASSIGN_OR_RETURN(config.eot_id, ReadId(file, kEotKey));
  KV_ASSIGN_OR_RETURN(config.add_bos, ReadFlag(file, kAddBosKey));
  KV_ASSIGN_OR_RETURN(config.add_eos, ReadFlag(file, kAddEosKey));
  KV_ASSIGN_OR_RETURN(config.add_space_prefix, ReadFlag(file, kAddSpaceKey));
  KV_ASSIGN_OR_RETURN(config.model_name, file.GetStringOr("general.name", ""));
  return config;
}

}  // namespace

Result<std::shared_ptr<const Vocab>> Vocab::FromGguf(const gguf::GgufFile& file) {
  Result<VocabConfig> config = ReadConfig(file);
  if (!config.ok()) return config.status().WithContext("reading the vocabulary");
  Result<std::shared_ptr<const Vocab>> vocab = FromConfig(std::move(config).value());
  if (!vocab.ok()) return vocab.status().WithContext("reading the vocabulary");
  return vocab;
}

void WriteVocabMetadata(const Vocab& vocab, gguf::GgufWriter& writer) {
  using gguf::Value;
  const VocabConfig& config = vocab.config();
  const bool bpe = vocab.type() == VocabType::kBpe;
  writer.Set(std::string(kModelKey), Value::Str(bpe ? "gpt2" : "llama"));
  if (bpe) {
    writer.Set(std::string(kPreKey),
               Value::Str(config.pre.empty() ? std::string(PreTokenizerName(vocab.pre_tokenizer()))
                                             : config.pre));
  }
  writer.Set(std::string(kTokensKey), Value::StrArray(config.tokens));
  std::vector<float> scores(config.tokens.size(), 0.0f);
  if (!config.scores.empty()) scores = config.scores;
  writer.Set(std::string(kScoresKey), Value::F32Array(scores));
  std::vector<int32_t> types(config.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (size_t i = 0; i < config.token_types.size(); ++i) {
    types[i] = static_cast<int32_t>(config.token_types[i]);
  }
  writer.Set(std::string(kTypesKey), Value::I32Array(types));
  if (bpe) writer.Set(std::string(kMergesKey), Value::StrArray(config.merges));
  auto set_id = [&](std::string_view key, std::optional<int32_t> id) {
    if (id) writer.Set(std::string(key), Value::U32(static_cast<uint32_t>(*id)));
  };
  set_id(kBosKey, vocab.bos_id());
  set_id(kEosKey, vocab.eos_id());
  set_id(kUnkKey, vocab.unk_id());
  set_id(kPadKey, vocab.pad_id());
  set_id(kEotKey, vocab.eot_id());
  writer.Set(std::string(kAddBosKey), Value::Bool(vocab.add_bos()));
  writer.Set(std::string(kAddEosKey), Value::Bool(vocab.add_eos()));
  writer.Set(std::string(kAddSpaceKey), Value::Bool(vocab.add_space_prefix()));
}

}  // namespace kvserve::tokenizer
