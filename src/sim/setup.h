// From the knobs of `kvserve simulate` to a runnable simulation, through the functions the
// rest of kvserve already uses (one source of truth):
//   model     planner::LoadModelPreset / LoadGgufModel (weights, KV groups) + ModelCompute
//   memory    --gpu: planner::MakePlan's KV pool per device (weights, reserve, utilization,
//             --cpu-offload-weights); --profile: --kv-cache-memory-bytes or the CPU default,
//             as `kvserve serve` sizes it
//   KV        planner::PlanKvConfig (a GGUF model: model::MakeModelKvLayout, what serve
//             allocates), max-model-len by engine::ResolveMaxModelLen
//   tiers     --kv-transfer-config / --kv-offloading-size parsed by offload/config.h; the CPU
//             tier's bytes are split evenly over the TP ranks
//   speed     --gpu: the device preset's compute numbers; --profile: a calibrated file
// Every bad knob is an InvalidArgument / NotFound naming it; nothing runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "sim/cost_model.h"
#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/workload.h"

namespace kvserve::sim {

// The knobs (vLLM names), already parsed into values.
struct SimKnobs {
  std::string model;    // preset name or FILE.gguf
  std::string gpu;      // device preset (memory and compute); empty with --profile
  std::string profile;  // calibrated profile file; empty with --gpu
  int tp = 1;
  double gpu_memory_utilization = 0.9;
  std::vector<std::string> cpu_offload_weights;  // weight parts in CPU memory (--gpu only)
  // The serve knobs, resolved by tools/engine_flags.h like every command's: max_num_seqs,
  // max_num_batched_tokens, max_model_len, block_size, kv_cache_bytes (per device),
  // kv_cache_dtype, enable_prefix_caching, offload (for the whole TP group). speculative is
  // not simulated (InvalidArgument); num_threads is the profile's.
  engine::EngineConfig engine;
  WorkloadSpec workload;
};

struct PreparedSim {
  SimSetup setup;
  CostModel cost;
  RunLabel label;
  std::vector<RequestSpec> workload;
};

Result<PreparedSim> Prepare(const SimKnobs& knobs);

// Sets one knob by its flag name from text, for --sweep NAME=V1,V2: max-num-batched-tokens,
// max-num-seqs, max-model-len, block-size, kv-cache-dtype, kv-cache-memory-bytes,
// gpu-memory-utilization, tp, request-rate, kv-offloading-size, enable-prefix-caching
// (true/false). InvalidArgument naming the knob and value.
Status SetKnob(SimKnobs& knobs, const std::string& name, const std::string& value);
// The names SetKnob accepts.
std::vector<std::string> SweepableKnobs();

}  // namespace kvserve::sim
