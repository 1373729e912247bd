#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.h"
#include "core/units.h"
#include "gguf/gguf.h"
#include "model/architecture.h"
#include "model/kv_layout.h"
#include "sampling/rng.h"
#include "tokenizer/vocab.h"

namespace kvserve::engine {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

bool FitsOneRequest(kv::KvCacheConfig config, uint64_t budget_bytes, int64_t max_model_len) {
  config.max_model_len = max_model_len;
  Result<kv::KvCapacity> capacity = kv::ComputeCapacity(config, budget_bytes);
  return capacity.ok() && capacity->max_concurrency >= 1.0;
}

}  // namespace

Result<int64_t> ResolveMaxModelLen(const kv::KvCacheConfig& config, uint64_t budget_bytes,
                                   int64_t context_length, std::optional<int64_t> requested) {
  if (requested && (*requested < 1 || *requested > context_length)) {
    return InvalidArgument(
        fmt::format("--max-model-len {} is outside [1, {}] (the model's "
                    "context length)",
                    *requested, context_length));
  }
  const int64_t want = requested.value_or(context_length);
  if (FitsOneRequest(config, budget_bytes, want)) return want;
  if (requested || !FitsOneRequest(config, budget_bytes, 1)) {
    return InvalidArgument(fmt::format(
        "the KV cache budget of {} cannot hold one request of {} tokens (--max-model-len); "
        "raise --kv-cache-memory or lower --max-model-len",
        FormatBytes(budget_bytes), want));
  }
  int64_t lo = 1, hi = want;  // lo fits, hi does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (FitsOneRequest(config, budget_bytes, mid) ? lo : hi) = mid;
  }
  KV_LOG(WARNING,
         "the KV cache budget of {} holds at most {} tokens for one request, fewer "
         "than the model's context length {}: lowering --max-model-len to {}",
         FormatBytes(budget_bytes), lo, context_length, lo);
  return lo;
}

Result<model::ModelKvLayout> ResolveKvLayout(const gguf::GgufFile& file, const EngineConfig& config,
                                             const gguf::GgufFile* draft) {
  KV_ASSIGN_OR_RETURN(model::ModelKvShape shape, model::ReadModelKvShape(file));
  std::optional<model::ModelKvShape> draft_shape;
  if (draft != nullptr) {
    KV_ASSIGN_OR_RETURN(draft_shape, model::ReadModelKvShape(*draft));
  }
  const int64_t context_length = draft_shape
                                     ? std::min(shape.context_length, draft_shape->context_length)
                                     : shape.context_length;
  model::KvLayoutOptions options{config.kv_cache_dtype, config.block_size, context_length,
                                 config.max_num_batched_tokens};
  auto make = [&]() -> Result<model::ModelKvLayout> {  // at options.max_model_len
    KV_ASSIGN_OR_RETURN(model::ModelKvLayout layout, model::MakeModelKvLayout(shape, options));
    if (!draft_shape) return layout;
    KV_ASSIGN_OR_RETURN(model::ModelKvLayout d, model::MakeModelKvLayout(*draft_shape, options));
    return model::AppendLayout(std::move(layout), d, "draft/");
  };
  KV_ASSIGN_OR_RETURN(model::ModelKvLayout at_context, make());
  KV_ASSIGN_OR_RETURN(options.max_model_len,
                      ResolveMaxModelLen(at_context.config, config.KvBudgetBytes(), context_length,
                                         config.max_model_len));
  return make();
}

