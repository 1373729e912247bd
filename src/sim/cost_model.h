// CostModel: the seconds one engine step takes on one tensor-parallel rank, from the batch the
// scheduler built (the only part of the engine the simulator replaces).
//
//   step = sum over ops of max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth)
//          + step_overhead + sequence_overhead x sequences + token_overhead x tokens
//          + the engine's own work: engine_step_overhead + engine_sequence_overhead x sequences
//            + engine_token_overhead x tokens (hardware.h; calibrated CPUs only)
//
// Ops, each counted per rank (a rank holds 1/tp of every sharded matrix and of the query heads):
//   gemm       every weight matrix of every layer: FLOPs 2 x rows x params, bytes = its stored
//              bytes (read once per step). rows = tokens computed, or the sampled rows for the
//              LM head. Routed experts: each row uses experts_per_token experts; the step
//              reads the distinct experts its rows touch, E x (1 - (1 - k/E)^rows) on average.
//   attention  per KV group, per layer attending over it, per sequence (prefill chunks and
//              decodes are separate work): a query at position p attends to
//                full      keys [0, p]                         p + 1 pairs
//                sliding   keys [p - W + 1, p]                 min(W, p + 1) pairs
//                latent    complete entries i < (p + 1) / r    e(p) = (p + 1) / r, of which
//                          it reads min(top_k, e(p)) (all when top_k = 0)
//              FLOPs = 4 x head_dim x q heads x pairs (QK and PV) at the attention FLOP/s;
//              bytes = the K/V rows (or entries) the sequence's queries read, each once, as
//              stored (so the KV dtype sets the bytes).
//              A latent group's indexer (top_k > 0) scores all e(p) entries for each query:
//              2 x index_key_dim x index heads FLOPs per (query, entry), a GEMM at the peak of
//              the index keys' dtype (FP8 on Hopper for FP4 keys), reading every key once.
//              Footprint (profiles with kv_spill_bandwidth, i.e. calibrated CPUs): the step's
//              distinct KV bytes over all layers and sequences, B (the bytes above, less each
//              sequence's shared_prefix_tokens' rows, which an earlier sequence read), beyond
//              what stays in the caches from one step to the next, add
//              max(0, B - cached_kv_bytes) / kv_spill_bandwidth.
//              This is the part of a step that grows faster than the batch: 64 decodes at 128
//              tokens (16 MiB of KV) take 2.4 times 32 decodes (8 MiB) on this machine.
//   sampling   one pass over the vocabulary per sampled row: logits / sampling_rate, or
//              memory-bound at 16 B per logit when the profile gives no rate.
//   allreduce  tp > 1: two per layer (after attention and after the FFN) of tokens x hidden x
//              activation bytes; ring time = link_latency + 2 (tp - 1) / tp x bytes / link.
// Worked example (llama-3.1-8b layer, one decode at context 1000, bf16 KV, tp 1): attention
// projections 41.9M params -> 83.9 MFLOP, 83.9 MB; pairs 1001 -> 4 x 128 x 32 x 1001 = 16.4
// MFLOP; KV bytes 1001 x 2 x 8 x 128 x 2 B = 4.1 MB (tests/sim/cost_model_test.cc).
// Thread safety: immutable after Create; Cost may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/config.h"
#include "sim/hardware.h"
#include "sim/model_compute.h"

namespace kvserve::sim {

// One sequence's part of a step (from a scheduler::ScheduledRequest).
struct SequenceWork {
  int64_t num_computed_tokens = 0;  // context before the step
  int64_t num_new_tokens = 0;       // computed in the step, >= 1
  bool sampled = false;             // its logits are sampled this step
  // Leading context tokens whose KV blocks an earlier sequence of the same step reads too (a
  // shared prefix): the KV footprint counts their bytes once. Only the footprint uses it.
  int64_t shared_prefix_tokens = 0;
};

enum class OpKind { kGemm = 0, kAttention, kSampling, kAllReduce, kOverhead };
inline constexpr int kNumOpKinds = 5;
const char* OpKindName(OpKind kind);  // "gemm", "attention", "sampling", "allreduce", "overhead"

struct Work {
  double flops = 0;
  double bytes = 0;
  Work& operator+=(const Work& o) {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
};

struct StepCost {
  double seconds = 0;
  std::array<Work, kNumOpKinds> work{};        // FLOPs and bytes per op kind (per rank)
  std::array<double, kNumOpKinds> seconds_by{};  // time per op kind
};

// Query-side heads of one rank, for attention FLOPs.
struct AttentionHeads {
  int q_heads = 0;      // per rank
  int index_heads = 0;  // per rank (latent indexer)
  int top_k = 0;        // entries a query reads; 0: all
};

// ---- the counts (exposed for tests) ----

// One layer of matrix m over `rows` rows (the caller passes the sampled rows for logits_only
// matrices), one rank's share.
Work MatrixWork(const Matrix& m, int64_t rows, int tp);
// One layer attending over a group of `spec` (per-rank spec) for one sequence.
Work AttentionWork(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                   int64_t num_computed_tokens, int64_t num_new_tokens);
// One layer's latent indexer for one sequence (zero for other groups or without top_k).
Work IndexerWork(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                 int64_t num_computed_tokens, int64_t num_new_tokens);

// The footprint term above: extra seconds for a step whose attention reads kv_bytes (per rank).
double KvSpillSeconds(const HardwareProfile& hardware, double kv_bytes);
// Of the bytes AttentionWork + IndexerWork count for one sequence, those of rows in its first
// `shared` tokens (rows another sequence of the step read first).
double SharedKvBytes(const kv::KvLayoutSpec& spec, const AttentionHeads& heads,
                     int64_t num_computed_tokens, int64_t num_new_tokens, int64_t shared);

class CostModel {
 public:
  // kv_config: the per-rank KV config the server would build (its groups say which layers
  // attend over which spec). InvalidArgument when tp < 1, the heads do not split over tp, tp >
  // 1 on a device with no link bandwidth, or the profile has no FLOP/s for a matrix's dtype.
  static Result<CostModel> Create(const ModelCompute& model, const kv::KvCacheConfig& kv_config,
                                  const HardwareProfile& hardware, int tp);
  CostModel() = default;  // an empty model (no matrices, no groups); use Create

  StepCost Cost(std::span<const SequenceWork> batch) const;

  const ModelCompute& model() const { return model_; }
  const HardwareProfile& hardware() const { return hardware_; }
  int tp() const { return tp_; }

 private:
  struct Group {
    kv::KvLayoutSpec spec;
    int num_layers = 0;        // layers attending over it
    double indexer_flops = 0;  // achievable FLOP/s of its indexer; 0: none
  };
  void AddGemm(int64_t tokens, int64_t sampled, StepCost& cost) const;
  void AddAttention(std::span<const SequenceWork> batch, StepCost& cost) const;

  ModelCompute model_;
  HardwareProfile hardware_;
  int tp_ = 1;
  AttentionHeads heads_;
  std::vector<Group> groups_;
  std::vector<double> gemm_flops_;  // achievable FLOP/s per matrix
};

}  // namespace kvserve::sim
