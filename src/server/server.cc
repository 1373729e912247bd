#include "server/server.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "http/http_server.h"
#include "server/kv_dashboard_routes.h"
#include "server/responses.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

http::Response JsonResponse(const json& body) {
  return http::Response::Text(200, Dump(body), "application/json");
}

// The JSON object of a request body, or the 400 to answer.
std::optional<json> ParseBody(const http::Request& req, http::Response* error) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    *error = ErrorResponse(BadRequest("the request body is not valid JSON"));
    return std::nullopt;
  }
  if (!body.is_object()) {
    *error = ErrorResponse(BadRequest("the request body must be a JSON object"));
    return std::nullopt;
  }
  return body;
}

// /tokenize counts long documents too: the prompt limit, but at least 1 MiB.
constexpr int64_t kMinTokenizeBytes = 1 << 20;

}  // namespace

http::Response ErrorResponse(const ApiError& error) {
  http::Response r = http::Response::Text(error.http_status, ApiErrorBody(error),
                                          "application/json");
  if (error.retry_after_s) r.headers.emplace_back("Retry-After", std::to_string(*error.retry_after_s));
  return r;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Walk the longer length whatever the contents; the length difference also counts.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool Admission::TryAdmit(int64_t num_choices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || in_flight_ + num_choices > limit_) return false;
  in_flight_ += num_choices;
  return true;
}

void Admission::Release(int64_t num_choices) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ -= num_choices;
    CHECK(in_flight_ >= 0);
  }
  idle_.notify_all();
}

void Admission::Track(engine::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.insert(id);
}

void Admission::Untrack(engine::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.erase(id);
}

void Admission::StartDraining() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool Admission::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

bool Admission::WaitIdle(std::chrono::duration<double> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, timeout, [&] { return in_flight_ == 0; });
}

std::set<engine::RequestId> Admission::tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ids_;
}

int64_t Admission::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

Server::Server(ServerOptions options, engine::AsyncEngine& engine,
               const tokenizer::Tokenizer& tokenizer, const tokenizer::ChatTemplate& chat_template)
    : options_(std::move(options)),
      engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      parse_context_{&tokenizer_, &chat_template_, options_.served_model_name,
                     options_.request_limits},
      admission_(static_cast<int64_t>(options_.max_num_seqs) + options_.max_waiting_requests),
      dashboard_(std::make_unique<KvDashboard>(
          engine, KvDashboardOptions{
                      .model_name = options_.served_model_name,
                      .max_events_per_s = static_cast<size_t>(
                          std::max(options_.dashboard_events_per_s, 0))})) {
  parse_context_.limits.max_prompt_bytes =
      MaxPromptBytes(options_.request_limits, engine.max_model_len(), tokenizer_);
  RegisterRoutes();
  http::HttpServerOptions http_options;
  http_options.host = options_.host;
  http_options.port = options_.port;
  http_options.limits.max_body_bytes = options_.max_body_bytes;
  http_options.num_worker_threads = std::max(options_.num_http_threads, 1);
  http_options.header_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options_.header_timeout_s * 1000));
  http_options.body_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options_.body_timeout_s * 1000));
  http_options.max_total_body_bytes =
      std::max<size_t>(size_t{1} << 30, 4 * options_.max_body_bytes);
  http_options.error_response = [this](int status, const std::string& message) {
    if (status == 413) return ErrorResponse(PayloadTooLarge(options_.max_body_bytes));
    if (status == 404) return ErrorResponse({404, message, "NotFoundError", std::nullopt,
                                             std::nullopt});
    if (status == 503) return ErrorResponse(Overloaded(message));
    if (status >= 500) return ErrorResponse({status, message, "InternalServerError",
                                             std::nullopt, std::nullopt});
    return ErrorResponse({status, message, "invalid_request_error", std::nullopt,
                          std::nullopt});
  };
  http_ = std::make_unique<http::HttpServer>(std::move(http_options), router_);
}

Server::~Server() = default;

bool Server::Authorized(const http::Request& req) const {
  if (options_.api_key.empty()) return true;
  return ConstantTimeEquals(req.Header("Authorization").value_or(""),
                            "Bearer " + options_.api_key);
}

http::Handler Server::Protected(http::Handler handler) const {
  return [this, handler = std::move(handler)](const http::Request& req) {
    if (!Authorized(req)) return ErrorResponse(Unauthorized());
    return handler(req);
  };
}