Result<LoadedModel> LoadModel(const std::string& path, const EngineConfig& config) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> opened, gguf::GgufFile::Open(path));
  opened->MoveTensorDataToHugePages();  // decode streams every weight: fewer TLB misses
  LoadedModel m;
  m.file = std::move(opened);
  KV_ASSIGN_OR_RETURN(const model::Architecture* arch, model::FindArchitecture(*m.file));
  m.architecture = arch->name;
  std::shared_ptr<const gguf::GgufFile> draft_file;
  const model::Architecture* draft_arch = nullptr;
  if (config.speculative && !config.speculative->draft_model.empty()) {
    KV_ASSIGN_OR_RETURN(draft_file, OpenDraftModel(config.speculative->draft_model, *m.file));
    KV_ASSIGN_OR_RETURN(draft_arch, model::FindArchitecture(*draft_file));
  }
  KV_ASSIGN_OR_RETURN(m.layout, ResolveKvLayout(*m.file, config, draft_file.get()));
  model::LoadOptions load;
  load.max_batch_tokens = config.max_num_batched_tokens;
  load.max_context_tokens = static_cast<int32_t>(m.layout.config.max_model_len);
  load.max_threads = config.NumThreads();
  KV_ASSIGN_OR_RETURN(m.model, arch->load(m.file, load));
  std::string identity(arch->name);
  if (draft_file) {
    KV_ASSIGN_OR_RETURN(model::ModelKvLayout own, ResolveKvLayout(*m.file, config));
    m.draft.emplace();
    KV_ASSIGN_OR_RETURN(m.draft->model, draft_arch->load(draft_file, load));
    m.draft->first_group = static_cast<int>(own.config.groups.size());
    m.draft->first_layer = own.config.num_layers;
    // Cached blocks hold the draft's KV too: its weights are part of their identity.
    identity += "+draft:" + model::WeightsDigest(*draft_file);
  }
  m.fingerprint = model::MakeFingerprint(*m.file, identity, m.layout.config);
  return m;
}

Result<std::unique_ptr<Engine>> Engine::Load(const std::string& path, const EngineConfig& config) {
  KV_ASSIGN_OR_RETURN(LoadedModel m, LoadModel(path, config));
  kv::KvCacheManagerOptions kv_options;
  kv_options.enable_prefix_caching = config.enable_prefix_caching;
  kv_options.fingerprint = m.fingerprint;
  std::optional<int32_t> eos;
  if (Result<std::shared_ptr<const tokenizer::Vocab>> vocab = tokenizer::Vocab::FromGguf(*m.file);
      vocab.ok()) {
    eos = (*vocab)->eos_id();
  }
  return Create(std::move(m.model), m.layout.config, kv_options, config, eos, std::move(m.draft));
}

Result<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<model::Model> model,
                                               const kv::KvCacheConfig& kv_config,
                                               const kv::KvCacheManagerOptions& kv_options,
                                               const EngineConfig& config,
                                               std::optional<int32_t> eos_token_id,
                                               std::optional<Draft> draft) {
  scheduler::SchedulerConfig sc{config.max_num_seqs, config.max_num_batched_tokens,
                                kv_config.max_model_len};
  KV_RETURN_IF_ERROR(scheduler::ValidateSchedulerConfig(sc));
  if (config.NumThreads() < 1) return InvalidArgument("--threads must be at least 1");
  const uint64_t budget = config.KvBudgetBytes();
  if (config.offload && !kv_options.enable_prefix_caching) {
    return InvalidArgument(
        "KV offloading (--kv-transfer-config, --kv-offloading-size) needs "
        "prefix caching; drop --no-enable-prefix-caching");
  }
  kv::KvCacheManagerOptions options = kv_options;
  // Tier loads write blocks never written before: fault the arenas in now, not on the load.
  options.prefault_memory = options.prefault_memory || config.offload.has_value();
  // And the first step's blocks in any case (more when asked), as llama.cpp clears its
  // context's KV buffer before the first request: those K/V writes then take no page fault.
  options.prefault_tokens = std::max(config.max_num_batched_tokens, config.prefault_kv_tokens);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvCacheManager> kv,
                      kv::KvCacheManager::Create(kv_config, budget, options));
  for (const std::string& line : kv::FormatCapacityReport(kv_config, kv->capacity())) {
    KV_LOG(DEBUG, "{}", line);
  }
  std::unique_ptr<offload::TieredKvConnector> connector;
  if (config.offload) {
    connector = std::make_unique<offload::TieredKvConnector>(
        offload::OffloadManager::Create(
            *config.offload, offload::MakeRecordIdentity(kv_config, kv_options.fingerprint)),
        kv.get());
  }
  return std::unique_ptr<Engine>(new Engine(std::move(model), std::move(kv), std::move(connector),
                                            config, kv_config.max_model_len, eos_token_id,
                                            std::move(draft)));
}

