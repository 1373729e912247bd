// Scheduler: vLLM v1's request state machine and token budget over kv::KvCacheManager.
//
// Each Schedule() spends one budget of max_num_batched_tokens:
//   1. running requests that decode (one token each), oldest first;
//   2. running requests still computing their prompt, a chunk each, oldest first;
//   3. waiting requests in FIFO order, while fewer than max_num_seqs run and blocks can be
//      reserved for their first chunk (after a prefix-cache lookup: cached tokens are skipped).
// A running request that cannot get blocks preempts the newest running request (its blocks
// are freed; it goes to the front of the waiting queue with num_computed_tokens = 0 and will
// find most of its KV again in the prefix cache). No admission happens in a step that
// preempted. A request that cannot get blocks while it is the only one running first takes
// back the blocks of waiting requests that returned from a tier load, and waits while loads
// are in flight; only when nobody else holds blocks can it never run: it finishes with kError
// and the others go on.
//
// Example (block 4, 6 usable blocks, budget 16): A (prompt 10) and B (prompt 14) arrive.
//   step 1: A 10 tokens (3 blocks, sampled), B a 6-token chunk (2 blocks); 1 block free.
//   step 2: A decodes 1 token (still 3 blocks); B's last 8 tokens need 4 blocks, 2 more than
//           it has but only 1 is free: B, the newest, is preempted (2 blocks freed) and waits
//           at the front of the queue; its full first block stays in the prefix cache.
// (tests/scheduler/scheduler_test.cc runs this trace.)
// Lower tiers (kv/kv_connector.h): a waiting request whose prefix hit includes blocks only a
// lower tier holds gets device blocks for the whole hit, leaves the queue while its blocks
// load on the connector's threads (other requests keep running) and returns to the front of
// the queue with num_computed_tokens = the hit. A load that comes up short registers what
// did arrive, frees the rest and readmits the request without lower-tier lookups.
// Speculative decoding: a decoding request may carry draft tokens (SetDraftTokens); it is then
// scheduled with 1 + k tokens, [last token, d1..dk], which count against the token budget and
// need KV slots like any others. Speculation never preempts: when the drafts do not fit the
// budget or the free blocks, fewer (or none) are verified. UpdateFromOutput takes 1..k+1
// sampled tokens for it (the engine's acceptance rule), advances num_computed_tokens past the
// accepted ones only, and releases the blocks that held only rejected positions; rejected
// tokens never enter the request's tokens, so they are never hashed into the prefix cache.
// The scheduler includes no model and no math (DESIGN.md hard rule): it hands out a plain
// SchedulerOutput and takes sampled tokens back in UpdateFromOutput.
// Thread safety: none; one engine thread owns it. config() only reads the immutable
// config and may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "scheduler/request.h"

namespace kvserve::scheduler {

struct SchedulerConfig {
  int max_num_seqs = 256;                 // --max-num-seqs
  int64_t max_num_batched_tokens = 2048;  // --max-num-batched-tokens
  int64_t max_model_len = 2048;           // --max-model-len: prompt + max_tokens limit
};

// InvalidArgument unless every limit is positive.
Status ValidateSchedulerConfig(const SchedulerConfig& config);

// One request's part of a step.
struct ScheduledRequest {
  RequestId id = 0;
  int64_t num_computed_tokens = 0;   // before this step: the first position computed now
  int64_t num_scheduled_tokens = 0;  // tokens computed this step, >= 1
  bool needs_sample = false;         // this step reaches the end of its tokens: sample one
  bool is_new = false;               // admitted (or readmitted) this step
  std::span<const TokenId> tokens;   // the tokens computed this step (valid until Update)
  // Drafts being verified: the last num_draft_tokens of `tokens` (then needs_sample, and the
  // engine samples up to 1 + num_draft_tokens tokens).
  int64_t num_draft_tokens = 0;
  // [group] block tables covering [0, num_computed_tokens + num_scheduled_tokens) (valid
  // until the next scheduler call).
  std::vector<std::span<const kv::BlockId>> block_tables;
};

struct FinishedRequest {
  RequestId id = 0;
  FinishReason reason = FinishReason::kStop;
  std::string message;  // why, for kError
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // decodes, then prefill chunks, then new requests
  std::vector<RequestId> preempted;         // preempted in this step
  std::vector<FinishedRequest> finished;    // ended while scheduling (kError)
  int64_t num_scheduled_tokens = 0;         // <= max_num_batched_tokens

