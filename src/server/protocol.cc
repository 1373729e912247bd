#include "server/protocol.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve::server {
namespace {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

MaybeError GetNumber(const json& body, const char* key, float* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return WrongType(fmt::format("'{}' must be a number", key), key);
  *out = v->get<float>();
  return std::nullopt;
}

MaybeError GetInt(const json& body, const char* key, int64_t* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return WrongType(fmt::format("'{}' must be an integer", key), key);
  *out = v->get<int64_t>();
  return std::nullopt;
}

MaybeError GetBool(const json& body, const char* key, bool* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return WrongType(fmt::format("'{}' must be a boolean", key), key);
  *out = v->get<bool>();
  return std::nullopt;
}

MaybeError GetString(const json& body, const char* key, std::string* out) {
  const json* v = Field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return WrongType(fmt::format("'{}' must be a string", key), key);
  *out = v->get<std::string>();
  return std::nullopt;
}

#define KV_RETURN_IF_API_ERROR(expr)        \
  do {                                      \
    if (MaybeError e_ = (expr)) return e_;  \
  } while (0)

// An integer field within [lo, hi].
MaybeError GetIntInRange(const json& body, const char* key, int64_t lo, int64_t hi,
                         std::optional<int64_t>* out) {
  int64_t value = 0;
  if (!Field(body, key)) return std::nullopt;
  KV_RETURN_IF_API_ERROR(GetInt(body, key, &value));
  if (value < lo || value > hi) {
    return BadRequest(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, value), key);
  }
  *out = value;
  return std::nullopt;
}

MaybeError ParseSampling(const json& body, sampling::SamplingParams* p) {
  KV_RETURN_IF_API_ERROR(GetNumber(body, "temperature", &p->temperature));
  KV_RETURN_IF_API_ERROR(GetNumber(body, "top_p", &p->top_p));
  KV_RETURN_IF_API_ERROR(GetNumber(body, "min_p", &p->min_p));
  KV_RETURN_IF_API_ERROR(GetNumber(body, "presence_penalty", &p->presence_penalty));
  KV_RETURN_IF_API_ERROR(GetNumber(body, "frequency_penalty", &p->frequency_penalty));
  KV_RETURN_IF_API_ERROR(GetNumber(body, "repetition_penalty", &p->repetition_penalty));
  KV_RETURN_IF_API_ERROR(GetBool(body, "ignore_eos", &p->ignore_eos));
  std::optional<int64_t> top_k, seed;
  KV_RETURN_IF_API_ERROR(GetIntInRange(body, "top_k", -1, INT32_MAX, &top_k));
  if (top_k) p->top_k = static_cast<int32_t>(*top_k);
  KV_RETURN_IF_API_ERROR(GetIntInRange(body, "seed", INT64_MIN, INT64_MAX, &seed));
  if (seed) p->seed = static_cast<uint64_t>(*seed);
  return std::nullopt;
}

