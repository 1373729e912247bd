// Simulator: the real scheduler::Scheduler and kv::KvCacheManager (and, with tiers, the CPU
// tier's real LRU inside SimulatedTiers) driven in virtual time; only the forward pass is
// replaced by the cost model. No second scheduler: every admission, chunk, preemption, prefix
// hit and tier load below is the serving code's own decision.
//
// One step, as Engine::Step does it, with the clock in place of the model:
//   1. requests whose arrival time has come are added (Scheduler::AddRequest);
//   2. Scheduler::Schedule() plans the step (the KV manager holds no arena: bookkeeping only);
//   3. every sequence that reached its end "samples" a token (workload.h GeneratedToken;
//      stop = false, like `bench throughput`'s ignore_eos) and Scheduler::UpdateFromOutput
//      applies the step;
//   4. the step takes CostModel::Cost(batch) seconds plus the tier copies the scheduler thread
//      made in 2 and 3 (SimulatedTiers::TakeStoreSeconds): now += that; the tokens are
//      stamped at the new time, finished requests recorded.
// When nothing can be scheduled (an empty system, or requests waiting on tier loads) the clock
// jumps to the next arrival or load completion. Everything depends only on the inputs: the
// same setup and workload give the same result, bit for bit (tests/sim/simulator_test.cc).
// Thread safety: Simulate is reentrant (it owns all its state).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/config.h"
#include "offload/config.h"
#include "offload/metrics.h"
#include "scheduler/scheduler.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/workload.h"

namespace kvserve::sim {

// Everything the serving engine would be configured with, for one TP rank.
struct SimSetup {
  scheduler::SchedulerConfig scheduler;  // max_model_len resolved
  kv::KvCacheConfig kv_config;           // per rank
  uint64_t kv_budget_bytes = 0;          // per rank
  bool enable_prefix_caching = true;
  std::optional<offload::OffloadConfig> offload;  // cpu_bytes_to_use: this rank's share
  int32_t vocab_size = 32000;
  uint64_t seed = 0;
};

struct RequestTiming {
  double arrival = 0;
  std::optional<double> first_token;  // seconds since the start
  std::optional<double> finish;
  int64_t input_len = 0;
  int64_t num_generated = 0;
  int64_t num_cached_tokens = 0;  // prefix hit at its latest admission (device and tiers)
  int64_t num_preemptions = 0;
  bool error = false;             // rejected or failed (the scheduler's kError)
};

// One sample of the system's state, taken after every step.
struct TimelinePoint {
  double time = 0;
  double kv_usage = 0;  // fraction of KV blocks held by requests (max over groups)
  int num_running = 0;
  int num_waiting = 0;  // queued, including requests waiting on tier loads
  int num_loading = 0;
};

struct SimResult {
  double elapsed = 0;  // virtual seconds until the last request finished
  std::vector<RequestTiming> requests;  // in workload order
  std::vector<double> inter_token_latencies;  // every gap between a request's tokens
  int64_t num_steps = 0;
  int64_t num_prompt_tokens = 0;      // computed in prefill chunks (prompts, recomputes)
  int64_t num_generation_tokens = 0;  // sampled
  int64_t num_decode_steps = 0;       // steps that computed no prompt token
  int64_t num_decode_tokens = 0;
  double decode_seconds = 0;
  scheduler::SchedulerStats stats;    // preemptions, prefix-cache hits (at the end)
  int64_t num_errors = 0;
  std::string first_error;
  kv::KvCapacity capacity;            // what the KV manager allocated (blocks, tokens)
  std::vector<offload::TierStats> tiers;  // cpu, file, redis (configured ones)
  std::array<Work, kNumOpKinds> work{};   // summed over steps (per rank)
  std::array<double, kNumOpKinds> op_seconds{};
  double store_seconds = 0;               // tier copies on the scheduler thread
  double idle_seconds = 0;  // the clock waiting with nothing to run: arrivals, tier loads
  std::vector<TimelinePoint> timeline;
  double wall_seconds = 0;                // real time the simulation took
};

// For the cost model's KV footprint: how many leading context tokens of each sequence of a step
// are blocks an earlier sequence of the same step also reads (a prefix-cache hit shares them),
// from one group's block tables (kNullBlock entries skipped), into each SequenceWork's
// shared_prefix_tokens (capped at its context). Example, block size 16: tables {1 2 3},
// {1 2 4}, {5 2} give 0, 32 and 0 tokens (the third's first block is its own). O(blocks) per
// step. Not thread-safe (one per simulation).
class SharedPrefixFinder {
 public:
  SharedPrefixFinder(int group, int64_t block_size) : group_(group), block_size_(block_size) {}
  void Mark(std::span<const scheduler::ScheduledRequest> scheduled,
            std::span<SequenceWork> batch);

 private:
  int group_;
  int64_t block_size_;
  std::vector<uint64_t> last_read_;  // per block id: the step that read it
  uint64_t step_ = 0;
};

// Runs `workload` (sorted by arrival) to the end. InvalidArgument for a setup the server would
// refuse (a bad config, a budget below one max-length request); Internal if the system stops
// making progress (a bug: the scheduler always schedules or waits for a load).
Result<SimResult> Simulate(const SimSetup& setup, const CostModel& cost,
                           std::span<const RequestSpec> workload);

}  // namespace kvserve::sim
