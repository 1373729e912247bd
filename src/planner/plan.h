// The capacity plan: where every byte of one device goes, and what the KV pool that is left
// buys (tokens, concurrency, context), in the seed's order (weights, batch, KV).
//
// All KV maths goes through kv/ (kv::ComputeCapacity, kv::MaxMemoryBytes, ...): the planner
// builds the same kv::KvCacheConfig the server builds at startup (PlanKvConfig) and asks kv/
// what it would allocate, so the planned and allocated numbers cannot diverge.
//
// Per-device view: under tensor parallelism (TP) every rank holds the same set of tokens, each
// rank its share of every token's KV. A full-attention group's KV heads split across ranks
// (8 heads at TP4: 2 per rank); a single-head latent (or tp > kv_heads) is replicated, so the
// per-rank bytes per token, and therefore the token capacity, do not divide by TP.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/config.h"
#include "planner/model.h"
#include "planner/presets.h"

namespace kvserve::planner {

// The flags of `kvserve plan` (vLLM names), already parsed.
struct PlanOptions {
  int num_gpus = 0;                            // devices in total (replicas x tp); 0: tp (or 1)
  int tp = 0;                                  // tensor-parallel size; 0: num_gpus (or 1)
  double gpu_memory_utilization = 0.9;         // fraction of device memory kvserve may use
  int64_t max_model_len = 0;                   // 0: the model's own maximum
  int max_num_seqs = 256;                      // concurrent requests (vLLM's default)
  int64_t max_num_batched_tokens = 8192;       // largest prefill chunk per step (vLLM's default)
  std::string kv_cache_dtype = "auto";         // for groups without a trained (fixed) format
  std::vector<std::string> cpu_offload_parts;  // weight parts moved to CPU memory
  uint64_t kv_offloading_bytes = 0;  // CPU KV tier for the whole replica, split across ranks
  std::optional<uint64_t> kv_cache_memory_bytes;  // fixed KV budget per device (CPU default)
  std::optional<uint64_t> runtime_reserve_bytes;  // overrides the model's reserve
  int block_size = 16;
};

// One weight part as placed on one device.
struct WeightPlacement {
  std::string name;
  TpPlacement tp = TpPlacement::kSharded;
  bool offloaded = false;     // lives in CPU memory, not on the device
  uint64_t model_bytes = 0;   // the whole part
  uint64_t device_bytes = 0;  // on each device: 0, model_bytes / tp or model_bytes
  std::string note;
};

// One KV group as allocated on one device.
struct KvGroupPlan {
  std::string name;
  std::string spec;                  // kv::DescribeSpec of the per-rank spec
  std::string layers;                // "2,8,14"
  std::string readers;               // "3-7,9-13,15-19" (no allocation)
  bool sliding = false;              // holds a fixed window per sequence, not every token
  bool replicated_under_tp = false;  // per-rank bytes do not divide by tp
  kv::BytesPerToken per_token;       // per rank, all writer layers
  kv::GroupCapacity capacity;        // blocks and bytes kv::ComputeCapacity gives this group
  // Fixed per-sequence bytes of a sliding group (kv::MaxMemoryBytes x writer layers): while
  // decoding (chunk 1) and at the prefill peak (chunk = max_num_batched_tokens).
  int64_t decode_seq_bytes = 0;
  int64_t prefill_seq_bytes = 0;
};

struct Plan {
  ModelDesc model;
  DeviceDesc device;
  PlanOptions options;   // resolved: tp and max_model_len filled in
  int num_replicas = 1;  // num_gpus / tp

  // Priority 1: weights.
  std::vector<WeightPlacement> weights;
  uint64_t device_weight_bytes = 0;  // resident on each device
  uint64_t cpu_weight_bytes = 0;     // offloaded parts, one copy per replica's host
  // Priority 2: the runtime.
  uint64_t usable_bytes = 0;   // gpu_memory_utilization x device memory
  uint64_t reserve_bytes = 0;  // activations, CUDA graphs, context
  // Priority 3: the KV pool and what it buys (per device = per TP group).
  int64_t kv_pool_bytes = 0;     // negative: the weights do not fit
  bool kv_budget_fixed = false;  // --kv-cache-memory-bytes given
  bool fits = false;             // the pool holds at least one max-length request
  kv::KvCacheConfig kv_config;   // what the server builds (per rank)
  kv::KvCapacity capacity;       // what kv::ComputeCapacity allocates
  std::vector<KvGroupPlan> groups;
  double growing_bytes_per_token = 0;    // non-sliding groups: bytes every token adds
  double pool_over_bytes_per_token = 0;  // kv_pool_bytes / growing_bytes_per_token
  int64_t max_concurrency = 0;           // requests of max_model_len at once (per replica)
  std::optional<int64_t> longest_len_at_max_num_seqs;  // nullopt: not even 1 token each
  int64_t fixed_seq_decode_bytes = 0;  // sum of the sliding groups' decode_seq_bytes
  int64_t fixed_seq_prefill_bytes = 0;
  // CPU memory (per replica host).
  uint64_t cpu_kv_tier_bytes = 0;  // --kv-offloading-size
  int64_t cpu_kv_tier_tokens = 0;  // tokens the tier holds (per rank share / per rank bytes)
  uint64_t cpu_total_bytes = 0;    // offloaded weights + KV tier

  std::vector<std::string> notes;  // warnings and explanations for the report
};

// The per-rank kv::KvCacheConfig the server builds for this model: heads split by tp,
// --kv-cache-dtype applied to groups without a fixed format. A GGUF model (kv_shape set) gets
// model::MakeModelKvLayout's config, the one `kvserve serve` allocates (at tp 1, identical);
// a preset's groups are mapped here. InvalidArgument when tp does not
// divide the KV heads (nor they it), or the dtype flag is bad.
Result<kv::KvCacheConfig> PlanKvConfig(const ModelDesc& model, int tp, int block_size,
                                       int64_t max_model_len, int64_t max_chunk_tokens,
                                       std::string_view kv_cache_dtype);

// What the server allocates for a KV budget: the function `kvserve serve` calls at startup
// (one source of truth). Delegates to kv::ComputeCapacity.
Result<kv::KvCapacity> PlanKvCapacity(const kv::KvCacheConfig& config, uint64_t budget_bytes);

// The whole plan. InvalidArgument for bad options (unknown offload part, tp not dividing
// num_gpus, utilization outside (0, 1], ...). A plan whose weights do not fit is still
// returned (fits = false, kv_pool_bytes <= 0) so the report can show by how much.
Result<Plan> MakePlan(const ModelDesc& model, const DeviceDesc& device, const PlanOptions& options);

// Longest L such that `num_seqs` requests of L tokens fit the budget together (binary search
// over kv::ComputeCapacity, which is monotone in L); nullopt when not even L = 1 fits.
Result<std::optional<int64_t>> LongestLenAt(kv::KvCacheConfig config, uint64_t budget_bytes,
                                            int num_seqs, int64_t max_len);

}  // namespace kvserve::planner
