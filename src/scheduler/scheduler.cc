#include "scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace kvserve::scheduler {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Status ValidateSchedulerConfig(const SchedulerConfig& config) {
  if (config.max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be at least 1");
  if (config.max_num_batched_tokens < 1) {
    return InvalidArgument("--max-num-batched-tokens must be at least 1");
  }
  if (config.max_model_len < 1) return InvalidArgument("--max-model-len must be at least 1");
  return Status::Ok();
}

int64_t SchedulerOutput::NumToSample() const {
  return std::count_if(scheduled.begin(), scheduled.end(),
                       [](const ScheduledRequest& s) { return s.needs_sample; });
}

// Per-step scratch: what is left of the budget and who is already in the output.
struct Scheduler::StepState {
  int64_t budget = 0;
  bool preempted_any = false;
};

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvCacheManager* kv,
                     kv::KvConnector* connector)
    : config_(config), kv_(kv), connector_(connector) {
  CHECK(kv_ != nullptr);
  CHECK(ValidateSchedulerConfig(config_).ok()) << ValidateSchedulerConfig(config_).ToString();
}

void Scheduler::AddRequest(NewRequest request) {
  const int64_t num_prompt = static_cast<int64_t>(request.prompt.size());
  CHECK_GE(num_prompt, 1) << "request " << request.id << ": an empty prompt";
  CHECK(!request.max_tokens || *request.max_tokens >= 1) << "request " << request.id;
  CHECK_LE(num_prompt + request.max_tokens.value_or(1), config_.max_model_len)
      << "request " << request.id << " is longer than max_model_len";
  CHECK_EQ(requests_.count(request.id), 0u) << "request id " << request.id << " is in use";
  auto r = std::make_unique<Request>();
  r->id = request.id;
  r->num_prompt_tokens = static_cast<int64_t>(request.prompt.size());
  r->max_tokens = request.max_tokens.value_or(config_.max_model_len - r->num_prompt_tokens);
  r->tokens = std::move(request.prompt);
  r->tokens.reserve(r->num_prompt_tokens + r->max_tokens);
  r->cache_salt = std::move(request.cache_salt);
  r->arrival_index = next_arrival_++;
  waiting_.push_back(r->id);
  requests_[r->id] = std::move(r);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  StepState step;
  step.budget = config_.max_num_batched_tokens;
  FinishLoads(std::chrono::milliseconds(0));
  ScheduleRunning(/*decodes=*/true, step, out);
  ScheduleRunning(/*decodes=*/false, step, out);
  if (!step.preempted_any) ScheduleWaiting(step, out);
  ScheduleDrafts(step, out);
  out.num_scheduled_tokens = config_.max_num_batched_tokens - step.budget;
  FillBlockTables(out);
  // Nothing to compute but loads in flight: wait a little for one instead of spinning.
  if (out.scheduled.empty() && out.finished.empty()) FinishLoads(std::chrono::milliseconds(5));
  return out;
}

void Scheduler::ScheduleRunning(bool decodes, StepState& step, SchedulerOutput& out) {
  // Preemption edits running_, so walk a copy and skip ids that left it this step: only
  // Preempt (out.preempted) and FinishWithError (out.finished) remove a running request here,
  // and both lists are almost always empty (a std::find in running_ per id was quadratic).
  auto left = [&out](RequestId id) {
    return std::find(out.preempted.begin(), out.preempted.end(), id) != out.preempted.end() ||
           std::any_of(out.finished.begin(), out.finished.end(),
                       [id](const FinishedRequest& f) { return f.id == id; });
  };
  const std::vector<RequestId> order = running_;
  for (RequestId id : order) {
    if (step.budget == 0) return;
    if (left(id)) continue;
    Request& r = *requests_.at(id);
    if (r.IsDecoding() != decodes) continue;
    ScheduleOneRunning(r, step, out);
  }
}

