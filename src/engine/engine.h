// Engine: one step = schedule -> one forward over a ragged batch (prefill chunks and decodes
// together) -> sample -> update. Synchronous; AsyncEngine (engine/async_engine.h) runs it on a
// background thread for the server.
//
// Owns the model runner, the KV cache manager, the scheduler, the sampler, the thread pool
// and, per request, its sampling parameters, seed and timestamps.
// Determinism (DESIGN.md section 5): a request's logits depend only on its own tokens (the
// runner's contract) and its draws only on (seed, position) (sampling/rng.h), so its tokens and
// logprobs are the same alone or batched, however chunked, preempted or served from the prefix
// cache, with any thread count.
// Thread safety: none; one thread calls everything (ValidateRequest excepted).
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
#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "kv/kv_cache_manager.h"
#include "offload/config.h"
#include "offload/tiered_connector.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "scheduler/scheduler.h"

namespace kvserve::engine {

using RequestId = scheduler::RequestId;
using FinishReason = scheduler::FinishReason;

// The serving knobs (vLLM names).
struct EngineConfig {
  int max_num_seqs = 256;                 // --max-num-seqs
  int64_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens
  std::optional<int64_t> max_model_len;   // --max-model-len; default: the model's context
  int block_size = 16;                    // --block-size
  uint64_t kv_cache_bytes = 0;            // --kv-cache-memory; 0: kv::DefaultCpuKvBudgetBytes()
  std::string kv_cache_dtype = "auto";    // --kv-cache-dtype
  bool enable_prefix_caching = true;      // --enable-prefix-caching / --no-enable-prefix-caching
  int num_threads = 1;                    // --threads
  // --kv-transfer-config / --kv-offloading-size: KV tiers below the device pool (needs
  // prefix caching).
  std::optional<offload::OffloadConfig> offload;

  // kv_cache_bytes, or the CPU default when it is 0.
  uint64_t KvBudgetBytes() const {
    return kv_cache_bytes ? kv_cache_bytes : kv::DefaultCpuKvBudgetBytes();
  }
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

// What one step produced for one request: at most one token, and the finish if it ended.
struct RequestOutput {
  RequestId id = 0;
  std::optional<TokenOutput> token;
  std::optional<FinishReason> finish;
  std::string error;  // for kError
  int64_t num_cached_tokens = 0;  // prompt tokens served from a cache tier at admission
};

class Engine {
 public:
  // Loads a GGUF llama model (a `kvserve-v41` file goes to LoadV41Engine, engine/v41_runner.h).
  // max_model_len: config's, else the model's context length,
  // lowered (with a warning naming the numbers) when the KV budget cannot hold one request
  // that long; an explicit one that does not fit is InvalidArgument.
  static Result<std::unique_ptr<Engine>> LoadLlama(const std::string& path,
                                                   const EngineConfig& config);
  // Any runner over an explicit KV layout (kv_config.max_model_len is the max-model-len).
  static Result<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelRunner> runner,
                                                const kv::KvCacheConfig& kv_config,
                                                const kv::KvCacheManagerOptions& kv_options,
                                                const EngineConfig& config,
                                                std::optional<int32_t> eos_token_id);
  // The common end of loading a GGUF model: prefix caching per config, the fingerprint of
  // (file, architecture, kv_config), the EOS id from the file's vocabulary, then Create.
  static Result<std::unique_ptr<Engine>> CreateForGguf(const gguf::GgufFile& file,
                                                       std::string_view architecture,
                                                       std::unique_ptr<ModelRunner> runner,
                                                       const kv::KvCacheConfig& kv_config,
                                                       const EngineConfig& config);
  ~Engine();

  // InvalidArgument (bad params, tokens outside the vocabulary, empty prompt) or OutOfRange
  // (prompt + max_tokens above max-model-len). Thread-safe.
  Status ValidateRequest(const EngineRequest& request) const;
  // Validates and queues; returns the engine's id for the request.
  Result<RequestId> AddRequest(EngineRequest request);
  // The same with an id chosen by the caller (AsyncEngine); InvalidArgument when in use.
  // note: do not mix with the overload above (its ids count up from 1).
  Status AddRequest(RequestId id, EngineRequest request);
  // Drops a request and frees its blocks. False when unknown (e.g. already finished).
  bool Abort(RequestId id);

  // One iteration; returns the outputs of every request that got a token or finished.
  std::vector<RequestOutput> Step();

  bool HasUnfinished() const { return scheduler_->HasUnfinished(); }
  int64_t max_model_len() const { return scheduler_->config().max_model_len; }
  int32_t vocab_size() const { return runner_->vocab_size(); }
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
  };

  Engine(std::unique_ptr<ModelRunner> runner, std::unique_ptr<kv::KvCacheManager> kv,
         std::unique_ptr<offload::TieredKvConnector> connector, const EngineConfig& config,
         int64_t max_model_len, std::optional<int32_t> eos);
  void BuildBatch(const scheduler::SchedulerOutput& plan);
  std::vector<scheduler::SampledToken> SampleAll(const scheduler::SchedulerOutput& plan);
  std::vector<RequestOutput> CollectOutputs(const scheduler::SchedulerOutput& plan,
                                            std::span<const scheduler::SampledToken> sampled,
                                            std::span<const scheduler::FinishedRequest> finished);
  void RecordFinish(RequestId id, Clock::time_point now);

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<offload::TieredKvConnector> connector_;  // null without tiers; uses kv_
  std::unique_ptr<scheduler::Scheduler> scheduler_;        // uses kv_ and connector_
  tensor::PagedKvView kv_view_;  // of group 0; the arena never moves
  ThreadPool pool_;
  std::vector<sampling::Sampler> samplers_;  // one per pool thread (scratch buffers)
  std::optional<int32_t> eos_token_id_;
  std::unordered_map<RequestId, RequestState> states_;
  RequestId next_id_ = 1;

  // Per-step buffers, reused.
  model::ForwardBatch batch_;
  std::vector<std::vector<std::span<const int32_t>>> group_tables_;  // [sequence][group]
  std::vector<float> logits_;             // (max_num_seqs, vocab)
  std::vector<TokenOutput> step_tokens_;  // parallel to the step's sampled tokens
  MetricsSnapshot metrics_;
};

// The max-model-len an engine will run with: `requested` (or the context length) when the
// budget holds one request that long; otherwise the longest that fits when not requested
// (warning logged), InvalidArgument when requested. Exposed for tests.
Result<int64_t> ResolveMaxModelLen(const kv::KvCacheConfig& config_at_context,
                                   uint64_t budget_bytes, int64_t context_length,
                                   std::optional<int64_t> requested);

}  // namespace kvserve::engine
