// JSON bodies the server sends: non-streaming responses, SSE chunks, usage and logprobs, in
// OpenAI's shapes (text_completion, chat.completion, chat.completion.chunk).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/protocol.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
nlohmann::json UsageJson(const Usage& usage);

// Builds the bodies of one request. Holds references; lives as long as the request.
class ResponseBuilder {
 public:
  ResponseBuilder(Endpoint endpoint, std::string id, std::string model,
                  const tokenizer::Tokenizer& tokenizer);

  // Logprobs of `tokens`: completions' {tokens, token_logprobs, top_logprobs, text_offset}
  // (offsets count bytes from `text_offset`), chat's {content: [{token, logprob, bytes,
  // top_logprobs}]}.
  nlohmann::json Logprobs(std::span<const engine::TokenOutput> tokens, int64_t text_offset) const;

  // One choice of a non-streaming response.
  nlohmann::json Choice(int index, const std::string& text, const std::string& reasoning,
                        const nlohmann::json& logprobs, engine::FinishReason finish_reason) const;
  nlohmann::json Response(nlohmann::json choices, const Usage& usage) const;

  // One SSE chunk for one choice; `first` adds the chat delta's role.
  nlohmann::json Chunk(int index, const std::string& text, const std::string& reasoning,
                       const nlohmann::json& logprobs,
                       std::optional<engine::FinishReason> finish_reason, bool first) const;
  // The final usage chunk (stream_options.include_usage): no choices.
  nlohmann::json UsageChunk(const Usage& usage) const;

 private:
  nlohmann::json Envelope(const char* object) const;

  Endpoint endpoint_;
  std::string id_;
  std::string model_;
  int64_t created_;
  const tokenizer::Tokenizer& tokenizer_;
};

// json.dump() that replaces invalid UTF-8 (token pieces can be partial characters).
std::string Dump(const nlohmann::json& value);
// "data: {json}\n\n".
std::string SseEvent(const nlohmann::json& value);

}  // namespace kvserve::server