Engine::Engine(std::unique_ptr<model::Model> model, std::unique_ptr<kv::KvCacheManager> kv,
               std::unique_ptr<offload::TieredKvConnector> connector, const EngineConfig& config,
               int64_t max_model_len, std::optional<int32_t> eos, std::optional<Draft> draft)
    : config_(config),
      model_(std::move(model)),
      kv_(std::move(kv)),
      connector_(std::move(connector)),
      scheduler_(std::make_unique<scheduler::Scheduler>(
          scheduler::SchedulerConfig{config.max_num_seqs, config.max_num_batched_tokens,
                                     max_model_len},
          kv_.get(), connector_.get())),
      draft_(draft ? std::make_unique<DraftModel>(std::move(draft->model), *kv_, draft->first_group,
                                                  draft->first_layer, config.max_num_seqs)
                   : nullptr),
      kv_views_(draft ? model::SubViews(model::ViewsOf(*kv_), 0, draft->first_group, 0,
                                        draft->first_layer)
                      : model::ViewsOf(*kv_)),
      pool_(config.NumThreads()),
      samplers_(static_cast<size_t>(pool_.num_threads()), sampling::Sampler(vocab_size())),
      eos_token_id_(eos),
      logits_(
          static_cast<size_t>(std::min<int64_t>(
              config.max_num_batched_tokens,
              int64_t{config.max_num_seqs} *
                  (1 + (config.speculative ? config.speculative->num_speculative_tokens : 0)))) *
          static_cast<size_t>(model_->vocab_size())) {}

Engine::~Engine() = default;

Status Engine::ValidateRequest(const EngineRequest& request) const {
  KV_RETURN_IF_ERROR(request.params.Validate());
  const int64_t num_prompt = static_cast<int64_t>(request.prompt.size());
  if (num_prompt == 0) return InvalidArgument("the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab_size()) {
      return InvalidArgument(
          fmt::format("prompt token {} is outside the vocabulary [0, {})", t, vocab_size()));
    }
  }
  return CheckContextLength(num_prompt, request.params.max_tokens.value_or(1), max_model_len());
}

Status CheckContextLength(int64_t num_prompt_tokens, int64_t max_tokens, int64_t max_model_len) {
  if (num_prompt_tokens + max_tokens <= max_model_len) return Status::Ok();
  return OutOfRange(fmt::format(
      "This model's maximum context length (--max-model-len) is {} tokens. However, you "
      "requested {} tokens ({} in the prompt, {} in the completion). Please reduce the length "
      "of the prompt or the completion.",
      max_model_len, num_prompt_tokens + max_tokens, num_prompt_tokens, max_tokens));
}

Result<ValidRequest> Engine::Validate(EngineRequest request) const {
  KV_RETURN_IF_ERROR(ValidateRequest(request));
  return ValidRequest(std::move(request));
}

Result<RequestId> Engine::AddRequest(EngineRequest request) {
  KV_ASSIGN_OR_RETURN(ValidRequest valid, Validate(std::move(request)));
  const RequestId id = next_id_++;
  AddRequest(id, std::move(valid));
  return id;
}

void Engine::AddRequest(RequestId id, ValidRequest valid) {
  EngineRequest& request = valid.request_;
  std::optional<int64_t> max_tokens;
  if (request.params.max_tokens) max_tokens = *request.params.max_tokens;
  scheduler_->AddRequest(
      {id, std::move(request.prompt), max_tokens, std::move(request.cache_salt)});
  RequestState& state = states_[id];
  state.params = std::move(request.params);
  state.seed = sampling::ResolveSeed(
      state.params.seed, request.request_id.empty() ? std::to_string(id) : request.request_id);
  state.arrival = Clock::now();
}

bool Engine::Abort(RequestId id) {
  states_.erase(id);
  return scheduler_->Abort(id);
}

// schedule -> one forward over the ragged batch -> sample -> update.
std::vector<RequestOutput> Engine::Step() {
  const scheduler::SchedulerOutput plan = scheduler_->Schedule();
  BuildBatch(plan);
  if (!batch_.sequences.empty()) model_->Forward(batch_, kv_views_, pool_, logits_.data());
  if (draft_) draft_->Mirror(all_groups_, pool_);
  const std::vector<scheduler::SampledToken> sampled = SampleAll(plan);
  const std::vector<scheduler::FinishedRequest> finished =
      scheduler_->UpdateFromOutput(plan, sampled);
  std::vector<RequestOutput> outputs = CollectOutputs(plan, sampled, finished);
  if (config_.speculative) ProposeDrafts();
  return outputs;
}

