#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <variant>

#include "engine/engine.h"
#include "kv/kv_cache_manager.h"
#include "sim/simulated_tiers.h"

namespace kvserve::sim {
namespace {

// One simulation's state: the serving objects, the clock and what is recorded.
class Run {
 public:
  Run(const SimSetup& setup, const CostModel& cost, std::span<const RequestSpec> workload)
      : setup_(setup), cost_(cost), workload_(workload) {}

  Status Init();
  Status Loop();
  SimResult Finish();

 private:
  static scheduler::RequestId IdOf(size_t index) { return index + 1; }
  static size_t IndexOf(scheduler::RequestId id) { return id - 1; }
  void AddArrivals();
  void Fail(size_t index, const std::string& message);
  // Advances the clock to the next event when nothing was scheduled. False: no event left.
  bool Wait();
  void Step(const scheduler::SchedulerOutput& plan);
  void Record(const scheduler::SchedulerOutput& plan,
              std::span<const scheduler::SampledToken> sampled,
              std::span<const scheduler::FinishedRequest> finished, double step_seconds);

  const SimSetup& setup_;
  const CostModel& cost_;
  std::span<const RequestSpec> workload_;
  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<SimulatedTiers> tiers_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  double now_ = 0;
  size_t next_ = 0;  // next arrival
  size_t done_ = 0;  // requests finished (or failed)
  std::vector<double> last_token_;  // per request: time of its latest token
  std::vector<SequenceWork> batch_;
  std::optional<SharedPrefixFinder> shared_;  // with a footprint term in the cost model
  std::vector<scheduler::SampledToken> sampled_;
  SimResult result_;
};

Status Run::Init() {
  KV_RETURN_IF_ERROR(scheduler::ValidateSchedulerConfig(setup_.scheduler));
  kv::KvCacheManagerOptions options;
  options.enable_prefix_caching = setup_.enable_prefix_caching;
  options.allocate_memory = false;
  options.fingerprint = {"simulated", "sim", kv::DescribeKvFormats(setup_.kv_config),
                         setup_.kv_config.block_size};
  KV_ASSIGN_OR_RETURN(kv_, kv::KvCacheManager::Create(setup_.kv_config, setup_.kv_budget_bytes,
                                                      options));
  if (kv_->capacity().max_concurrency < 1.0) {
    return InvalidArgument(fmt::format(
        "the KV cache budget of {} bytes cannot hold one request of {} tokens (--max-model-len)",
        setup_.kv_budget_bytes, setup_.kv_config.max_model_len));
  }
  if (setup_.offload) {
    if (!setup_.enable_prefix_caching) {
      return InvalidArgument("KV offloading needs prefix caching; drop --no-enable-prefix-caching");
    }
    KV_ASSIGN_OR_RETURN(tiers_, SimulatedTiers::Create(*setup_.offload, cost_.hardware(), kv_.get()));
  }
  scheduler_ = std::make_unique<scheduler::Scheduler>(setup_.scheduler, kv_.get(), tiers_.get());
  result_.requests.resize(workload_.size());
  last_token_.assign(workload_.size(), 0.0);
  result_.capacity = kv_->capacity();
  if (cost_.hardware().kv_spill_bandwidth > 0) {
    // Shared prefixes from the first full or latent group (a sliding group's leading entries
    // are null).
    const auto& groups = setup_.kv_config.groups;
    int group = 0;
    while (group + 1 < static_cast<int>(groups.size()) &&
           std::holds_alternative<kv::SlidingWindow>(groups[group].spec)) {
      ++group;
    }
    shared_.emplace(group, setup_.kv_config.block_size);
  }
  return Status::Ok();
}

void Run::Fail(size_t index, const std::string& message) {
  RequestTiming& r = result_.requests[index];
  r.error = true;
  r.finish = now_;
  ++result_.num_errors;
  if (result_.first_error.empty()) result_.first_error = message;
  ++done_;
}

void Run::AddArrivals() {
  for (; next_ < workload_.size() && workload_[next_].arrival <= now_; ++next_) {
    const RequestSpec& spec = workload_[next_];
    RequestTiming& r = result_.requests[next_];
    r.arrival = spec.arrival;
    r.input_len = spec.input_len;
    // What Engine::ValidateRequest checks of a request the workload made (lengths >= 1 by
    // construction): prompt + output within max-model-len.
    Status s = engine::CheckContextLength(spec.input_len, spec.output_len,
                                          setup_.scheduler.max_model_len);
    if (!s.ok()) {
      Fail(next_, fmt::format("request {}: {}", next_, s.message()));
      continue;
    }
    scheduler::NewRequest request;
    request.id = IdOf(next_);
    request.prompt = PromptTokens(spec, next_, setup_.seed, setup_.vocab_size);
    request.max_tokens = spec.output_len;
    scheduler_->AddRequest(std::move(request));
  }
}

bool Run::Wait() {
  std::optional<double> next_event;
  if (next_ < workload_.size()) next_event = workload_[next_].arrival;
  if (tiers_) {
    if (std::optional<double> load = tiers_->NextCompletion()) {
      next_event = std::min(next_event.value_or(*load), *load);
    }
  }
  if (!next_event) return false;
  result_.idle_seconds += std::max(0.0, *next_event - now_);
  now_ = std::max(now_, *next_event);
  return true;
}

Status Run::Loop() {
  while (done_ < workload_.size()) {
    AddArrivals();
    if (!scheduler_->HasUnfinished()) {
      if (!Wait()) break;
      continue;
    }
    if (tiers_) tiers_->SetNow(now_);
    const scheduler::SchedulerOutput plan = scheduler_->Schedule();
    for (const scheduler::FinishedRequest& f : plan.finished) Fail(IndexOf(f.id), f.message);
    if (plan.scheduled.empty()) {
      if (!plan.finished.empty()) continue;
      if (!Wait()) {
        return Internal(fmt::format("the simulation stopped making progress at t = {} s with {} "
                                    "requests unfinished", now_, workload_.size() - done_));
      }
      continue;
    }
    Step(plan);
  }
  return Status::Ok();
}

// The step: its cost, then the scheduler's update with one token per sampled sequence. The
// tier copies on the scheduler thread (evictions while scheduling, write-through of the blocks
// the update caches) are part of the step, as in Engine::Step, before its tokens come out.
void Run::Step(const scheduler::SchedulerOutput& plan) {
  batch_.clear();
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    batch_.push_back({s.num_computed_tokens, s.num_scheduled_tokens, s.needs_sample});
  }
  if (shared_) shared_->Mark(plan.scheduled, batch_);
  const StepCost cost = cost_.Cost(batch_);
  for (int k = 0; k < kNumOpKinds; ++k) {
    result_.work[k] += cost.work[k];
    result_.op_seconds[k] += cost.seconds_by[k];
  }
  sampled_.clear();
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    if (!s.needs_sample) continue;
    const int64_t position = s.num_computed_tokens + s.num_scheduled_tokens;
    sampled_.push_back({s.id, GeneratedToken(setup_.seed, IndexOf(s.id), position,
                                             setup_.vocab_size), false});
  }
  const std::vector<scheduler::FinishedRequest> finished =
      scheduler_->UpdateFromOutput(plan, sampled_);
  const double store = tiers_ ? tiers_->TakeStoreSeconds() : 0.0;
  result_.store_seconds += store;
  now_ += cost.seconds + store;
  Record(plan, sampled_, finished, cost.seconds + store);
}

