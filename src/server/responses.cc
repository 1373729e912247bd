#include "server/responses.h"

#include <chrono>

namespace kvserve::server {
namespace {

using json = nlohmann::json;

json Bytes(std::string_view piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseEvent(const json& value) { return "data: " + Dump(value) + "\n\n"; }

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

ResponseBuilder::ResponseBuilder(Endpoint endpoint, std::string id, std::string model,
                                 const tokenizer::Tokenizer& tokenizer)
    : endpoint_(endpoint),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count()),
      tokenizer_(tokenizer) {}

json ResponseBuilder::Logprobs(std::span<const engine::TokenOutput> tokens,
                               int64_t text_offset) const {
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const engine::TokenOutput& t : tokens) {
      const std::string piece(tokenizer_.TokenPiece(t.token));
      json top = json::array();
      for (const sampling::TokenLogprob& alt : t.top_logprobs) {
        const std::string alt_piece(tokenizer_.TokenPiece(alt.token));
        top.push_back({{"token", alt_piece}, {"logprob", alt.logprob}, {"bytes", Bytes(alt_piece)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()},
              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (const engine::TokenOutput& t : tokens) {
    const std::string piece(tokenizer_.TokenPiece(t.token));
    json top = json::object();
    for (const sampling::TokenLogprob& alt : t.top_logprobs) {
      top[std::string(tokenizer_.TokenPiece(alt.token))] = alt.logprob;
    }
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(t.logprob);
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(text_offset);
    text_offset += static_cast<int64_t>(piece.size());
  }
  return out;
}

json ResponseBuilder::Envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ResponseBuilder::Choice(int index, const std::string& text, const std::string& reasoning,
                             const json& logprobs, engine::FinishReason finish_reason) const {
  json choice = {{"index", index},
                 {"logprobs", logprobs},
                 {"finish_reason", scheduler::FinishReasonName(finish_reason)}};
  if (endpoint_ == Endpoint::kCompletions) {
    choice["text"] = text;
    return choice;
  }
  json message = {{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  choice["message"] = message;
  return choice;
}

json ResponseBuilder::Response(json choices, const Usage& usage) const {
  json r = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion");
  r["choices"] = std::move(choices);
  r["usage"] = UsageJson(usage);
  return r;
}

json ResponseBuilder::Chunk(int index, const std::string& text, const std::string& reasoning,
                            const json& logprobs, std::optional<engine::FinishReason> finish_reason,
                            bool first) const {
  json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  if (finish_reason) choice["finish_reason"] = scheduler::FinishReasonName(*finish_reason);
  json r;
  if (endpoint_ == Endpoint::kCompletions) {
    choice["text"] = text;
    r = Envelope("text_completion");
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && reasoning.empty())) delta["content"] = text;
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    choice["delta"] = delta;
    r = Envelope("chat.completion.chunk");
  }
  r["choices"] = json::array({choice});
  return r;
}

json ResponseBuilder::UsageChunk(const Usage& usage) const {
  json r = Envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = UsageJson(usage);
  return r;
}

}  // namespace kvserve::server
