// `kvserve serve MODEL [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]
// [--api-key KEY] [--chat-template FILE|NAME] [--reasoning-parser deepseek|openai_gptoss] [engine knobs]`:
// the OpenAI-compatible HTTP server (src/server/, docs/server.md). Loads the model, prints the
// KV capacity lines and the address, and serves until SIGTERM / SIGINT, which drains in-flight
// requests (up to --shutdown-timeout seconds), aborts the rest and exits 0.
#include <fmt/format.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "core/units.h"
#include "engine/async_engine.h"
#include "gguf/gguf.h"
#include "kv/config.h"
#include "offload/config.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

struct ServeFlags {
  std::string model;
  server::ServerOptions server;
  std::string chat_template;       // NAME or FILE; empty: the GGUF's
  std::string reasoning_parser;    // "", "deepseek" or "openai_gptoss"
  std::string max_body;            // e.g. "16MiB"
  double shutdown_timeout_s = 10;
  EngineFlags engine_flags;
  engine::EngineConfig config;  // resolved from engine_flags
};

// --chat-template NAME (a family) or FILE (a Jinja file recognised like GGUF templates);
// otherwise the GGUF's tokenizer.chat_template, chatml when absent or unrecognised.
Result<tokenizer::ChatTemplate> LoadChatTemplate(const ServeFlags& f, const gguf::GgufFile& file,
                                                 const tokenizer::Tokenizer& tok) {
  const tokenizer::Vocab& vocab = tok.vocab();
  std::string bos = vocab.bos_id() ? std::string(tok.TokenPiece(*vocab.bos_id(), true)) : "";
  std::string eos = vocab.eos_id() ? std::string(tok.TokenPiece(*vocab.eos_id(), true)) : "";
  if (!f.chat_template.empty()) {
    if (Result<tokenizer::ChatTemplateFamily> family =
            tokenizer::ParseChatTemplateFamily(f.chat_template);
        family.ok()) {
      return tokenizer::ChatTemplate(*family, bos, eos);
    }
    std::ifstream in(f.chat_template);
    if (!in) {
      return NotFound(fmt::format("--chat-template '{}' is neither a template name nor a "
                                  "readable file", f.chat_template));
    }
    std::stringstream text;
    text << in.rdbuf();
    tokenizer::ChatTemplate t = tokenizer::ChatTemplate::FromJinja(text.str(), bos, eos);
    if (!t.recognised()) {
      return InvalidArgument(fmt::format("--chat-template {}: no known template family found",
                                         f.chat_template));
    }
    return t;
  }
  KV_ASSIGN_OR_RETURN(std::string jinja, file.GetStringOr("tokenizer.chat_template", ""));
  tokenizer::ChatTemplate t = tokenizer::ChatTemplate::FromJinja(jinja, bos, eos);
  if (!t.recognised()) {
    KV_LOG(INFO, "chat template: {}; using the chatml fallback",
           jinja.empty() ? "none in the model" : "not recognised");
  }
  return t;
}

// Blocks SIGTERM / SIGINT in the calling thread (and threads it starts later); a dedicated
// thread takes them with sigwait.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a crash
  return set;
}

Status PrepareConfig(ServeFlags& f) {
  KV_ASSIGN_OR_RETURN(f.config, ResolveEngineFlags(f.engine_flags));
  if (!f.max_body.empty()) {
    KV_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(f.max_body));
    f.server.max_body_bytes = bytes;
  }
  if (f.reasoning_parser != "" && f.reasoning_parser != "deepseek" &&
      f.reasoning_parser != "openai_gptoss") {
    return InvalidArgument("--reasoning-parser must be deepseek or openai_gptoss");
  }
  using server::ReasoningFormat;
  f.server.reasoning_parser = f.reasoning_parser == "deepseek"        ? ReasoningFormat::kDeepseek
                              : f.reasoning_parser == "openai_gptoss" ? ReasoningFormat::kHarmony
                                                                      : ReasoningFormat::kNone;
  if (f.server.served_model_name.empty()) f.server.served_model_name = f.model;
  f.server.max_num_seqs = f.config.max_num_seqs;
  if (f.server.max_waiting_requests < 0) return InvalidArgument("--max-waiting-requests < 0");
  return Status::Ok();
}