// Reserves blocks for r's next chunk, preempting the newest running requests until they fit.
// Returns whether r was scheduled.
bool Scheduler::ScheduleOneRunning(Request& r, StepState& step, SchedulerOutput& out) {
  const int64_t n = std::min(r.NumTokens() - r.num_computed_tokens, step.budget);
  CHECK_GT(n, 0) << "running request " << r.id << " has nothing to compute";
  while (!kv_->AllocateSlots(r.id, r.num_computed_tokens, n)) {
    if (running_.size() == 1) {
      // The last running request. Blocks that requests off the running list hold (tier loads
      // in flight, or back from one and waiting) are not a reason to fail it: release the
      // waiting ones' (their loaded blocks stay in the prefix cache), or wait for the loads.
      if (ReleaseParkedBlocks()) continue;
      if (!loading_.empty()) return false;
      FinishWithError(r,
                      fmt::format("request {} needs more KV cache blocks than the whole "
                                  "cache holds ({} tokens so far)",
                                  r.id, r.NumTokens()),
                      out);
      return false;
    }
    const RequestId victim = running_.back();
    Preempt(victim, step, out);
    if (victim == r.id) return false;
  }
  ScheduledRequest s;
  s.id = r.id;
  s.num_computed_tokens = r.num_computed_tokens;
  s.num_scheduled_tokens = n;
  s.needs_sample = r.num_computed_tokens + n == r.NumTokens();
  s.tokens = std::span<const TokenId>(r.tokens).subspan(r.num_computed_tokens, n);
  out.scheduled.push_back(std::move(s));
  step.budget -= n;
  return true;
}

void Scheduler::ScheduleDrafts(StepState& step, SchedulerOutput& out) {
  for (ScheduledRequest& s : out.scheduled) {
    if (step.budget == 0) return;
    Request& r = *requests_.at(s.id);
    if (r.draft_tokens.empty() || !r.IsDecoding() || s.num_scheduled_tokens != 1) continue;
    const int64_t k = std::min<int64_t>(static_cast<int64_t>(r.draft_tokens.size()), step.budget);
    if (!kv_->AllocateSlots(r.id, r.num_computed_tokens, 1 + k)) continue;
    r.verify_tokens.assign(1, r.tokens.back());
    r.verify_tokens.insert(r.verify_tokens.end(), r.draft_tokens.begin(),
                           r.draft_tokens.begin() + k);
    r.draft_tokens.clear();
    s.num_scheduled_tokens = 1 + k;
    s.num_draft_tokens = k;
    s.tokens = r.verify_tokens;
    step.budget -= k;
  }
}

int64_t Scheduler::MaxDraftTokens(RequestId id) const {
  const Request& r = *requests_.at(id);
  if (!r.IsDecoding()) return 0;
  const int64_t may_emit =
      std::min(r.max_tokens - r.NumOutputTokens(), config_.max_model_len - r.NumTokens());
  return std::max<int64_t>(0, may_emit - 1);
}

void Scheduler::SetDraftTokens(RequestId id, std::vector<TokenId> drafts) {
  CHECK_LE(static_cast<int64_t>(drafts.size()), MaxDraftTokens(id)) << "request " << id;
  requests_.at(id)->draft_tokens = std::move(drafts);
}

void Scheduler::ScheduleWaiting(StepState& step, SchedulerOutput& out) {
  while (!waiting_.empty() && step.budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request& r = *requests_.at(waiting_.front());
    if (kv_->HasRequest(r.id)) {  // back from a lower-tier load, blocks in hand
      const int64_t n = std::min(r.NumTokens() - r.num_computed_tokens, step.budget);
      if (kv_->AllocateSlots(r.id, r.num_computed_tokens, n)) {
        Admit(r, n, step, out);
        continue;
      }
      if (!running_.empty()) return;  // wait for running requests to free blocks
      kv_->Free(r.id);                // its loaded blocks stay in the prefix cache: admit it afresh
      r.num_computed_tokens = 0;
      continue;
    }
    kv::PrefixHit hit = kv_->FindLongestCachedPrefix(r.tokens, r.cache_salt,
                                                     r.use_lower_tiers ? connector_ : nullptr);
    if (hit.num_load_blocks > 0) {
      if (StartLoad(r, std::move(hit))) continue;
      if (!running_.empty()) return;        // wait for running requests to free blocks
      if (ReleaseParkedBlocks()) continue;  // parked requests' blocks are free now: again
      if (!loading_.empty()) return;        // wait for the loads in flight
      r.use_lower_tiers = false;  // the hit alone does not fit: try without the tiers
      continue;
    }
    const int64_t num_cached = hit.num_cached_tokens;
    const int64_t n = std::min(r.NumTokens() - num_cached, step.budget);
    if (!kv_->AllocateNew(r.id, std::move(hit), n)) {
      if (!running_.empty()) return;        // wait for running requests to free blocks
      if (ReleaseParkedBlocks()) continue;  // parked requests' blocks are free now: again
      if (!loading_.empty()) return;        // wait for the loads in flight
      waiting_.pop_front();
      running_.push_back(r.id);  // FinishWithError removes it from running_
      FinishWithError(r,
                      fmt::format("request {} needs more KV cache blocks than the whole "
                                  "cache holds ({} tokens)",
                                  r.id, r.NumTokens()),
                      out);
      continue;
    }
    r.num_cached_tokens = num_cached;
    r.num_loaded_tokens = 0;
    r.loaded_tokens_per_tier.clear();
    r.num_computed_tokens = num_cached;
    Admit(r, n, step, out);
  }
}

