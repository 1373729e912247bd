// kvserve generate MODEL --prompt TEXT -n N: one request through the model, the paged KV cache
// and the sampler, streamed to stdout (text, or one JSON object per token with --json).
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kv/kv_cache_manager.h"
#include "model/kv_layout.h"
#include "model/llama.h"
#include "model/v41_config.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

struct GenerateOptions {
  std::string model_path;
  std::string prompt;
  int n_predict = 64;
  sampling::SamplingParams sampling;
  int64_t seed = -1;  // -1: random (llama.cpp's default)
  int threads = 0;
  int logprobs = 0;
  bool json = false;
  std::string kv_cache_dtype = "auto";
  int block_size = 16;
  std::string kv_budget;  // empty: the CPU default
  int batch_size = 512;   // most prompt tokens per forward (llama.cpp's -b)
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Everything generate needs, loaded and sized.
struct Loaded {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<model::LlamaModel> model;
  std::optional<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<kv::KvCacheManager> kv;
};

Result<Loaded> Load(const GenerateOptions& o) {
  Loaded loaded;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(o.model_path));
  loaded.file = std::move(file);
  model::LoadOptions load_options;
  load_options.max_batch_tokens = o.batch_size;
  load_options.max_threads = o.threads;
  KV_ASSIGN_OR_RETURN(loaded.model, model::LlamaModel::Load(loaded.file, load_options));
  KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*loaded.file));
  loaded.tokenizer.emplace(std::move(tok));
  return loaded;
}

// Sizes the paged KV cache for one request of num_tokens and logs its capacity lines.
Status CreateKv(const GenerateOptions& o, int64_t num_tokens, Loaded& loaded) {
  const model::ModelConfig& config = loaded.model->config();
  KV_ASSIGN_OR_RETURN(tensor::DType kv_dtype,
                      kv::ParseKvCacheDType(o.kv_cache_dtype,
                                            model::ModelActivationDType(*loaded.file)));
  KV_RETURN_IF_ERROR(kv::ValidateBlockSize(o.block_size));
  kv::KvCacheConfig kv_config = model::MakeKvCacheConfig(config, kv_dtype, o.block_size,
                                                         num_tokens, o.batch_size);
  uint64_t budget = kv::DefaultCpuKvBudgetBytes();
  if (!o.kv_budget.empty()) {
    KV_ASSIGN_OR_RETURN(budget, kv::ParseKvBudget(o.kv_budget));
  }
  kv::KvCacheManagerOptions kv_options;
  kv_options.fingerprint = model::MakeFingerprint(*loaded.file, config.architecture, kv_config);
  KV_ASSIGN_OR_RETURN(loaded.kv, kv::KvCacheManager::Create(kv_config, budget, kv_options));
  for (const std::string& line : kv::FormatCapacityReport(kv_config, loaded.kv->capacity())) {
    KV_LOG(INFO, "{}", line);
  }
  return Status::Ok();
}

nlohmann::json TokenJson(const tokenizer::Tokenizer& tok, const sampling::SampleResult& r,
                         const std::string& text) {
  nlohmann::json top = nlohmann::json::array();
  for (const sampling::TokenLogprob& t : r.top_logprobs) {
    top.push_back({{"id", t.token}, {"logprob", t.logprob},
                   {"text", std::string(tok.TokenPiece(t.token))}});
  }
  return {{"id", r.token}, {"text", text}, {"logprob", r.logprob}, {"top_logprobs", top}};
}