void Server::RegisterRoutes() {
  using http::Request;
  using http::Router;
  router_.Add("POST", "/v1/completions", Router::kWorker, Protected([this](const Request& req) {
    return HandleGenerate(Endpoint::kCompletions, req);
  }));
  router_.Add("POST", "/v1/chat/completions", Router::kWorker,
              Protected([this](const Request& req) { return HandleGenerate(Endpoint::kChat, req); }));
  router_.Add("GET", "/v1/models", Router::kInline, Protected([this](const Request&) {
    json model = {{"id", options_.served_model_name}, {"object", "model"}, {"created", 0},
                  {"owned_by", "kvserve"}, {"root", options_.served_model_name},
                  {"max_model_len", engine_.max_model_len()}};
    return JsonResponse({{"object", "list"}, {"data", json::array({model})}});
  }));
  router_.Add("GET", "/health", Router::kInline, [this](const Request&) {
    return http::Response::Text(admission_.draining() ? 503 : 200, "", "text/plain");
  });
  router_.Add("GET", "/version", Router::kInline,
              [](const Request&) { return JsonResponse({{"version", "0.1.0"}}); });
  router_.Add("GET", "/metrics", Router::kInline, [this](const Request&) { return HandleMetrics(); });
  router_.Add("POST", "/tokenize", Router::kWorker,
              Protected([this](const Request& req) { return HandleTokenize(req); }));
  router_.Add("POST", "/detokenize", Router::kWorker,
              Protected([this](const Request& req) { return HandleDetokenize(req); }));
  AddKvDashboardRoutes(router_, *dashboard_,
                       [this](http::Handler handler) { return Protected(std::move(handler)); });
}

http::Response Server::HandleMetrics() {
  ServerCounters counters{options_.num_kv_blocks, admission_.in_flight(), num_rejected_.load()};
  return http::Response::Text(
      200, FormatPrometheus(engine_.Metrics(), counters, options_.served_model_name) +
               engine_.OffloadPrometheus(),
      "text/plain; version=0.0.4");
}

// {"prompt": "text", "add_special_tokens": true} or {"messages": [...], "reasoning_effort"} ->
// {"tokens": [...], "count": N, "max_model_len": L}.
http::Response Server::HandleTokenize(const http::Request& req) {
  http::Response error;
  std::optional<json> body = ParseBody(req, &error);
  if (!body) return error;
  std::vector<int32_t> tokens;
  ParseContext context = parse_context_;
  context.limits.max_prompt_bytes = std::max(context.limits.max_prompt_bytes, kMinTokenizeBytes);
  if (body->contains("messages")) {
    ParsedRequest parsed;
    json chat = {{"messages", (*body)["messages"]}, {"max_tokens", 1}};
    if (body->contains("reasoning_effort")) {
      chat["reasoning_effort"] = (*body)["reasoning_effort"];
    }
    if (std::optional<ApiError> e = ParseRequest(Endpoint::kChat, chat, context, &parsed)) {
      return ErrorResponse(*e);
    }
    tokens = parsed.prompts.front();
  } else {
    auto prompt = body->find("prompt");
    if (prompt == body->end() || !prompt->is_string()) {
      return ErrorResponse(WrongType("'prompt' must be a string", "prompt"));
    }
    bool add_special = true;
    if (auto it = body->find("add_special_tokens"); it != body->end()) {
      if (!it->is_boolean()) {
        return ErrorResponse(WrongType("'add_special_tokens' must be a boolean",
                                       "add_special_tokens"));
      }
      add_special = it->get<bool>();
    }
    const std::string& text = prompt->get_ref<const std::string&>();
    if (static_cast<int64_t>(text.size()) > context.limits.max_prompt_bytes) {
      return ErrorResponse(BadRequest(fmt::format("the prompt is {} bytes, over the limit of {}",
                                                  text.size(), context.limits.max_prompt_bytes),
                                      "prompt"));
    }
    tokens = tokenizer_.Encode(text, {.add_special = add_special});
  }
  return JsonResponse({{"tokens", tokens}, {"count", tokens.size()},
                       {"max_model_len", engine_.max_model_len()}});
}

// {"tokens": [ids]} -> {"prompt": "text"}.
http::Response Server::HandleDetokenize(const http::Request& req) {
  http::Response error;
  std::optional<json> body = ParseBody(req, &error);
  if (!body) return error;
  auto tokens = body->find("tokens");
  if (tokens == body->end() || !tokens->is_array()) {
    return ErrorResponse(WrongType("'tokens' must be a list of token ids", "tokens"));
  }
  std::vector<int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer()) {
      return ErrorResponse(WrongType("'tokens' must be a list of token ids", "tokens"));
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= tokenizer_.vocab().num_tokens()) {
      return ErrorResponse(BadRequest(fmt::format("token id {} is outside the vocabulary", id),
                                      "tokens"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return JsonResponse({{"prompt", tokenizer_.Decode(ids)}});
}

Result<int> Server::Bind() { return http_->Bind(); }

// A Shutdown() before Serve() makes Serve() return at once (the listener is already stopped).
Status Server::Serve() {
  http_->Run();
  return Status::Ok();
}

void Server::Shutdown(std::chrono::duration<double> drain_timeout) {
  {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  admission_.StartDraining();
  if (!admission_.WaitIdle(drain_timeout)) {
    const std::set<engine::RequestId> ids = admission_.tracked();
    KV_LOG(WARNING, "aborting {} requests still running after the drain timeout", ids.size());
    for (engine::RequestId id : ids) engine_.Abort(id);
    if (!admission_.WaitIdle(std::chrono::seconds(10))) {
      KV_LOG(WARNING, "requests still in flight at shutdown");
    }
  }
  dashboard_->Stop();  // ends the event streams
  http_->Stop();
}

}  // namespace kvserve::server