// "stop": a string or a list of strings, within the count and byte limits (checked before
// anything is copied).
MaybeError ParseStop(const json& body, const RequestLimits& limits,
                     std::vector<std::string>* stop) {
  const json* v = Field(body, "stop");
  if (!v) return std::nullopt;
  const char* kShape = "'stop' must be a string or a list of strings";
  if (!v->is_string() && !v->is_array()) return WrongType(kShape, "stop");
  if (v->is_array() && static_cast<int64_t>(v->size()) > limits.max_stop_strings) {
    return BadRequest(fmt::format("'stop' has {} strings; at most {} are allowed", v->size(),
                                  limits.max_stop_strings), "stop");
  }
  int64_t total_bytes = 0;
  for (const json& s : v->is_array() ? *v : json::array({*v})) {
    if (!s.is_string()) return WrongType(kShape, "stop");
    total_bytes += static_cast<int64_t>(s.get_ref<const std::string&>().size());
  }
  if (total_bytes > limits.max_stop_bytes) {
    return BadRequest(fmt::format("'stop' strings add up to {} bytes; at most {} are allowed",
                                  total_bytes, limits.max_stop_bytes), "stop");
  }
  for (const json& s : v->is_array() ? *v : json::array({*v})) {
    stop->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

MaybeError CheckPromptBytes(int64_t num_bytes, const ParseContext& c) {
  if (num_bytes <= c.limits.max_prompt_bytes) return std::nullopt;
  return BadRequest(fmt::format("The prompt is {} bytes long, over the limit of {} bytes "
                                "(more than fits this model's maximum context length). Please "
                                "reduce the length of the prompt.",
                                num_bytes, c.limits.max_prompt_bytes),
                    "prompt");
}

// max_tokens / max_completion_tokens (the latter wins); completions default to 16 (OpenAI).
MaybeError ParseMaxTokens(Endpoint endpoint, const json& body, sampling::SamplingParams* p) {
  std::optional<int64_t> max_tokens, max_completion_tokens;
  KV_RETURN_IF_API_ERROR(GetIntInRange(body, "max_tokens", 1, INT32_MAX, &max_tokens));
  KV_RETURN_IF_API_ERROR(
      GetIntInRange(body, "max_completion_tokens", 1, INT32_MAX, &max_completion_tokens));
  if (max_completion_tokens) max_tokens = max_completion_tokens;
  if (!max_tokens && endpoint == Endpoint::kCompletions) max_tokens = 16;
  if (max_tokens) p->max_tokens = static_cast<int32_t>(*max_tokens);
  return std::nullopt;
}

// Completions: logprobs = K (0..20). Chat: logprobs = true, top_logprobs = K.
MaybeError ParseLogprobs(Endpoint endpoint, const json& body, sampling::SamplingParams* p) {
  std::optional<int64_t> k;
  if (endpoint == Endpoint::kCompletions) {
    KV_RETURN_IF_API_ERROR(GetIntInRange(body, "logprobs", 0, sampling::kMaxLogprobs, &k));
    if (k) p->logprobs = static_cast<int32_t>(*k);
    return std::nullopt;
  }
  bool logprobs = false;
  KV_RETURN_IF_API_ERROR(GetBool(body, "logprobs", &logprobs));
  KV_RETURN_IF_API_ERROR(GetIntInRange(body, "top_logprobs", 0, sampling::kMaxLogprobs, &k));
  if (k && !logprobs) {
    return BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  }
  if (logprobs) p->logprobs = static_cast<int32_t>(k.value_or(0));
  return std::nullopt;
}

bool IsTokenList(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v) {
    if (!t.is_number_integer()) return false;
  }
  return true;
}

MaybeError AddTokenPrompt(const json& v, const ParseContext& c, ParsedRequest* out) {
  std::vector<int32_t> ids;
  const int64_t vocab = c.tokenizer->vocab().num_tokens();
  for (const json& t : v) {
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return BadRequest(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab),
                        "prompt");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  out->prompt_texts.push_back(c.tokenizer->Decode(ids, {.render_special = true}));
  out->prompts.push_back(std::move(ids));
  return std::nullopt;
}

MaybeError AddTextPrompt(const std::string& text, const ParseContext& c, ParsedRequest* out) {
  KV_RETURN_IF_API_ERROR(CheckPromptBytes(static_cast<int64_t>(text.size()), c));
  out->prompts.push_back(c.tokenizer->Encode(text, {.add_special = true}));
  out->prompt_texts.push_back(text);
  return std::nullopt;
}

MaybeError ParsePrompt(const json& body, const ParseContext& c, ParsedRequest* out) {
  const json* v = Field(body, "prompt");
  if (!v) return BadRequest("'prompt' is required", "prompt");
  const char* kShape = "'prompt' must be a string, a list of strings, a list of token ids or "
                       "a list of lists of token ids";
  if (v->is_string()) {
    KV_RETURN_IF_API_ERROR(AddTextPrompt(v->get<std::string>(), c, out));
  } else if (IsTokenList(*v)) {
    KV_RETURN_IF_API_ERROR(AddTokenPrompt(*v, c, out));
  } else if (v->is_array() && !v->empty()) {
    for (const json& p : *v) {
      if (p.is_string()) {
        KV_RETURN_IF_API_ERROR(AddTextPrompt(p.get<std::string>(), c, out));
      } else if (IsTokenList(p)) {
        KV_RETURN_IF_API_ERROR(AddTokenPrompt(p, c, out));
      } else {
        return WrongType(kShape, "prompt");
      }
    }
  } else {
    return v->is_array() ? BadRequest("'prompt' must not be empty", "prompt")
                         : WrongType(kShape, "prompt");
  }
  return std::nullopt;
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts.
MaybeError MessageContent(const json& m, std::string* out) {
  const json* content = Field(m, "content");
  if (!content) return std::nullopt;  // e.g. an assistant message with tool calls only
  if (content->is_string()) {
    *out = content->get<std::string>();
    return std::nullopt;
  }
  if (!content->is_array()) return WrongType("message content must be a string or a list", "messages");
  for (const json& part : *content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return BadRequest("only text content parts are supported", "messages");
    }
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

// "reasoning_effort" (OpenAI / vLLM): low, medium or high; the harmony template (gpt-oss)
// writes it into its system preamble, the other templates ignore it.
MaybeError ParseChatOptions(const json& body, tokenizer::ChatOptions* options) {
  if (!Field(body, "reasoning_effort")) return std::nullopt;
  KV_RETURN_IF_API_ERROR(GetString(body, "reasoning_effort", &options->reasoning_effort));
  if (!tokenizer::IsReasoningEffort(options->reasoning_effort)) {
    return BadRequest("'reasoning_effort' must be one of 'low', 'medium', 'high'",
                      "reasoning_effort");
  }
  return std::nullopt;
}

MaybeError ParseMessages(const json& body, const ParseContext& c, ParsedRequest* out) {
  tokenizer::ChatOptions options;
  KV_RETURN_IF_API_ERROR(ParseChatOptions(body, &options));
  const json* v = Field(body, "messages");
  if (!v) return BadRequest("'messages' is required", "messages");
  if (!v->is_array()) return WrongType("'messages' must be a list", "messages");
  std::vector<tokenizer::ChatMessage> messages;
  int64_t num_bytes = 0;
  for (const json& m : *v) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return WrongType("each message must be an object with a string 'role'", "messages");
    }
    tokenizer::ChatMessage message{m["role"].get<std::string>(), ""};
    KV_RETURN_IF_API_ERROR(MessageContent(m, &message.content));
    num_bytes += static_cast<int64_t>(message.content.size());
    KV_RETURN_IF_API_ERROR(CheckPromptBytes(num_bytes, c));
    messages.push_back(std::move(message));
  }
  Result<std::string> text =
      c.chat_template->Apply(messages, /*add_generation_prompt=*/true, options);
  if (!text.ok()) return BadRequest(text.status().message(), "messages");
  KV_RETURN_IF_API_ERROR(CheckPromptBytes(static_cast<int64_t>(text->size()), c));
  std::vector<int32_t> ids = c.tokenizer->Encode(*text, {.add_special = false,
                                                         .parse_special = true});
  const tokenizer::Vocab& vocab = c.tokenizer->vocab();
  if (vocab.add_bos() && vocab.bos_id() && (ids.empty() || ids.front() != *vocab.bos_id())) {
    ids.insert(ids.begin(), *vocab.bos_id());  // the template did not render BOS itself
  }
  out->prompt_texts.push_back(*text);
  out->prompts.push_back(std::move(ids));
  return std::nullopt;
}

MaybeError ParseFlags(Endpoint endpoint, const json& body, ParsedRequest* out) {
  KV_RETURN_IF_API_ERROR(GetBool(body, "stream", &out->stream));
  if (const json* opts = Field(body, "stream_options")) {
    if (!opts->is_object()) return WrongType("'stream_options' must be an object", "stream_options");
    KV_RETURN_IF_API_ERROR(GetBool(*opts, "include_usage", &out->include_usage));
  }
  if (endpoint == Endpoint::kCompletions) KV_RETURN_IF_API_ERROR(GetBool(body, "echo", &out->echo));
  KV_RETURN_IF_API_ERROR(GetString(body, "user", &out->user));
  KV_RETURN_IF_API_ERROR(GetString(body, "cache_salt", &out->cache_salt));
  std::optional<int64_t> n;
  KV_RETURN_IF_API_ERROR(GetIntInRange(body, "n", 1, kMaxChoices, &n));
  out->n = static_cast<int>(n.value_or(1));
  return std::nullopt;
}

}  // namespace

