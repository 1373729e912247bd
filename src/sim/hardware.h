// HardwareProfile: what one device (one tensor-parallel rank) does per second, for the cost
// model (sim/cost_model.h): peak FLOP/s per weight dtype, memory / device-link / host-link
// bandwidths, the efficiency factors that turn peaks into achievable rates, fixed overheads,
// and the speed of the KV tiers below the device pool.
//
// Two sources, one format (the "compute" object of a device preset):
//   * `--gpu NAME`: the device preset in src/planner/presets/devices.jsonc, the same entry
//     `kvserve plan` reads the memory from; every number carries its source there, and the
//     efficiency factors are marked as assumptions;
//   * `--profile FILE`: a JSON file `kvserve simulate --calibrate` writes after timing the
//     real CPU kernels (peaks are then the fitted achievable rates, efficiencies 1).
//
// Format ({} objects, numbers in SI units: FLOP/s, bytes/s, seconds):
//   {"peak_flops": {"bf16": 989.4e12, "fp8": 1978.9e12, ...}, "attention_flops": 0,
//    "memory_bandwidth": 4.8e12, "attention_bandwidth": 0, "link_bandwidth": 450e9,
//    "link_latency": 10e-6,
//    "host_link_bandwidth": 64e9, "sampling_rate": 0,
//    "efficiency": {"gemm": 0.7, "memory": 0.8, "attention": 0.5, "link": 0.8,
//                   "host_link": 0.8},
//    "step_overhead": 5e-4, "sequence_overhead": 2e-6, "token_overhead": 0,
//    "engine_step_overhead": 0, "engine_sequence_overhead": 0, "engine_token_overhead": 0,
//    "cached_kv_bytes": 0, "kv_spill_bandwidth": 0,
//    "cpu_tier": {"bandwidth": 51e9, "latency": 20e-6, "store_bandwidth": 0},
//    "file_tier": {...}, "redis_tier": {...}}
// (cpu_tier.bandwidth defaults to host_link_bandwidth x efficiency.host_link.)
// Plain data, copyable; functions are pure.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvserve::sim {

// Achievable = peak x efficiency, per kind of work.
struct Efficiency {
  double gemm = 1;       // of peak_flops, for weight matrices
  double memory = 1;     // of memory_bandwidth, for weights, KV reads and sampling
  double attention = 1;  // of the attention FLOP/s
  double link = 1;       // of link_bandwidth (TP all-reduce)
  double host_link = 1;  // of host_link_bandwidth (CPU KV tier loads)
};

// A KV tier's read speed: a load of n blocks of b bytes takes latency + n * b / bandwidth.
struct TierSpeed {
  double bandwidth = 0;        // bytes/s; 0: not given (the tier cannot be simulated)
  double latency = 0;          // seconds per load request
  double store_bandwidth = 0;  // bytes/s of stores that hold up the step; 0: asynchronous
};

struct HardwareProfile {
  std::string name;
  std::string description;
  std::map<std::string, double> peak_flops;  // FLOP/s by dtype name ("bf16", "fp8", "q8_0")
  double attention_flops = 0;      // FLOP/s of attention math; 0: peak_flops["bf16"]
  double memory_bandwidth = 0;     // bytes/s
  double attention_bandwidth = 0;  // bytes/s of KV reads; 0: memory_bandwidth x memory eff.
  double link_bandwidth = 0;       // bytes/s each way to another rank (NVLink); 0: none
  double link_latency = 0;         // seconds per all-reduce
  double host_link_bandwidth = 0;  // bytes/s each way to host memory (PCIe)
  double sampling_rate = 0;        // logits/s; 0: memory-bound at 16 B per logit
  double step_overhead = 0;        // seconds per step (scheduling, launch)
  double sequence_overhead = 0;    // seconds per sequence in a step
  double token_overhead = 0;       // seconds per token in a step
  // The serving engine's own work per step besides the forward pass and sampling (scheduling,
  // KV block allocation and prefix hashing, building the batch, output assembly, metrics),
  // measured by calibration on the real engine (Engine::Step minus its forward pass and the
  // sampling above); 0 in the device presets, whose step_overhead covers the host.
  double engine_step_overhead = 0;      // seconds per step
  double engine_sequence_overhead = 0;  // seconds per sequence in a step
  double engine_token_overhead = 0;     // seconds per token computed in a step
  // The KV footprint term (CPU caches): a step's KV reads up to cached_kv_bytes (per rank) are
  // served from the processor's caches, where the previous step left them; each byte beyond
  // costs 1 / kv_spill_bandwidth seconds more. kv_spill_bandwidth 0: no such term (the device
  // presets: an H200's KV reads are HBM reads, already in attention_bandwidth).
  double cached_kv_bytes = 0;
  double kv_spill_bandwidth = 0;
  Efficiency efficiency;
  TierSpeed cpu_tier;    // default: host_link_bandwidth x efficiency.host_link
  TierSpeed file_tier;
  TierSpeed redis_tier;  // default: file_tier

  // Achievable GEMM FLOP/s for weights stored in `dtype`: peak_flops by exact name, then the
  // family ("fp8_e4m3_e8m0_32" -> "fp8", "fp4_*" -> "fp4"), then the next wider compute type
  // (fp4 -> fp8 -> bf16; f16/q8_0/q4_0 -> bf16 on devices without them; "default" last),
  // times efficiency.gemm. NotFound when nothing matches.
  Result<double> GemmFlops(std::string_view dtype) const;
  double AttentionFlops() const;  // (attention_flops or peak bf16) x efficiency.attention
  double MemoryBandwidth() const { return memory_bandwidth * efficiency.memory; }
  double AttentionBandwidth() const {
    return attention_bandwidth > 0 ? attention_bandwidth : MemoryBandwidth();
  }
  double LinkBandwidth() const { return link_bandwidth * efficiency.link; }
};

// Parses the compute object (format above). `name` names it in errors. InvalidArgument naming
// the field for a missing peak, a non-positive bandwidth, an efficiency outside (0, 1].
Result<HardwareProfile> ParseHardwareProfile(std::string_view json_text, std::string_view name);
// The device preset `name` (its "compute" object). NotFound listing the presets that have
// one, or naming --calibrate for a preset without compute numbers (the host CPU).
Result<HardwareProfile> LoadDeviceProfile(std::string_view name);
// A profile file (--profile); IoError when unreadable.
Result<HardwareProfile> LoadProfileFile(const std::string& path);
// The profile as JSON text in the format above (what --calibrate writes, plus `notes`).
std::string ProfileToJson(const HardwareProfile& profile, std::string_view notes_json = "");

}  // namespace kvserve::sim