  int64_t NumToSample() const;
};

// A token sampled for a request with needs_sample, and whether it stops the request (a stop
// or EOS token; the scheduler itself checks max_tokens and max-model-len). A request that
// verified k drafts gets 1..k+1 of them, in order: the accepted drafts, then the next token.
struct SampledToken {
  RequestId id = 0;
  TokenId token = 0;
  bool stop = false;
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
  int64_t num_preemptions = 0;        // since start
  int64_t prefix_query_tokens = 0;    // tokens looked up at admissions
  int64_t prefix_hit_tokens = 0;      // of which found in the cache (any tier)
  int64_t prefix_loaded_tokens = 0;   // of which loaded from a tier below the device pool
  int num_loading = 0;                // requests waiting for their blocks to load
};

class Scheduler {
 public:
  // note: kv (and connector, when set) outlive the scheduler; config is valid (CHECKed).
  Scheduler(const SchedulerConfig& config, kv::KvCacheManager* kv,
            kv::KvConnector* connector = nullptr);

  const SchedulerConfig& config() const { return config_; }

  // Queues the request (waiting).
  // note: the engine validated it (Engine::ValidateRequest): a prompt of at least one token,
  // max_tokens >= 1 when set, prompt + max_tokens <= max_model_len; the id is unused (CHECKed).
  void AddRequest(NewRequest request);

  // Plans one step (see the class comment). Reserves the blocks of everything scheduled.
  SchedulerOutput Schedule();

  // The most draft tokens request `id` may verify next step: fewer than it may still emit
  // (max_tokens, max-model-len) so that accepting every draft plus the next token stays in
  // bounds; 0 when it is not decoding.
  int64_t MaxDraftTokens(RequestId id) const;
  // Proposes drafts to follow the request's last token in the next step (replacing any).
  // note: drafts.size() <= MaxDraftTokens(id) (CHECKed).
  void SetDraftTokens(RequestId id, std::vector<TokenId> drafts);

  // Applies a step: advances num_computed_tokens, appends sampled tokens (in the order of
  // the scheduled requests with needs_sample; 1..k+1 for a request that verified k drafts),
  // registers newly full blocks in the prefix cache, and finishes requests that stopped or hit
  // a length limit (blocks freed).
  std::vector<FinishedRequest> UpdateFromOutput(const SchedulerOutput& output,
                                                std::span<const SampledToken> sampled);

  // Removes a waiting or running request and frees its blocks. False when unknown.
  bool Abort(RequestId id);

  const Request* Find(RequestId id) const;
  bool HasUnfinished() const {
    return !running_.empty() || !waiting_.empty() || !loading_.empty();
  }
  const std::vector<RequestId>& running() const { return running_; }
  const std::deque<RequestId>& waiting() const { return waiting_; }
  // Requests whose prefix is loading from a lower tier (off both queues), in no order.
  const std::unordered_set<RequestId>& loading() const { return loading_; }
  SchedulerStats Stats() const;

 private:
  struct StepState;
  void ScheduleRunning(bool decodes, StepState& step, SchedulerOutput& out);
  bool ScheduleOneRunning(Request& r, StepState& step, SchedulerOutput& out);
  void ScheduleWaiting(StepState& step, SchedulerOutput& out);
  // Extends scheduled decodes with their draft tokens, within the budget and free blocks the
  // rest of the step left.
  void ScheduleDrafts(StepState& step, SchedulerOutput& out);
  // Admits waiting request r with n tokens to compute from r.num_computed_tokens.
  void Admit(Request& r, int64_t n, StepState& step, SchedulerOutput& out);
  // Starts r's lower-tier load; false (nothing changed) when its blocks cannot be reserved.
  bool StartLoad(Request& r, kv::PrefixHit hit);
  // Moves requests whose loads finished back to the waiting queue.
  void FinishLoads(std::chrono::milliseconds wait);
  // Frees the blocks of waiting requests that hold some (back from a tier load, not yet
  // readmitted); they will look their prefix up again. True when any was freed.
  bool ReleaseParkedBlocks();
  void Preempt(RequestId victim, StepState& step, SchedulerOutput& out);
  void FinishWithError(Request& r, std::string message, SchedulerOutput& out);
  void Remove(RequestId id);
  void FillBlockTables(SchedulerOutput& out) const;

  SchedulerConfig config_;
  kv::KvCacheManager* kv_;
  kv::KvConnector* connector_;  // null: no lower tiers
  std::unordered_set<RequestId> loading_;  // off the queues, blocks loading
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<RequestId> running_;  // admission order: newest last
  std::deque<RequestId> waiting_;   // FIFO; preempted requests go to the front
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prefix_loaded_tokens_ = 0;
};

}  // namespace kvserve::scheduler