Status RunServe(ServeFlags f) {
  const sigset_t signals = BlockShutdownSignals();
  KV_RETURN_IF_ERROR(PrepareConfig(f));
  const auto t0 = std::chrono::steady_clock::now();
  KV_LOG(INFO, "loading {} ...", f.model);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(f.model));
  KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*file));
  KV_ASSIGN_OR_RETURN(tokenizer::ChatTemplate chat, LoadChatTemplate(f, *file, tok));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                      engine::Engine::Load(f.model, f.config));
  for (const std::string& line : kv::FormatCapacityReport(eng->kv().config(), eng->kv().capacity())) {
    KV_LOG(INFO, "{}", line);
  }
  f.server.num_kv_blocks = eng->kv().capacity().groups.front().num_blocks - 1;
  KV_LOG(INFO, "loaded in {:.2f} s: max-model-len {}, max-num-seqs {}, {} threads, chat template {}{}",
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
         eng->max_model_len(), f.config.max_num_seqs, eng->num_threads(),
         tokenizer::ChatTemplateFamilyName(chat.family()), chat.recognised() ? "" : " (fallback)");
  engine::AsyncEngine async(std::move(eng));
  server::Server srv(f.server, async, tok, chat);
  KV_ASSIGN_OR_RETURN(int port, srv.Bind());
  fmt::print("kvserve: serving '{}' on http://{}:{} (OpenAI API under /v1)\n",
             f.server.served_model_name, f.server.host, port);
  fmt::print("try: curl http://{}:{}/v1/completions -H 'Content-Type: application/json' "
             "-d '{{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}}'\n",
             f.server.host, port);
  std::fflush(stdout);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    KV_LOG(INFO, "signal {}: draining (up to {:.0f} s), then exiting; a second signal exits now",
           sig, f.shutdown_timeout_s);
    std::thread([signals, &srv] {  // a second SIGTERM / SIGINT forces the exit
      int again = 0;
      sigwait(&signals, &again);
      const int64_t lost = srv.num_in_flight();
      KV_LOG(WARNING, "signal {} again: exiting now, {} requests unfinished", again, lost);
      std::_Exit(lost == 0 ? 0 : 1);
    }).detach();
    srv.Shutdown(std::chrono::duration<double>(f.shutdown_timeout_s));
  });
  Status served = srv.Serve();
  if (!served.ok()) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  KV_LOG(INFO, "server stopped");
  return served;
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("model", f->model, "GGUF llama model")->required();
  cmd->add_option("--host", f->server.host, "address to bind")->capture_default_str();
  cmd->add_option("--port", f->server.port, "port; 0 = any free one")->capture_default_str();
  cmd->add_option("--served-model-name", f->server.served_model_name,
                  "the model name clients send (default: the MODEL path)");
  cmd->add_option("--api-key", f->server.api_key, "require 'Authorization: Bearer KEY'")
      ->check([](const std::string& key) {
        return key.empty() ? std::string("must not be empty (an unset variable?): leave the "
                                         "flag out to serve without a key")
                           : std::string();
      });
  cmd->add_option("--chat-template", f->chat_template,
                  "chatml|llama2|llama3|mistral|deepseek|gemma|phi3|harmony or a Jinja FILE");
  cmd->add_option("--reasoning-parser", f->reasoning_parser, "deepseek: <think> -> "
                  "reasoning_content; openai_gptoss: gpt-oss's analysis channel -> "
                  "reasoning_content");
  cmd->add_option("--max-waiting-requests", f->server.max_waiting_requests,
                  "queued choices beyond --max-num-seqs before 503")->capture_default_str();
  cmd->add_option("--max-request-body", f->max_body, "request body limit (default 16MiB)");
  cmd->add_option("--http-threads", f->server.num_http_threads,
                  "threads that parse and tokenize requests (connections are event-driven)")
      ->capture_default_str();
  cmd->add_option("--dashboard-events-per-s", f->server.dashboard_events_per_s,
                  "live dashboard events a second, all /v1/kv/events streams together (each "
                  "gets 4 a second until they would pass it; 0: no bound)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--http-header-timeout", f->server.header_timeout_s,
                  "seconds a request head may take (408 after)")->capture_default_str();
  cmd->add_option("--http-body-timeout", f->server.body_timeout_s,
                  "seconds a request body may take after its head (408 after)")
      ->capture_default_str();
  cmd->add_option("--max-prompt-bytes", f->server.request_limits.max_prompt_bytes,
                  "longest prompt in bytes, checked before tokenizing (default: max-model-len "
                  "x the longest token)");
  cmd->add_option("--max-stop-strings", f->server.request_limits.max_stop_strings,
                  "most stop strings per request")->capture_default_str();
  cmd->add_option("--max-stop-bytes", f->server.request_limits.max_stop_bytes,
                  "most bytes of stop strings per request")->capture_default_str();
  cmd->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "seconds SIGTERM waits for in-flight requests")->capture_default_str();
  AddEngineFlags(cmd, f->engine_flags, EngineFlagSet::kServe);
  cmd->callback([f] { ReportFailure("serve", RunServe(*f)); });
}

}  // namespace kvserve::tools