void Scheduler::Admit(Request& r, int64_t n, StepState& step, SchedulerOutput& out) {
  waiting_.pop_front();
  running_.push_back(r.id);
  prefix_query_tokens_ += r.NumTokens();
  prefix_hit_tokens_ += r.num_computed_tokens;
  prefix_loaded_tokens_ += r.num_loaded_tokens;
  ScheduledRequest s;
  s.id = r.id;
  s.num_computed_tokens = r.num_computed_tokens;
  s.num_scheduled_tokens = n;
  s.needs_sample = r.num_computed_tokens + n == r.NumTokens();
  s.is_new = true;
  s.tokens = std::span<const TokenId>(r.tokens).subspan(r.num_computed_tokens, n);
  out.scheduled.push_back(std::move(s));
  step.budget -= n;
}

bool Scheduler::StartLoad(Request& r, kv::PrefixHit hit) {
  const int64_t num_cached = hit.num_cached_tokens;
  std::optional<kv::NewBlocks> blocks = kv_->AllocateNew(r.id, std::move(hit), 0);
  if (!blocks) return false;
  waiting_.pop_front();
  loading_.insert(r.id);
  r.num_cached_tokens = num_cached;
  r.pending_loads = std::move(blocks->loads);
  connector_->StartLoad(r.id, r.pending_loads);
  return true;
}

void Scheduler::FinishLoads(std::chrono::milliseconds wait) {
  if (connector_ == nullptr || loading_.empty()) return;
  for (const kv::FinishedLoad& done : connector_->PollLoads(wait)) {
    if (loading_.erase(done.id) == 0) continue;  // aborted meanwhile
    Request& r = *requests_.at(done.id);
    const std::span<const kv::BlockLoad> loads(r.pending_loads);
    const std::span<const kv::BlockLoad> loaded = loads.first(std::min(done.num_loaded, loads.size()));
    kv_->CommitLoadedBlocks(r.id, loaded);
    std::vector<int64_t> per_group(kv_->num_groups(), 0);
    for (const kv::BlockLoad& l : loaded) ++per_group[l.group];
    const int64_t loaded_tokens =
        *std::max_element(per_group.begin(), per_group.end()) * kv_->config().block_size;
    if (done.num_loaded == loads.size()) {
      r.num_computed_tokens = r.num_cached_tokens;
      r.num_loaded_tokens = loaded_tokens;  // counted when the request is scheduled
      r.loaded_tokens_per_tier = done.tokens_per_tier;
    } else {  // what arrived is cached now; recompute the rest without the tiers
      prefix_loaded_tokens_ += loaded_tokens;  // loaded all the same (the metric counts it)
      kv_->Free(r.id);
      r.num_computed_tokens = 0;
      r.num_cached_tokens = 0;
      r.use_lower_tiers = false;
    }
    r.pending_loads.clear();
    waiting_.push_front(r.id);
  }
}

bool Scheduler::ReleaseParkedBlocks() {
  bool released = false;
  for (RequestId id : waiting_) {
    if (!kv_->HasRequest(id)) continue;
    kv_->Free(id);
    requests_.at(id)->num_computed_tokens = 0;
    released = true;
  }
  return released;
}

