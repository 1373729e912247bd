// Engine: one step = schedule -> one forward over a ragged batch (prefill chunks and decodes
// together) -> sample -> update. Synchronous; AsyncEngine (engine/async_engine.h) runs it on a
// background thread for the server.
//
// Owns the model, the KV cache manager, the scheduler, the sampler, the thread pool
// and, per request, its sampling parameters, seed and timestamps.
// Determinism (DESIGN.md section 5): a request's logits depend only on its own tokens (the
// model's contract, model/model.h) and its draws only on (seed, position) (sampling/rng.h), so its
// tokens and logprobs are the same alone or batched, however chunked, preempted or served from the
// prefix cache, with any thread count. Thread safety: none; one thread calls everything
// (ValidateRequest excepted).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/draft_model.h"
#include "engine/metrics.h"
#include "engine/speculative.h"
#include "kv/kv_cache_manager.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "offload/config.h"
#include "offload/tiered_connector.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "scheduler/scheduler.h"

namespace kvserve::engine {

using RequestId = scheduler::RequestId;
using FinishReason = scheduler::FinishReason;

// The serving knobs (vLLM names). tools/engine_flags.h declares and parses them, once, for
// every command.
struct EngineConfig {
  int max_num_seqs = 256;                  // --max-num-seqs
  int64_t max_num_batched_tokens = 2048;   // --max-num-batched-tokens
  std::optional<int64_t> max_model_len;    // --max-model-len; default: the model's context
  int block_size = 16;                     // --block-size
  std::optional<uint64_t> kv_cache_bytes;  // --kv-cache-memory-bytes; default: the CPU default
  std::string kv_cache_dtype = "auto";     // --kv-cache-dtype
  bool enable_prefix_caching = true;       // --enable-prefix-caching / --no-enable-prefix-caching
  std::optional<int> num_threads;          // --threads; default: all cores
  // KV tokens per group made resident when the engine starts, beyond one step's worth
  // (max_num_batched_tokens, always): `bench throughput` passes its whole workload, as
  // llama.cpp clears its context's whole KV buffer before the first request.
  int64_t prefault_kv_tokens = 0;
  // --kv-transfer-config / --kv-offloading-size: KV tiers below the device pool (needs
  // prefix caching).
  std::optional<offload::OffloadConfig> offload;
  // --speculative-config: draft tokens verified in the same forward pass (engine/speculative.h).
  std::optional<SpeculativeConfig> speculative;

  // kv_cache_bytes, or kv::DefaultCpuKvBudgetBytes().
  uint64_t KvBudgetBytes() const { return kv_cache_bytes.value_or(kv::DefaultCpuKvBudgetBytes()); }
  // num_threads, or DefaultThreadCount() (every core).
  int NumThreads() const { return num_threads.value_or(DefaultThreadCount()); }
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  std::string request_id;  // the client's id: seeds unseeded requests (sampling::ResolveSeed)
  std::string cache_salt;
};

struct TokenOutput {
  int32_t token = 0;
  float logprob = 0.0f;  // of the raw model distribution; 0 unless params.logprobs is set
  std::vector<sampling::TokenLogprob> top_logprobs;  // params.logprobs of them, most likely first
};

// What one step produced for one request: its new tokens (one; more when drafts were accepted;
// none for a prefill chunk), and the finish if it ended.
struct RequestOutput {
  RequestId id = 0;
  std::vector<TokenOutput> tokens;
  std::optional<FinishReason> finish;
  std::string error;              // for kError
  int64_t num_cached_tokens = 0;  // prompt tokens served from a cache tier at admission
};

// An EngineRequest that passed Engine::Validate; only the engine makes one, so a request is
// validated once on its way in.
class ValidRequest {
 public:
  const EngineRequest& get() const { return request_; }

 private:
  friend class Engine;
  explicit ValidRequest(EngineRequest request) : request_(std::move(request)) {}
  EngineRequest request_;
};

class Engine {
 public:
  // Loads a GGUF model of any registered architecture (model/architecture.h): its KV layout
  // from ResolveKvLayout, its weights mapped in place, then Create.
  static Result<std::unique_ptr<Engine>> Load(const std::string& path, const EngineConfig& config);
  // A speculative-decoding draft model whose KV groups and layers follow the target's in the
  // KV layout (model::AppendLayout).
  struct Draft {
    std::unique_ptr<model::Model> model;
    int first_group = 0;  // the target's group count
    int first_layer = 0;  // the target's layer (slot) count
  };
  // Any model over an explicit KV layout (kv_config.max_model_len is the max-model-len).
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<model::Model> model,
                                                const kv::KvCacheConfig& kv_config,
                                                const kv::KvCacheManagerOptions& kv_options,
                                                const EngineConfig& config,
                                                std::optional<int32_t> eos_token_id,
                                                std::optional<Draft> draft = std::nullopt);
  ~Engine();

  // THE validation of a request (the server adds only HTTP-only fields): InvalidArgument (bad
  // params, an empty prompt, tokens outside the vocabulary) or OutOfRange (prompt + max_tokens
  // above max-model-len, in vLLM's words). Thread-safe.
  Status ValidateRequest(const EngineRequest& request) const;
  // ValidateRequest, then a request the engine may add without checking again. Thread-safe.
  Result<ValidRequest> Validate(EngineRequest request) const;
  // Validates and queues; returns the engine's id for the request.
  Result<RequestId> AddRequest(EngineRequest request);
  // Queues a validated request under an id chosen by the caller (AsyncEngine).
  // note: the id is not in use; do not mix with the overload above (its ids count up from 1).
  void AddRequest(RequestId id, ValidRequest request);
  // Drops a request and frees its blocks. False when unknown (e.g. already finished).
  bool Abort(RequestId id);