void Engine::BuildBatch(const scheduler::SchedulerOutput& plan) {
  const size_t num_groups = static_cast<size_t>(kv_->num_groups());
  const size_t model_groups = draft_ ? static_cast<size_t>(draft_->first_group()) : num_groups;
  block_tables_.clear();
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    CHECK_EQ(s.block_tables.size(), num_groups);
    block_tables_.insert(block_tables_.end(), s.block_tables.begin(), s.block_tables.end());
  }
  batch_.sequences.clear();
  all_groups_.sequences.clear();
  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    const scheduler::ScheduledRequest& s = plan.scheduled[i];
    const std::span<const std::span<const int32_t>> tables =
        std::span<const std::span<const int32_t>>(block_tables_)
            .subspan(i * num_groups, num_groups);
    const int32_t num_logits = s.needs_sample ? static_cast<int32_t>(1 + s.num_draft_tokens) : 0;
    const int32_t start = static_cast<int32_t>(s.num_computed_tokens);
    batch_.sequences.push_back({s.tokens, start, tables.first(model_groups), num_logits});
    if (draft_) all_groups_.sequences.push_back({s.tokens, start, tables, 0});
  }
}

// One token per request whose computed tokens reached its end, from its own seeded stream (more
// when it verified drafts: SampleWithDrafts). Requests are sampled in parallel (each draw
// depends only on its own logits, seed and position, so the thread that takes it changes
// nothing).
std::vector<scheduler::SampledToken> Engine::SampleAll(const scheduler::SchedulerOutput& plan) {
  std::vector<const scheduler::ScheduledRequest*> jobs;
  std::vector<int64_t> first_row;  // (jobs): the job's first row of logits_
  int64_t rows = 0;
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    if (!s.needs_sample) continue;
    jobs.push_back(&s);
    first_row.push_back(rows);
    rows += 1 + s.num_draft_tokens;
  }
  const int64_t vocab = vocab_size();
  std::vector<std::vector<sampling::SampleResult>> results(jobs.size());
  pool_.ParallelFor(jobs.size(), [&](size_t begin, size_t end, int thread) {
    for (size_t i = begin; i < end; ++i) {
      SampleWithDrafts(*jobs[i], logits_.data() + first_row[i] * vocab, samplers_[thread],
                       results[i]);
    }
  });
  std::vector<scheduler::SampledToken> sampled;
  step_tokens_.clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const scheduler::ScheduledRequest& s = *jobs[i];
    RequestState& state = states_.at(s.id);
    if (s.num_draft_tokens > 0) {
      const int64_t accepted = static_cast<int64_t>(results[i].size()) - 1;
      state.draft_backoff.Record(s.num_draft_tokens, accepted);
      metrics_.RecordDrafts(s.num_draft_tokens, accepted);
    }
    for (sampling::SampleResult& result : results[i]) {
      sampled.push_back(
          {s.id, result.token, sampling::IsStopToken(state.params, result.token, eos_token_id_)});
      step_tokens_.push_back({result.token, result.logprob, std::move(result.top_logprobs)});
    }
  }
  return sampled;
}

void Engine::SampleWithDrafts(const scheduler::ScheduledRequest& s, const float* logits,
                              sampling::Sampler& sampler,
                              std::vector<sampling::SampleResult>& out) {
  const scheduler::Request& r = *scheduler_->Find(s.id);
  const RequestState& state = states_.at(s.id);
  const int64_t vocab = vocab_size();
  const std::span<const int32_t> drafts =  // empty without drafts
      s.tokens.last(static_cast<size_t>(s.num_draft_tokens));
  std::vector<int32_t> generated;  // the output so far plus the tokens accepted this step
  if (!drafts.empty()) generated.assign(r.Output().begin(), r.Output().end());
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const std::span<const int32_t> history =
        drafts.empty() ? r.Output() : std::span<const int32_t>(generated);
    out.push_back(sampler.Sample(std::span<const float>(logits + j * vocab, vocab), state.params,
                                 {r.Prompt(), history}, state.seed));
    const int32_t token = out.back().token;
    if (j == drafts.size() || token != drafts[j] ||
        sampling::IsStopToken(state.params, token, eos_token_id_)) {
      return;
    }
    generated.push_back(token);  // the draft is the token: row j + 1 is the next position's
  }
}