void Scheduler::Preempt(RequestId victim, StepState& step, SchedulerOutput& out) {
  Request& v = *requests_.at(victim);
  auto it = std::find_if(out.scheduled.begin(), out.scheduled.end(),
                         [&](const ScheduledRequest& s) { return s.id == victim; });
  if (it != out.scheduled.end()) {  // scheduled earlier this step: give its tokens back
    step.budget += it->num_scheduled_tokens;
    out.scheduled.erase(it);
  }
  kv_->Free(victim);
  v.num_computed_tokens = 0;
  v.draft_tokens.clear();
  ++v.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  waiting_.push_front(victim);
  out.preempted.push_back(victim);
  step.preempted_any = true;
}

void Scheduler::FinishWithError(Request& r, std::string message, SchedulerOutput& out) {
  out.finished.push_back({r.id, FinishReason::kError, std::move(message)});
  Remove(r.id);
}

void Scheduler::Remove(RequestId id) {
  if (loading_.erase(id) != 0) connector_->CancelLoad(id);
  if (kv_->HasRequest(id)) kv_->Free(id);
  // A request is in at most one queue; most leave running, so look there first (the waiting
  // queue may hold thousands).
  if (auto run_it = std::find(running_.begin(), running_.end(), id); run_it != running_.end()) {
    running_.erase(run_it);
  } else if (auto wait_it = std::find(waiting_.begin(), waiting_.end(), id);
             wait_it != waiting_.end()) {
    waiting_.erase(wait_it);
  }
  requests_.erase(id);
}

void Scheduler::FillBlockTables(SchedulerOutput& out) const {
  for (ScheduledRequest& s : out.scheduled) {
    s.block_tables.clear();
    for (int g = 0; g < kv_->num_groups(); ++g) s.block_tables.push_back(kv_->BlockTable(s.id, g));
  }
}

std::vector<FinishedRequest> Scheduler::UpdateFromOutput(const SchedulerOutput& output,
                                                         std::span<const SampledToken> sampled) {
  std::vector<FinishedRequest> finished;
  size_t next_sample = 0;
  for (const ScheduledRequest& s : output.scheduled) {
    Request& r = *requests_.at(s.id);
    CHECK_EQ(r.num_computed_tokens, s.num_computed_tokens) << "request " << s.id;
    std::optional<FinishReason> reason;
    int64_t num_sampled = 0;
    while (s.needs_sample && !reason && next_sample < sampled.size() &&
           sampled[next_sample].id == s.id) {
      CHECK_LE(num_sampled, s.num_draft_tokens) << "too many tokens for request " << s.id;
      const SampledToken& t = sampled[next_sample++];
      ++num_sampled;
      r.tokens.push_back(t.token);
      if (t.stop) {
        reason = FinishReason::kStop;
      } else if (r.NumOutputTokens() >= r.max_tokens || r.NumTokens() >= config_.max_model_len) {
        reason = FinishReason::kLength;
      }
    }
    CHECK(!s.needs_sample || num_sampled > 0) << "no sampled token for request " << s.id;
    // With drafts, the KV of [last token, accepted drafts] is valid: num_sampled positions.
    r.num_computed_tokens += s.num_draft_tokens > 0 ? num_sampled : s.num_scheduled_tokens;
    if (num_sampled < 1 + s.num_draft_tokens && s.num_draft_tokens > 0 && !reason) {
      kv_->TruncateSlots(r.id, r.num_computed_tokens);  // release rejected positions' blocks
    }
    kv_->CacheFullBlocks(r.id, r.tokens, r.num_computed_tokens);
    if (reason) {
      finished.push_back({r.id, *reason, ""});
      Remove(r.id);
    }
  }
  CHECK_EQ(next_sample, sampled.size()) << "more sampled tokens than requests to sample";
  return finished;
}

bool Scheduler::Abort(RequestId id) {
  if (requests_.count(id) == 0) return false;
  Remove(id);
  return true;
}

const Request* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats;
  stats.num_running = static_cast<int>(running_.size());
  stats.num_waiting = static_cast<int>(waiting_.size() + loading_.size());
  stats.num_loading = static_cast<int>(loading_.size());
  stats.prefix_loaded_tokens = prefix_loaded_tokens_;
  stats.num_preemptions = num_preemptions_;
  stats.prefix_query_tokens = prefix_query_tokens_;
  stats.prefix_hit_tokens = prefix_hit_tokens_;
  return stats;
}

}  // namespace kvserve::scheduler
