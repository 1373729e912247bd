// kvserve generate MODEL --prompt TEXT -n N: one request through the engine (the same path as
// `serve`, with max-num-seqs 1), streamed to stdout: text, or one JSON object per token with
// --json. llama.cpp's sampling flags and defaults; the engine flags of tools/engine_flags.h.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/log.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct GenerateOptions {
  std::string model_path;
  std::string prompt;
  int n_predict = 64;
  sampling::SamplingParams sampling;
  int64_t seed = -1;  // -1: random (llama.cpp's default)
  int logprobs = 0;
  bool json = false;
  EngineFlags engine_flags;
};

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

nlohmann::json TokenJson(const tokenizer::Tokenizer& tok, const engine::TokenOutput& t,
                         const std::string& text) {
  nlohmann::json top = nlohmann::json::array();
  for (const sampling::TokenLogprob& l : t.top_logprobs) {
    top.push_back(
        {{"id", l.token}, {"logprob", l.logprob}, {"text", std::string(tok.TokenPiece(l.token))}});
  }
  return {{"id", t.token}, {"text", text}, {"logprob", t.logprob}, {"top_logprobs", top}};
}

// One --json line. A byte token's piece alone can be an incomplete UTF-8 sequence: those bytes
// print as U+FFFD (dump() would throw).
std::string JsonLine(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status Run(GenerateOptions o) {
  if (o.n_predict < 0) return InvalidArgument("-n must be >= 0");
  KV_ASSIGN_OR_RETURN(engine::EngineConfig config, ResolveEngineFlags(o.engine_flags));
  config.max_num_seqs = 1;
  o.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed)
                                : static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  // --json prints each token's logprob, so ask for it (K = 0: the token's own only).
  if (o.json || o.logprobs > 0) o.sampling.logprobs = o.logprobs;
  if (o.n_predict > 0) o.sampling.max_tokens = o.n_predict;
  KV_RETURN_IF_ERROR(o.sampling.Validate());

  const Clock::time_point t_load = Clock::now();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(o.model_path));
  KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*file));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                      engine::Engine::Load(o.model_path, config));
  for (const std::string& line :
       kv::FormatCapacityReport(eng->kv().config(), eng->kv().capacity())) {
    KV_LOG(INFO, "{}", line);
  }
  KV_LOG(INFO, "loaded {} in {:.2f} s: vocab {}, max-model-len {}, {} threads", o.model_path,
         Seconds(Clock::now() - t_load), eng->vocab_size(), eng->max_model_len(),
         eng->num_threads());

  engine::EngineRequest request;
  request.prompt = tok.Encode(o.prompt, {.add_special = true});
  request.params = o.sampling;
  const int64_t num_prompt = static_cast<int64_t>(request.prompt.size());
  if (!o.json) std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  if (o.n_predict == 0) {  // nothing to generate (llama.cpp prints the prompt and stops)
    if (!o.json) std::printf("\n");
    return Status::Ok();
  }
  KV_RETURN_IF_ERROR(eng->AddRequest(std::move(request)).status());

  tokenizer::StreamDecoder decoder(tok);
  const Clock::time_point t_start = Clock::now();
  Clock::time_point t_first = t_start;
  int64_t generated = 0;
  while (eng->HasUnfinished()) {
    for (engine::RequestOutput& out : eng->Step()) {
      for (const engine::TokenOutput& token : out.tokens) {
        if (generated++ == 0) t_first = Clock::now();
        const std::string text = decoder.Push(token.token);
        std::fputs(o.json ? JsonLine(TokenJson(tok, token, text)).c_str() : text.c_str(), stdout);
      }
      std::fflush(stdout);
      if (out.finish && *out.finish == engine::FinishReason::kError) return Internal(out.error);
    }
  }
  const std::string tail = decoder.Flush();
  if (!o.json) std::printf("%s\n", tail.c_str());
  const double prefill_s = Seconds(t_first - t_start);
  const double decode_s = Seconds(Clock::now() - t_first);
  KV_LOG(INFO, "prompt: {} tokens in {:.3f} s ({:.1f} tokens/s)", num_prompt, prefill_s,
         num_prompt / std::max(prefill_s, 1e-9));
  KV_LOG(INFO, "generated: {} tokens, decode {:.1f} tokens/s", generated,
         (generated - 1) / std::max(decode_s, 1e-9));
  return Status::Ok();
}

}  // namespace

void RegisterGenerate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (CPU)");
  cmd->add_option("model", o->model_path, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str();
  o->sampling.temperature = 0.8f;  // llama.cpp's defaults
  o->sampling.top_k = 40;
  o->sampling.top_p = 0.95f;
  o->sampling.min_p = 0.05f;
  cmd->add_option("--temp", o->sampling.temperature, "temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "top-k; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "top-p; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "min-p; 0 = off")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty, "repetition penalty; 1 = off")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty)->capture_default_str();
  cmd->add_flag("--ignore-eos", o->sampling.ignore_eos, "keep generating after EOS");
  cmd->add_option("-s,--seed", o->seed, "sampling seed; -1 = random")->capture_default_str();
  cmd->add_option("--logprobs", o->logprobs, "top logprobs per token (with --json)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per generated token");
  o->engine_flags.max_num_batched_tokens = 512;  // llama.cpp's -b default
  AddEngineFlags(cmd, o->engine_flags, EngineFlagSet::kEngine);
  cmd->callback([o] { ReportFailure("generate", Run(*o)); });
}

}  // namespace kvserve::tools
