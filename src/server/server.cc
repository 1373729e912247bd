#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "core/log.h"
#include "server/kv_dashboard_httplib.h"
#include "server/responses.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

void SendError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.retry_after_s) res.set_header("Retry-After", std::to_string(*error.retry_after_s));
  res.set_content(ApiErrorBody(error), "application/json");
}

void SendJson(httplib::Response& res, const json& body) {
  res.status = 200;
  res.set_content(Dump(body), "application/json");
}

// The JSON object of a request body, or the 400 to answer.
std::optional<json> ParseBody(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    SendError(res, BadRequest("the request body is not valid JSON"));
    return std::nullopt;
  }
  if (!body.is_object()) {
    SendError(res, BadRequest("the request body must be a JSON object"));
    return std::nullopt;
  }
  return body;
}

}  // namespace

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
      parse_context_{&tokenizer_, &chat_template_, options_.served_model_name},
      admission_(static_cast<int64_t>(options_.max_num_seqs) + options_.max_waiting_requests),
      http_(std::make_unique<httplib::Server>()),
      dashboard_(std::make_unique<KvDashboard>(
          engine, KvDashboardOptions{.model_name = options_.served_model_name})) {
  const int threads = std::max(options_.num_http_threads, 4);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  RegisterRoutes();
}

Server::~Server() = default;

bool Server::Authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  return ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + options_.api_key);
}

void Server::RegisterRoutes() {
  using httplib::Request;
  using httplib::Response;
  using Handled = httplib::Server::HandlerResponse;
  http_->set_pre_routing_handler([this](const Request& req, Response& res) {
    const bool protected_path = req.path.starts_with("/v1/") || req.path == "/tokenize" ||
                                req.path == "/detokenize";
    if (protected_path && !Authorized(req)) {
      SendError(res, Unauthorized());
      return Handled::Handled;
    }
    return Handled::Unhandled;
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const Request& req, Response& res) {
    if (!res.body.empty()) return Handled::Unhandled;
    if (res.status == 413) {
      SendError(res, PayloadTooLarge(options_.max_body_bytes));
    } else if (res.status == 404) {
      SendError(res, {404, fmt::format("no route for {} {}", req.method, req.path),
                      "NotFoundError", std::nullopt, std::nullopt});
    } else {
      SendError(res, {res.status, fmt::format("HTTP {}", res.status), "invalid_request_error",
                      std::nullopt, std::nullopt});
    }
    return Handled::Handled;
  }));
  http_->set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    SendError(res, {500, "internal error", "InternalServerError", std::nullopt, std::nullopt});
  });
  http_->Post("/v1/completions", [this](const Request& req, Response& res) {
    HandleGenerate(Endpoint::kCompletions, req, res);
  });
  http_->Post("/v1/chat/completions", [this](const Request& req, Response& res) {
    HandleGenerate(Endpoint::kChat, req, res);
  });
  http_->Get("/v1/models", [this](const Request&, Response& res) {
    json model = {{"id", options_.served_model_name}, {"object", "model"}, {"created", 0},
                  {"owned_by", "kvserve"}, {"root", options_.served_model_name},
                  {"max_model_len", engine_.max_model_len()}};
    SendJson(res, {{"object", "list"}, {"data", json::array({model})}});
  });
  http_->Get("/health", [this](const Request&, Response& res) {
    res.status = admission_.draining() ? 503 : 200;
  });
  http_->Get("/version", [](const Request&, Response& res) {
    SendJson(res, {{"version", "0.1.0"}});
  });
  http_->Get("/metrics", [this](const Request&, Response& res) { HandleMetrics(res); });
  http_->Post("/tokenize", [this](const Request& req, Response& res) { HandleTokenize(req, res); });
  http_->Post("/detokenize",
              [this](const Request& req, Response& res) { HandleDetokenize(req, res); });
  AddKvDashboardRoutes(*http_, *dashboard_);
}

void Server::HandleMetrics(httplib::Response& res) {
  ServerCounters counters{options_.num_kv_blocks, admission_.in_flight(), num_rejected_.load()};
  res.set_content(FormatPrometheus(engine_.Metrics(), counters, options_.served_model_name) +
                      engine_.OffloadPrometheus(),
                  "text/plain; version=0.0.4");
}

// {"prompt": "text", "add_special_tokens": true} or {"messages": [...]} ->
// {"tokens": [...], "count": N, "max_model_len": L}.
void Server::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  std::optional<json> body = ParseBody(req, res);
  if (!body) return;
  std::vector<int32_t> tokens;
  if (body->contains("messages")) {
    ParsedRequest parsed;
    json chat = {{"messages", (*body)["messages"]}, {"max_tokens", 1}};
    if (std::optional<ApiError> e = ParseRequest(Endpoint::kChat, chat, parse_context_, &parsed)) {
      return SendError(res, *e);
    }
    tokens = parsed.prompts.front();
  } else {
    auto prompt = body->find("prompt");
    if (prompt == body->end() || !prompt->is_string()) {
      return SendError(res, WrongType("'prompt' must be a string", "prompt"));
    }
    bool add_special = true;
    if (auto it = body->find("add_special_tokens"); it != body->end()) {
      if (!it->is_boolean()) {
        return SendError(res, WrongType("'add_special_tokens' must be a boolean",
                                        "add_special_tokens"));
      }
      add_special = it->get<bool>();
    }
    tokens = tokenizer_.Encode(prompt->get<std::string>(), {.add_special = add_special});
  }
  SendJson(res, {{"tokens", tokens}, {"count", tokens.size()},
                 {"max_model_len", engine_.max_model_len()}});
}

// {"tokens": [ids]} -> {"prompt": "text"}.
void Server::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  std::optional<json> body = ParseBody(req, res);
  if (!body) return;
  auto tokens = body->find("tokens");
  if (tokens == body->end() || !tokens->is_array()) {
    return SendError(res, WrongType("'tokens' must be a list of token ids", "tokens"));
  }
  std::vector<int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer()) {
      return SendError(res, WrongType("'tokens' must be a list of token ids", "tokens"));
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= tokenizer_.vocab().num_tokens()) {
      return SendError(res, BadRequest(fmt::format("token id {} is outside the vocabulary", id),
                                       "tokens"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  SendJson(res, {{"prompt", tokenizer_.Decode(ids)}});
}

Result<int> Server::Bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port)
                                             ? options_.port
                                             : -1);
  if (port < 0) {
    return IoError(fmt::format("cannot listen on {}:{}", options_.host, options_.port));
  }
  return port;
}

// A Shutdown() before Serve() makes Serve() return at once; one after it waits until the
// listener runs, then stops it (httplib's stop() does nothing to a listener not yet running).
Status Server::Serve() {
  {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (shut_down_) return Status::Ok();
    serving_ = true;
  }
  const bool ok = http_->listen_after_bind();
  serve_returned_.store(true);
  if (!ok) return IoError("the HTTP listener failed");
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
  dashboard_->Stop();  // ends the event streams, which would hold the listener's threads
  {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (!serving_) return;  // Serve() will see shut_down_ and return
  }
  while (!http_->is_running() && !serve_returned_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  http_->stop();
}

}  // namespace kvserve::server