void Engine::ProposeDrafts() {
  const SpeculativeConfig& spec = *config_.speculative;
  std::vector<DraftModel::Job> jobs;
  for (RequestId id : scheduler_->running()) {
    const int64_t max_drafts =
        std::min<int64_t>(spec.num_speculative_tokens, scheduler_->MaxDraftTokens(id));
    if (max_drafts == 0 || !states_.at(id).draft_backoff.ShouldDraft()) continue;
    const scheduler::Request& r = *scheduler_->Find(id);
    jobs.push_back({id, r.tokens, r.num_computed_tokens, max_drafts});
  }
  std::vector<std::vector<int32_t>> drafts;
  if (draft_) {
    drafts = draft_->Propose(jobs, *kv_, pool_);
  } else {
    for (const DraftModel::Job& job : jobs) {
      drafts.push_back(ProposeNgramDrafts(job.tokens, static_cast<int>(job.max_drafts),
                                          spec.prompt_lookup_min, spec.prompt_lookup_max));
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!drafts[i].empty()) scheduler_->SetDraftTokens(jobs[i].id, std::move(drafts[i]));
  }
}

std::vector<RequestOutput> Engine::CollectOutputs(
    const scheduler::SchedulerOutput& plan, std::span<const scheduler::SampledToken> sampled,
    std::span<const scheduler::FinishedRequest> finished) {
  const Clock::time_point now = Clock::now();
  std::vector<RequestOutput> outputs;
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    RequestState& state = states_.at(s.id);
    if (s.is_new) state.num_cached_tokens = s.num_computed_tokens;  // admitted at its hit
    if (!state.scheduled) {
      state.scheduled = true;
      state.first_scheduled = now;
      metrics_.queue_time_s.Observe(Seconds(now - state.arrival));
    }
    const bool is_decode =
        s.num_draft_tokens > 0 || (s.num_scheduled_tokens == 1 && s.needs_sample && !s.is_new);
    if (!is_decode) metrics_.num_prompt_tokens += s.num_scheduled_tokens;
  }
  for (size_t i = 0; i < sampled.size(); ++i) {
    RequestState& state = states_.at(sampled[i].id);
    if (state.num_generated++ == 0) {
      state.first_token = now;
      metrics_.time_to_first_token_s.Observe(Seconds(now - state.arrival));
    } else {
      metrics_.inter_token_latency_s.Observe(Seconds(now - state.last_token));
    }
    state.last_token = now;
    if (outputs.empty() || outputs.back().id != sampled[i].id) {
      outputs.push_back({sampled[i].id, {}, std::nullopt, "", state.num_cached_tokens});
    }
    outputs.back().tokens.push_back(std::move(step_tokens_[i]));
  }
  auto record = [&](const scheduler::FinishedRequest& f) {
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const RequestOutput& o) { return o.id == f.id; });
    if (it == outputs.end()) {
      auto state = states_.find(f.id);
      it = outputs.insert(
          outputs.end(),
          RequestOutput{
              f.id, {}, {}, "", state == states_.end() ? 0 : state->second.num_cached_tokens});
    }
    it->finish = f.reason;
    it->error = f.message;
    RecordFinish(f.id, now);
  };
  for (const scheduler::FinishedRequest& f : plan.finished) record(f);
  for (const scheduler::FinishedRequest& f : finished) record(f);
  metrics_.num_generation_tokens += static_cast<int64_t>(sampled.size());
  if (plan.num_scheduled_tokens > 0) {
    metrics_.tokens_per_step.Observe(static_cast<double>(plan.num_scheduled_tokens));
    ++metrics_.num_steps;
  }
  return outputs;
}

void Engine::RecordFinish(RequestId id, Clock::time_point now) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  const RequestState& state = it->second;
  metrics_.e2e_latency_s.Observe(Seconds(now - state.arrival));
  if (state.num_generated > 1) {
    metrics_.time_per_output_token_s.Observe(Seconds(now - state.first_token) /
                                             static_cast<double>(state.num_generated - 1));
  }
  ++metrics_.num_finished;
  states_.erase(it);
}

MetricsSnapshot Engine::Metrics() const {
  MetricsSnapshot snapshot = metrics_;
  const scheduler::SchedulerStats stats = scheduler_->Stats();
  snapshot.num_running = stats.num_running;
  snapshot.num_waiting = stats.num_waiting;
  snapshot.num_preemptions = stats.num_preemptions;
  snapshot.prefix_cache_queries = stats.prefix_query_tokens;
  snapshot.prefix_cache_hits = stats.prefix_hit_tokens;
  snapshot.prefix_cache_loaded = stats.prefix_loaded_tokens;
  snapshot.kv_usage = kv_->Stats().usage;
  return snapshot;
}

}  // namespace kvserve::engine