void Run::Record(const scheduler::SchedulerOutput& plan,
                 std::span<const scheduler::SampledToken> sampled,
                 std::span<const scheduler::FinishedRequest> finished, double step_seconds) {
  bool any_prompt = false;
  for (const scheduler::ScheduledRequest& s : plan.scheduled) {
    RequestTiming& r = result_.requests[IndexOf(s.id)];
    if (s.is_new) r.num_cached_tokens = s.num_computed_tokens;
    const bool is_decode = s.num_scheduled_tokens == 1 && s.needs_sample && !s.is_new;
    if (!is_decode) {
      result_.num_prompt_tokens += s.num_scheduled_tokens;
      any_prompt = true;
    }
  }
  for (scheduler::RequestId id : plan.preempted) ++result_.requests[IndexOf(id)].num_preemptions;
  for (const scheduler::SampledToken& t : sampled) {
    const size_t i = IndexOf(t.id);
    RequestTiming& r = result_.requests[i];
    if (r.num_generated++ == 0) {
      r.first_token = now_;
    } else {
      result_.inter_token_latencies.push_back(now_ - last_token_[i]);
    }
    last_token_[i] = now_;
  }
  for (const scheduler::FinishedRequest& f : finished) {
    if (f.reason == scheduler::FinishReason::kError) {
      Fail(IndexOf(f.id), f.message);
      continue;
    }
    result_.requests[IndexOf(f.id)].finish = now_;
    ++done_;
  }
  result_.num_generation_tokens += static_cast<int64_t>(sampled.size());
  ++result_.num_steps;
  if (!any_prompt) {
    ++result_.num_decode_steps;
    result_.num_decode_tokens += static_cast<int64_t>(sampled.size());
    result_.decode_seconds += step_seconds;
  }
  const scheduler::SchedulerStats stats = scheduler_->Stats();
  result_.timeline.push_back(
      {now_, kv_->Stats().usage, stats.num_running, stats.num_waiting, stats.num_loading});
}

SimResult Run::Finish() {
  result_.elapsed = now_;
  result_.stats = scheduler_->Stats();
  if (tiers_) result_.tiers = tiers_->Stats();
  return std::move(result_);
}

}  // namespace

void SharedPrefixFinder::Mark(std::span<const scheduler::ScheduledRequest> scheduled,
                              std::span<SequenceWork> batch) {
  ++step_;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    int64_t leading = 0;
    bool prefix = true;
    for (kv::BlockId id : scheduled[i].block_tables.at(group_)) {
      if (id == kv::kNullBlock) continue;
      const auto slot = static_cast<size_t>(id);
      if (slot >= last_read_.size()) last_read_.resize(slot + 1, 0);
      prefix = prefix && last_read_[slot] == step_;
      if (prefix) ++leading;
      last_read_[slot] = step_;
    }
    SequenceWork& w = batch[i];
    w.shared_prefix_tokens =
        std::min(leading * block_size_, w.num_computed_tokens + w.num_new_tokens);
  }
}

Result<SimResult> Simulate(const SimSetup& setup, const CostModel& cost,
                           std::span<const RequestSpec> workload) {
  const auto start = std::chrono::steady_clock::now();
  Run run(setup, cost, workload);
  KV_RETURN_IF_ERROR(run.Init());
  KV_RETURN_IF_ERROR(run.Loop());
  SimResult result = run.Finish();
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kvserve::sim
