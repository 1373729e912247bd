// Server::HandleGenerate: /v1/completions and /v1/chat/completions, JSON or SSE.
//
// The handler (on a worker thread) parses, admits and starts the engine requests, then hands
// the HTTP server a producer: the engine wakes it after each output and it turns whatever is
// ready into SSE chunks (streamed) or, at the end, one JSON response (deferred). No thread
// waits on a request; a client that goes away destroys the producer, which aborts the rest.
#include <fmt/format.h>

#include "core/log.h"
#include "server/choice.h"
#include "server/responses.h"
#include "server/server.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

// One request's choices and its admission slot; destroying it aborts every unfinished choice
// and gives the slot back.
class Generation {
 public:
  Generation(Admission& admission, int64_t num_admitted)
      : admission_(admission), num_admitted_(num_admitted) {}
  ~Generation() {
    choices.clear();  // aborts the unfinished ones
    for (engine::RequestId id : ids_) admission_.Untrack(id);
    admission_.Release(num_admitted_);
  }

  // Adds one engine request per (prompt, sample); the error to answer when one is refused.
  std::optional<ApiError> Start(const ParsedRequest& r, const std::string& request_id,
                                engine::AsyncEngine& engine, const tokenizer::Tokenizer& tok,
                                ReasoningFormat reasoning) {
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      for (int j = 0; j < r.n; ++j) {
        engine::EngineRequest er{r.prompts[i], r.params,
                                 fmt::format("{}-{}", request_id, choices.size()), r.cache_salt};
        if (r.params.seed) er.params.seed = *r.params.seed + static_cast<uint64_t>(j);
        Result<engine::RequestHandle> handle = engine.AddRequest(std::move(er));
        if (!handle.ok()) return ApiErrorFromStatus(handle.status());
        ids_.push_back(handle->id);
        admission_.Track(handle->id);
        choices.push_back(
            std::make_unique<Choice>(tok, engine, std::move(*handle), r.stop, reasoning));
      }
    }
    return std::nullopt;
  }

  std::vector<std::unique_ptr<Choice>> choices;  // index = prompt * n + sample

 private:
  Admission& admission_;
  const int64_t num_admitted_;
  std::vector<engine::RequestId> ids_;
};

// Prompt tokens of every prompt; cached tokens as the first choice of each prompt saw them
// (its n - 1 siblings share the same prompt blocks).
Usage PromptUsage(const ParsedRequest& r, const Generation& gen) {
  Usage usage;
  for (const std::vector<int32_t>& p : r.prompts) usage.prompt_tokens += static_cast<int64_t>(p.size());
  for (size_t i = 0; i < gen.choices.size(); i += r.n) {
    usage.cached_tokens += gen.choices[i]->num_cached_tokens();
  }
  return usage;
}

// One choice's output so far (deferred responses).
struct WholeChoice {
  std::string text, reasoning, error;
  engine::FinishReason finish = engine::FinishReason::kAbort;
  std::vector<engine::TokenOutput> tokens;
};

// The producer of one generation request's response.
class GenerationProducer : public http::Producer {
 public:
  GenerationProducer(ParsedRequest request, std::unique_ptr<Generation> gen,
                     ResponseBuilder builder)
      : request_(std::move(request)), gen_(std::move(gen)), builder_(std::move(builder)) {}

  void Start(std::function<void()> wake) override {
    for (const std::unique_ptr<Choice>& c : gen_->choices) c->Listen(wake);
  }

  bool Pull(http::Response* response) override {
    return request_.stream ? PullStream(response->body) : PullWhole(response);
  }

 private:
  bool AllFinished() const {
    for (const auto& c : gen_->choices) {
      if (!c->finished()) return false;
    }
    return true;
  }