// One --json line. A byte token's piece alone can be an incomplete UTF-8 sequence: those bytes
// print as U+FFFD (dump() would throw).
std::string JsonLine(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// `kvserve-v41` models (model/v41.h) keep their KV in several groups: they run through the
// engine (engine/v41_runner.h), which builds every group's block tables.
Status RunWithEngine(const GenerateOptions& o) {
  engine::EngineConfig config;
  config.max_num_seqs = 1;
  config.max_num_batched_tokens = o.batch_size;
  config.block_size = o.block_size;
  config.num_threads = o.threads;
  if (!o.kv_budget.empty()) {
    KV_ASSIGN_OR_RETURN(config.kv_cache_bytes, kv::ParseKvBudget(o.kv_budget));
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(o.model_path));
  KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(*file));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                      engine::Engine::LoadLlama(o.model_path, config));
  engine::EngineRequest request;
  request.prompt = tok.Encode(o.prompt, {.add_special = true});
  request.params = o.sampling;
  KV_RETURN_IF_ERROR(eng->AddRequest(std::move(request)).status());
  tokenizer::StreamDecoder decoder(tok);
  if (!o.json) std::fputs(o.prompt.c_str(), stdout);
  while (eng->HasUnfinished()) {
    for (engine::RequestOutput& out : eng->Step()) {
      if (out.token) {
        sampling::SampleResult r;
        r.token = out.token->token;
        r.logprob = out.token->logprob;
        r.top_logprobs = out.token->top_logprobs;
        const std::string text = decoder.Push(r.token);
        std::fputs(o.json ? JsonLine(TokenJson(tok, r, text)).c_str() : text.c_str(),
                   stdout);
        std::fflush(stdout);
      }
      if (out.finish && !out.error.empty()) return Internal(out.error);
    }
  }
  const std::string tail = decoder.Flush();
  if (!o.json) std::printf("%s\n", tail.c_str());
  return Status::Ok();
}