int64_t MaxPromptBytes(const RequestLimits& limits, int64_t max_model_len,
                       const tokenizer::Tokenizer& tokenizer) {
  if (limits.max_prompt_bytes > 0) return limits.max_prompt_bytes;
  // Every token stands for at most its piece's bytes (an unknown character: at most 4).
  size_t longest = 4;
  const tokenizer::Vocab& vocab = tokenizer.vocab();
  for (int32_t id = 0; id < vocab.num_tokens(); ++id) longest = std::max(longest, vocab.Piece(id).size());
  return max_model_len * static_cast<int64_t>(longest);
}

std::optional<ApiError> ParseRequest(Endpoint endpoint, const json& body,
                                     const ParseContext& c, ParsedRequest* out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  out->endpoint = endpoint;
  out->model = c.served_model_name;
  KV_RETURN_IF_API_ERROR(GetString(body, "model", &out->model));
  if (out->model != c.served_model_name) return ModelNotFound(out->model);
  KV_RETURN_IF_API_ERROR(ParseSampling(body, &out->params));
  KV_RETURN_IF_API_ERROR(ParseMaxTokens(endpoint, body, &out->params));
  KV_RETURN_IF_API_ERROR(ParseLogprobs(endpoint, body, &out->params));
  KV_RETURN_IF_API_ERROR(ParseStop(body, c.limits, &out->stop));
  KV_RETURN_IF_API_ERROR(ParseFlags(endpoint, body, out));
  KV_RETURN_IF_API_ERROR(endpoint == Endpoint::kChat ? ParseMessages(body, c, out)
                                                     : ParsePrompt(body, c, out));
  if (out->n * static_cast<int64_t>(out->prompts.size()) > kMaxChoices) {
    return BadRequest(fmt::format("n x prompts must be at most {}", kMaxChoices), "n");
  }
  return std::nullopt;  // the engine validates the rest, once (Engine::ValidateRequest)
}

}  // namespace kvserve::server