  // One iteration; returns the outputs of every request that got a token or finished.
  std::vector<RequestOutput> Step();

  bool HasUnfinished() const { return scheduler_->HasUnfinished(); }
  int64_t max_model_len() const { return scheduler_->config().max_model_len; }
  int32_t vocab_size() const { return static_cast<int32_t>(model_->vocab_size()); }
  int num_threads() const { return pool_.num_threads(); }
  const EngineConfig& config() const { return config_; }
  const scheduler::Scheduler& scheduler() const { return *scheduler_; }
  const kv::KvCacheManager& kv() const { return *kv_; }
  // The offload tiers, or null when none is configured.
  const offload::OffloadManager* offload() const {
    return connector_ ? &connector_->manager() : nullptr;
  }
  MetricsSnapshot Metrics() const;
  // Drops the device prefix cache (blocks go to the CPU tier when one is configured).
  int64_t ResetPrefixCache() { return kv_->ResetPrefixCache(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct RequestState {
    sampling::SamplingParams params;
    uint64_t seed = 0;
    Clock::time_point arrival, first_scheduled, first_token, last_token;
    bool scheduled = false;
    int64_t num_generated = 0;
    int64_t num_cached_tokens = 0;  // at the latest admission
    DraftBackoff draft_backoff;     // speculative decoding
  };

  Engine(std::unique_ptr<model::Model> model, std::unique_ptr<kv::KvCacheManager> kv,
         std::unique_ptr<offload::TieredKvConnector> connector, const EngineConfig& config,
         int64_t max_model_len, std::optional<int32_t> eos, std::optional<Draft> draft);
  void BuildBatch(const scheduler::SchedulerOutput& plan);
  std::vector<scheduler::SampledToken> SampleAll(const scheduler::SchedulerOutput& plan);
  // Samples request s's rows (1 + its drafts) from `logits` until a token differs from its
  // draft, a stop token, or the end: the tokens decoding without drafts would give.
  void SampleWithDrafts(const scheduler::ScheduledRequest& s, const float* logits,
                        sampling::Sampler& sampler, std::vector<sampling::SampleResult>& out);
  // Proposes the next step's drafts of every running decoding request (speculative config).
  void ProposeDrafts();
  std::vector<RequestOutput> CollectOutputs(const scheduler::SchedulerOutput& plan,
                                            std::span<const scheduler::SampledToken> sampled,
                                            std::span<const scheduler::FinishedRequest> finished);
  void RecordFinish(RequestId id, Clock::time_point now);

  EngineConfig config_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<offload::TieredKvConnector> connector_;  // null without tiers; uses kv_
  std::unique_ptr<scheduler::Scheduler> scheduler_;        // uses kv_ and connector_
  std::unique_ptr<DraftModel> draft_;  // speculative draft_model method; null otherwise
  model::KvViews kv_views_;  // of the model's groups (not the draft's); the arenas never move
  ThreadPool pool_;
  std::vector<sampling::Sampler> samplers_;  // one per pool thread (scratch buffers)
  std::optional<int32_t> eos_token_id_;
  std::unordered_map<RequestId, RequestState> states_;
  RequestId next_id_ = 1;

  // Per-step buffers, reused.
  model::Batch batch_;       // the model's groups' tables only
  model::Batch all_groups_;  // every group's tables (the draft's too): DraftModel::Mirror
  std::vector<std::span<const int32_t>> block_tables_;  // (sequences, groups)
  std::vector<float> logits_;  // (max_num_seqs * (1 + k) capped at the token budget, vocab)
  std::vector<TokenOutput> step_tokens_;  // parallel to the step's sampled tokens
  MetricsSnapshot metrics_;
};

// OutOfRange, in vLLM's words, when a prompt of num_prompt_tokens plus max_tokens more exceeds
// max_model_len. Engine::ValidateRequest's length check (the simulator applies it too).
Status CheckContextLength(int64_t num_prompt_tokens, int64_t max_tokens, int64_t max_model_len);

// The max-model-len an engine will run with: `requested` (or the context length) when the
// budget holds one request that long; otherwise the longest that fits when not requested
// (warning logged), InvalidArgument when requested. Exposed for tests.
Result<int64_t> ResolveMaxModelLen(const kv::KvCacheConfig& config_at_context,
                                   uint64_t budget_bytes, int64_t context_length,
                                   std::optional<int64_t> requested);

// A GGUF model as Engine::Load loads it: the architecture from the registry, the KV layout
// from ResolveKvLayout (with the draft model's groups appended when config asks for one), the
// weights mapped (load options from config: batch tokens, context, threads), the draft model,
// and the fingerprint of (file, architecture, draft, layout). For Engine::Load and for tools
// that run the model directly (`kvserve simulate --calibrate`).
struct LoadedModel {
  std::shared_ptr<const gguf::GgufFile> file;
  std::string architecture;
  model::ModelKvLayout layout;
  std::unique_ptr<model::Model> model;
  std::optional<Engine::Draft> draft;
  kv::ModelFingerprint fingerprint;
};
Result<LoadedModel> LoadModel(const std::string& path, const EngineConfig& config);

// THE KV layout a GGUF model runs with under `config`: model::MakeModelKvLayout over the file's
// KV shape, at the max-model-len ResolveMaxModelLen gives for config's budget. Engine::Load,
// `kvserve inspect` and the capacity tests all call this, so what they print is what serve
// allocates. With a speculative draft model, its groups follow (model::AppendLayout) and the
// budget holds both. InvalidArgument for a bad --kv-cache-dtype, block size or length.
Result<model::ModelKvLayout> ResolveKvLayout(const gguf::GgufFile& file, const EngineConfig& config,
                                             const gguf::GgufFile* draft = nullptr);

}  // namespace kvserve::engine
