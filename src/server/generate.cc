// Server::HandleGenerate: /v1/completions and /v1/chat/completions, JSON or SSE.
#include <fmt/format.h>
#include <httplib.h>

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
                                bool parse_reasoning) {
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
            std::make_unique<Choice>(tok, engine, std::move(*handle), r.stop, parse_reasoning));
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

// Runs every choice to the end and answers one JSON response.
void RespondWhole(const ParsedRequest& r, Generation& gen, const ResponseBuilder& builder,
                  httplib::Response& res) {
  json choices = json::array();
  Usage usage;
  for (size_t i = 0; i < gen.choices.size(); ++i) {
    const std::string& prompt_text = r.prompt_texts[i / r.n];
    std::string text = r.echo ? prompt_text : "";
    std::string reasoning, error;
    engine::FinishReason finish = engine::FinishReason::kAbort;
    std::vector<engine::TokenOutput> tokens;
    while (std::optional<ChoiceDelta> d = gen.choices[i]->Next(/*block=*/true)) {
      text += d->text;
      reasoning += d->reasoning;
      for (engine::TokenOutput& t : d->tokens) tokens.push_back(std::move(t));
      if (d->finish_reason) finish = *d->finish_reason, error = d->error;
    }
    if (finish == engine::FinishReason::kError) {
      res.status = 500;
      res.set_content(ApiErrorBody({500, error, "InternalServerError", std::nullopt, std::nullopt}),
                      "application/json");
      return;
    }
    const json logprobs = r.params.logprobs
        ? builder.Logprobs(tokens, r.echo ? static_cast<int64_t>(prompt_text.size()) : 0)
        : json(nullptr);
    choices.push_back(builder.Choice(static_cast<int>(i), text, reasoning, logprobs, finish));
  }
  usage = PromptUsage(r, gen);
  for (const auto& c : gen.choices) usage.completion_tokens += c->num_generated();
  res.status = 200;
  res.set_content(Dump(builder.Response(std::move(choices), usage)), "application/json");
}

// The SSE side of one request: writes chunks as the choices produce text.
struct StreamState {
  ParsedRequest request;
  std::unique_ptr<Generation> gen;
  ResponseBuilder builder;
  std::vector<std::vector<engine::TokenOutput>> pending_tokens;  // [choice] not yet sent
  std::vector<int64_t> text_offsets;                             // [choice] bytes sent

  bool Send(httplib::DataSink& sink, const json& chunk) {
    const std::string event = SseEvent(chunk);
    return sink.write(event.data(), event.size());
  }

  // Opening chunks: the chat role, or the echoed prompt.
  bool Open(httplib::DataSink& sink) {
    const size_t n = gen->choices.size();
    pending_tokens.resize(n);
    text_offsets.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const int index = static_cast<int>(i);
      if (request.endpoint == Endpoint::kChat) {
        if (!Send(sink, builder.Chunk(index, "", "", nullptr, std::nullopt, true))) return false;
      } else if (request.echo) {
        const std::string& prompt = request.prompt_texts[i / request.n];
        text_offsets[i] = static_cast<int64_t>(prompt.size());
        if (!Send(sink, builder.Chunk(index, prompt, "", nullptr, std::nullopt, false))) {
          return false;
        }
      }
    }
    return true;
  }

  // One delta as a chunk; tokens whose text is still held back wait for the next one.
  bool SendDelta(httplib::DataSink& sink, size_t i, ChoiceDelta& d) {
    for (engine::TokenOutput& t : d.tokens) pending_tokens[i].push_back(std::move(t));
    if (d.text.empty() && d.reasoning.empty() && !d.finish_reason) return true;
    json logprobs = nullptr;
    if (request.params.logprobs) logprobs = builder.Logprobs(pending_tokens[i], text_offsets[i]);
    pending_tokens[i].clear();
    text_offsets[i] += static_cast<int64_t>(d.text.size());
    return Send(sink, builder.Chunk(static_cast<int>(i), d.text, d.reasoning, logprobs,
                                    d.finish_reason, false));
  }

  // Streams every choice to its end; false when the client went away.
  bool Run(httplib::DataSink& sink) {
    if (!Open(sink)) return false;
    std::vector<std::unique_ptr<Choice>>& choices = gen->choices;
    while (true) {
      size_t first = 0;
      while (first < choices.size() && choices[first]->finished()) ++first;
      if (first == choices.size()) break;
      // Block on the first unfinished choice, then take whatever the others have.
      for (size_t i = first; i < choices.size(); ++i) {
        while (std::optional<ChoiceDelta> d = choices[i]->Next(/*block=*/i == first)) {
          if (!SendDelta(sink, i, *d)) return false;
          if (i == first) break;
        }
      }
    }
    if (request.include_usage) {
      Usage usage = PromptUsage(request, *gen);
      for (const auto& c : choices) usage.completion_tokens += c->num_generated();
      if (!Send(sink, builder.UsageChunk(usage))) return false;
    }
    static constexpr std::string_view kDone = "data: [DONE]\n\n";
    return sink.write(kDone.data(), kDone.size());
  }
};

void SendApiError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.retry_after_s) res.set_header("Retry-After", std::to_string(*error.retry_after_s));
  res.set_content(ApiErrorBody(error), "application/json");
}

}  // namespace

void Server::HandleGenerate(Endpoint endpoint, const httplib::Request& req,
                            httplib::Response& res) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return SendApiError(res, BadRequest("the request body is not valid JSON"));
  ParsedRequest parsed;
  if (std::optional<ApiError> e = ParseRequest(endpoint, body, parse_context_, &parsed)) {
    return SendApiError(res, *e);
  }
  const int64_t num_choices = parsed.n * static_cast<int64_t>(parsed.prompts.size());
  if (!admission_.TryAdmit(num_choices)) {
    ++num_rejected_;
    return SendApiError(res, Overloaded(admission_.draining()
                                            ? "the server is shutting down"
                                            : "too many requests waiting; retry later"));
  }
  auto gen = std::make_unique<Generation>(admission_, num_choices);
  const std::string id = fmt::format("{}-{}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                                     next_request_.fetch_add(1));
  if (std::optional<ApiError> e =
          gen->Start(parsed, id, engine_, tokenizer_, options_.reasoning_parser_deepseek)) {
    return SendApiError(res, *e);
  }
  ResponseBuilder builder(endpoint, id, parsed.model, tokenizer_);
  if (!parsed.stream) return RespondWhole(parsed, *gen, builder, res);

  auto state = std::make_shared<StreamState>(
      StreamState{std::move(parsed), std::move(gen), std::move(builder), {}, {}});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        if (!state->Run(sink)) {
          state->gen.reset();  // the client went away: abort now, free the blocks
          return false;
        }
        sink.done();
        return true;
      },
      [state](bool) { state->gen.reset(); });
}

}  // namespace kvserve::server
