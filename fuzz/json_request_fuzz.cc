// libFuzzer target: JSON request decoding (server/protocol.h ParseRequest) on arbitrary
// bodies, for both endpoints, with the stories260K tokenizer and a chatml template: every
// input is a parsed request within the limits or an ApiError, never a crash.
// The first byte picks the endpoint; the rest is the body.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "server/protocol.h"

namespace {

struct Context {
  std::unique_ptr<kvserve::gguf::GgufFile> file;
  std::unique_ptr<kvserve::tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<kvserve::tokenizer::ChatTemplate> chat;
  kvserve::server::ParseContext parse;
};

Context* Load() {
  auto* c = new Context();
  const char* path = KVSERVE_SHARED_DIR "/models/stories260K.gguf";
  auto file = kvserve::gguf::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "json_request_fuzz needs %s\n", path);
    std::abort();
  }
  c->file = std::move(*file);
  auto tok = kvserve::tokenizer::Tokenizer::FromGguf(*c->file);
  if (!tok.ok()) std::abort();
  c->tokenizer = std::make_unique<kvserve::tokenizer::Tokenizer>(std::move(*tok));
  c->chat = std::make_unique<kvserve::tokenizer::ChatTemplate>(
      kvserve::tokenizer::ChatTemplateFamily::kChatMl, "<s>", "</s>");
  c->parse = {c->tokenizer.get(), c->chat.get(), "stories", {}};
  c->parse.limits.max_prompt_bytes = kvserve::server::MaxPromptBytes({}, 512, *c->tokenizer);
  return c;
}

Context* context = nullptr;

}  // namespace

// Loads the model's tokenizer once, before the clock of the first input starts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  context = Load();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace kvserve::server;
  const Endpoint endpoint = data[0] & 1 ? Endpoint::kChat : Endpoint::kCompletions;
  nlohmann::json body = nlohmann::json::parse(data + 1, data + size, nullptr, false);
  if (body.is_discarded()) return 0;
  ParsedRequest parsed;
  if (std::optional<ApiError> e = ParseRequest(endpoint, body, context->parse, &parsed)) {
    if (e->http_status < 400 || e->http_status > 599) __builtin_trap();
    return 0;
  }
  // Accepted: within every limit (lengths against max-model-len are the engine's to check).
  if (parsed.prompts.empty() || parsed.n < 1 ||
      static_cast<int64_t>(parsed.stop.size()) > context->parse.limits.max_stop_strings) {
    __builtin_trap();
  }
  for (const auto& p : parsed.prompts) {
    for (int32_t id : p) {
      if (!context->tokenizer->vocab().IsValid(id)) __builtin_trap();
    }
  }
  return 0;
}
