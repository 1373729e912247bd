// The OpenAI request bodies the server accepts, parsed and validated into one plain struct
// (ParsedRequest) before anything else is touched; bad input becomes an ApiError.
//
// Fields (OpenAI / vLLM names): model, prompt (string, list of strings, token ids or lists
// of token ids), messages, max_tokens / max_completion_tokens, temperature, top_p, top_k,
// min_p, seed, stop (string or list), presence_penalty, frequency_penalty,
// repetition_penalty, logprobs (int for completions, bool for chat) and top_logprobs, n,
// echo, stream, stream_options.include_usage, user, cache_salt, ignore_eos, reasoning_effort
// (chat: low, medium or high, for the harmony template's system preamble).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/sampling_params.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {

enum class Endpoint { kCompletions, kChat };

// Limits checked before any tokenizing or stop-string matching, so a huge prompt or a pile of
// stop strings costs a 400, not CPU time.
struct RequestLimits {
  // Most bytes of one prompt (a text prompt, or chat messages' content added up). 0: the
  // most that could fit, max_model_len x the longest token's byte length (a text longer
  // than that encodes to more than max_model_len tokens whatever the tokenizer does).
  int64_t max_prompt_bytes = 0;
  int64_t max_stop_strings = 64;     // entries of "stop"
  int64_t max_stop_bytes = 4096;     // their bytes added up
};

// What parsing needs from the server. Pointers are non-owning and outlive the parse.
struct ParseContext {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;
  std::string served_model_name;
  RequestLimits limits;  // max_prompt_bytes resolved (> 0)
};

// The prompt byte limit `limits` gives for a model (resolves 0 to the automatic bound).
int64_t MaxPromptBytes(const RequestLimits& limits, int64_t max_model_len,
                       const tokenizer::Tokenizer& tokenizer);

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // One entry per prompt (completions may send several; chat has one). Choice index of the
  // j-th sample of prompt i is i * n + j.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // decoded prompts, for echo
  sampling::SamplingParams params;        // max_tokens already defaulted
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  std::vector<std::string> stop;
  std::string user;
  std::string cache_salt;
};

// Most choices (n x prompts) one request may ask for.
inline constexpr int kMaxChoices = 128;

// Fills `out` from a request body, or returns the error to answer.
std::optional<ApiError> ParseRequest(Endpoint endpoint, const nlohmann::json& body,
                                     const ParseContext& context, ParsedRequest* out);

}  // namespace kvserve::server