Status Run(GenerateOptions o) {
  if (o.n_predict < 0) return InvalidArgument("-n must be >= 0");
  if (o.batch_size < 1) return InvalidArgument("--batch-size must be >= 1");
  if (o.threads <= 0) o.threads = DefaultThreadCount();
  o.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed)
                                : static_cast<uint64_t>(
                                      std::chrono::steady_clock::now().time_since_epoch().count());
  // --json prints each token's logprob, so ask for it (K = 0: the token's own only).
  if (o.json || o.logprobs > 0) o.sampling.logprobs = o.logprobs;
  o.sampling.max_tokens = o.n_predict;
  KV_RETURN_IF_ERROR(o.sampling.Validate());
  if (Result<std::unique_ptr<gguf::GgufFile>> probe = gguf::GgufFile::Open(o.model_path);
      probe.ok()) {
    if (Result<std::string> arch = (*probe)->GetString("general.architecture");
        arch.ok() && *arch == model::kV41Architecture) {
      return RunWithEngine(o);
    }
  }

  auto t_load = std::chrono::steady_clock::now();
  KV_ASSIGN_OR_RETURN(Loaded loaded, Load(o));
  std::vector<int32_t> prompt = loaded.tokenizer->Encode(o.prompt, {.add_special = true});
  if (prompt.empty()) return InvalidArgument("the prompt encodes to no tokens");
  int64_t total = static_cast<int64_t>(prompt.size()) + o.n_predict;
  const model::ModelConfig& config = loaded.model->config();
  if (total > config.context_length) {
    return OutOfRange(fmt::format("prompt ({} tokens) + -n {} = {} exceeds the model's context "
                                  "length {}", prompt.size(), o.n_predict, total,
                                  config.context_length));
  }
  KV_RETURN_IF_ERROR(CreateKv(o, total, loaded));
  KV_LOG(INFO, "loaded {} in {:.2f} s: {} layers, dim {}, vocab {}, {} threads", o.model_path,
         Seconds(t_load), config.num_layers, config.dim, config.vocab_size, o.threads);

  ThreadPool pool(o.threads);
  kv::KvCacheManager& kv = *loaded.kv;
  const tokenizer::Tokenizer& tok = *loaded.tokenizer;
  const kv::RequestId id = 1;
  kv::PrefixHit hit = kv.FindLongestCachedPrefix(prompt, "");
  if (!kv.AllocateNew(id, std::move(hit), static_cast<int64_t>(prompt.size())).has_value()) {
    return ResourceExhausted("the KV cache budget cannot hold this prompt; raise "
                             "--kv-cache-memory-bytes");
  }
  tensor::PagedKvView view = kv.KvView(0);
  std::vector<float> logits(config.vocab_size);
  sampling::Sampler sampler(static_cast<int32_t>(config.vocab_size));
  std::vector<int32_t> generated;
  std::vector<int32_t> all_tokens(prompt);  // prompt + generated, for block hashing
  tokenizer::StreamDecoder decoder(tok);
  if (!o.json) std::fputs(o.prompt.c_str(), stdout);

  // Prefill in chunks of --batch-size tokens, then one token per step.
  auto t_prefill = std::chrono::steady_clock::now();
  int64_t computed = 0;
  std::vector<int32_t> step_tokens(prompt.begin(), prompt.end());
  double prefill_s = 0;
  int64_t decoded = 0;
  auto t_decode = t_prefill;
  while (true) {
    int64_t n = std::min<int64_t>(static_cast<int64_t>(step_tokens.size()), o.batch_size);
    std::span<const int32_t> chunk(step_tokens.data(), n);
    model::ForwardBatch batch;
    batch.sequences.push_back({chunk, static_cast<int32_t>(computed), kv.BlockTable(id, 0),
                               n == static_cast<int64_t>(step_tokens.size())});
    loaded.model->Forward(batch, view, pool, logits.data());
    computed += n;
    step_tokens.erase(step_tokens.begin(), step_tokens.begin() + n);
    if (!step_tokens.empty()) continue;  // more prompt chunks
    if (generated.empty()) {
      prefill_s = Seconds(t_prefill);
      t_decode = std::chrono::steady_clock::now();
    } else {
      ++decoded;
    }
    if (static_cast<int>(generated.size()) >= o.n_predict) break;
    sampling::SampleResult r = sampler.Sample(logits, o.sampling, {prompt, generated},
                                              *o.sampling.seed);
    generated.push_back(r.token);
    std::string text = decoder.Push(r.token);
    if (o.json) {
      std::fputs(JsonLine(TokenJson(tok, r, text)).c_str(), stdout);
    } else {
      std::fputs(text.c_str(), stdout);
    }
    std::fflush(stdout);
    all_tokens.push_back(r.token);
    kv.CacheFullBlocks(id, all_tokens, computed);
    if (sampling::CheckFinish(o.sampling, r.token, static_cast<int32_t>(generated.size()),
                              tok.vocab().eos_id())) {
      break;
    }
    if (!kv.AllocateSlots(id, computed, 1).has_value()) {
      return ResourceExhausted("the KV cache budget ran out; raise --kv-cache-memory-bytes");
    }
    step_tokens.push_back(r.token);
  }
  std::string tail = decoder.Flush();
  if (!o.json) std::printf("%s\n", tail.c_str());
  double decode_s = Seconds(t_decode);
  kv.Free(id);
  KV_LOG(INFO, "prompt: {} tokens in {:.3f} s ({:.1f} tokens/s)", prompt.size(), prefill_s,
         prompt.size() / std::max(prefill_s, 1e-9));
  KV_LOG(INFO, "generated: {} tokens, decode {:.1f} tokens/s", generated.size(),
         decoded / std::max(decode_s, 1e-9));
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
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty,
                  "repetition penalty; 1 = off")->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty)->capture_default_str();
  cmd->add_flag("--ignore-eos", o->sampling.ignore_eos, "keep generating after EOS");
  cmd->add_option("-s,--seed", o->seed, "sampling seed; -1 = random")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "CPU threads; 0 = all cores")
      ->capture_default_str();
  cmd->add_option("--logprobs", o->logprobs, "top logprobs per token (with --json)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "one JSON object per generated token");
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype, "auto|f32|f16|bf16|q8_0|fp8|fp4")
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size, "KV block size in tokens")
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", o->kv_budget, "KV budget, e.g. 4GiB");
  cmd->add_option("-b,--batch-size", o->batch_size, "most prompt tokens per forward")
      ->capture_default_str();
  cmd->callback([o] { ReportFailure("generate", Run(*o)); });
}

}  // namespace kvserve::tools