  // Deferred: collects every delta; at the end, the whole JSON response.
  bool PullWhole(http::Response* response) {
    const size_t n = gen_->choices.size();
    whole_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      while (std::optional<ChoiceDelta> d = gen_->choices[i]->Next(/*block=*/false)) {
        WholeChoice& w = whole_[i];
        w.text += d->text;
        w.reasoning += d->reasoning;
        for (engine::TokenOutput& t : d->tokens) w.tokens.push_back(std::move(t));
        if (d->finish_reason) w.finish = *d->finish_reason, w.error = d->error;
      }
    }
    if (!AllFinished()) return false;
    json choices = json::array();
    for (size_t i = 0; i < n; ++i) {
      const WholeChoice& w = whole_[i];
      if (w.finish == engine::FinishReason::kError) {
        *response = ErrorResponse({500, w.error, "InternalServerError", std::nullopt,
                                   std::nullopt});
        return true;
      }
      const std::string& prompt_text = request_.prompt_texts[i / request_.n];
      const json logprobs = request_.params.logprobs
          ? builder_.Logprobs(w.tokens, request_.echo ? static_cast<int64_t>(prompt_text.size()) : 0)
          : json(nullptr);
      choices.push_back(builder_.Choice(static_cast<int>(i),
                                        request_.echo ? prompt_text + w.text : w.text,
                                        w.reasoning, logprobs, w.finish));
    }
    Usage usage = PromptUsage(request_, *gen_);
    for (const auto& c : gen_->choices) usage.completion_tokens += c->num_generated();
    *response = http::Response::Text(200, Dump(builder_.Response(std::move(choices), usage)),
                                     "application/json");
    return true;
  }

  void Send(std::string& out, const json& chunk) { out += SseEvent(chunk); }

  // Opening chunks: the chat role, or the echoed prompt.
  void Open(std::string& out) {
    const size_t n = gen_->choices.size();
    pending_tokens_.resize(n);
    text_offsets_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const int index = static_cast<int>(i);
      if (request_.endpoint == Endpoint::kChat) {
        Send(out, builder_.Chunk(index, "", "", nullptr, std::nullopt, true));
      } else if (request_.echo) {
        const std::string& prompt = request_.prompt_texts[i / request_.n];
        text_offsets_[i] = static_cast<int64_t>(prompt.size());
        Send(out, builder_.Chunk(index, prompt, "", nullptr, std::nullopt, false));
      }
    }
  }

  // One delta as a chunk; tokens whose text is still held back wait for the next one.
  void SendDelta(std::string& out, size_t i, ChoiceDelta& d) {
    for (engine::TokenOutput& t : d.tokens) pending_tokens_[i].push_back(std::move(t));
    if (d.text.empty() && d.reasoning.empty() && !d.finish_reason) return;
    json logprobs = nullptr;
    if (request_.params.logprobs) logprobs = builder_.Logprobs(pending_tokens_[i], text_offsets_[i]);
    pending_tokens_[i].clear();
    text_offsets_[i] += static_cast<int64_t>(d.text.size());
    Send(out, builder_.Chunk(static_cast<int>(i), d.text, d.reasoning, logprobs,
                             d.finish_reason, false));
  }

  // Streamed: the chunks of whatever every choice has ready; at the end usage and [DONE].
  bool PullStream(std::string& out) {
    if (!opened_) Open(out), opened_ = true;
    for (size_t i = 0; i < gen_->choices.size(); ++i) {
      while (std::optional<ChoiceDelta> d = gen_->choices[i]->Next(/*block=*/false)) {
        SendDelta(out, i, *d);
      }
    }
    if (!AllFinished()) return false;
    if (request_.include_usage) {
      Usage usage = PromptUsage(request_, *gen_);
      for (const auto& c : gen_->choices) usage.completion_tokens += c->num_generated();
      Send(out, builder_.UsageChunk(usage));
    }
    out += "data: [DONE]\n\n";
    return true;
  }

  ParsedRequest request_;
  std::unique_ptr<Generation> gen_;
  ResponseBuilder builder_;
  bool opened_ = false;
  std::vector<WholeChoice> whole_;                                // [choice]
  std::vector<std::vector<engine::TokenOutput>> pending_tokens_;  // [choice] not yet sent
  std::vector<int64_t> text_offsets_;                             // [choice] bytes sent
};

}  // namespace

http::Response Server::HandleGenerate(Endpoint endpoint, const http::Request& req) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ErrorResponse(BadRequest("the request body is not valid JSON"));
  ParsedRequest parsed;
  if (std::optional<ApiError> e = ParseRequest(endpoint, body, parse_context_, &parsed)) {
    return ErrorResponse(*e);
  }
  const int64_t num_choices = parsed.n * static_cast<int64_t>(parsed.prompts.size());
  if (!admission_.TryAdmit(num_choices)) {
    ++num_rejected_;
    return ErrorResponse(Overloaded(admission_.draining()
                                        ? "the server is shutting down"
                                        : "too many requests waiting; retry later"));
  }
  auto gen = std::make_unique<Generation>(admission_, num_choices);
  const std::string id = fmt::format("{}-{}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                                     next_request_.fetch_add(1));
  if (std::optional<ApiError> e =
          gen->Start(parsed, id, engine_, tokenizer_, options_.reasoning_parser)) {
    return ErrorResponse(*e);
  }
  ResponseBuilder builder(endpoint, id, parsed.model, tokenizer_);
  http::Response response;
  response.streamed = parsed.stream;
  if (parsed.stream) {
    response.content_type = "text/event-stream";
    response.headers.emplace_back("Cache-Control", "no-cache");
  }
  response.producer = std::make_shared<GenerationProducer>(std::move(parsed), std::move(gen),
                                                           std::move(builder));
  return response;
}

}  // namespace kvserve::server
