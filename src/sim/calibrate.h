// Calibration: `kvserve simulate --calibrate MODEL.gguf -o cpu.json` measures this machine and
// writes the HardwareProfile that `--profile cpu.json` simulates it with.
//
//   1. Steps: the real forward pass (model::Model::Forward, the engine's one model path) over
//      real KV blocks of a real kv::KvCacheManager, plus the real sampler on every sampled
//      row (temperature 1, as `bench throughput` samples), timed on a grid of batch shapes:
//      prefill chunks of 16..2048 tokens at several contexts, decode batches of 1..64 at
//      several contexts, and mixes of both. Each point: one warm-up, then `repeats` runs. With
//      one thread the clock is that thread's CPU time (time spent waiting for a core does not
//      count) and the point is the median run (the typical cache and memory contention from
//      other processes); with more threads the clock is the wall clock and the point is the
//      fastest run (the one least delayed by waiting for a core).
//      KV positions before a shape's context are never computed (their values do not change
//      the time), but their pages are written once, so attention reads real memory rather
//      than the kernel's zero page.
//   2. Fit: the profile whose cost model (sim/cost_model.h) best predicts those times, by
//      Nelder-Mead over the logs of ten rates (GEMM FLOP/s for the model's weight dtypes,
//      memory bandwidth, attention FLOP/s and KV bandwidth, sampling rate, overheads per step,
//      sequence and token, and the KV footprint term: the KV bytes that stay cached between
//      steps and the spill bandwidth beyond them), minimising sum (log predicted - log
//      measured)^2. Efficiencies are 1: a calibrated "peak" is the achieved rate.
//   3. Tiers: the real offload::OffloadManager loads blocks of the model's size from a CPU
//      tier and from a file tier in a temporary directory (latency + bytes / bandwidth fitted
//      from loads of 1 and 64 blocks), and times the synchronous copy of evicted blocks into
//      the CPU tier (the scheduler thread does that copy on a CPU server).
// The profile's notes record the machine, threads, model, load average, every point's measured
// and predicted time and the fit's RMS log error.
// Thread safety: Calibrate uses the calling thread and a ThreadPool of its own.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "kv/config.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/model_compute.h"

namespace kvserve::sim {

struct CalibrationOptions {
  std::string model_path;
  engine::EngineConfig engine;  // threads, block size, KV dtype (as serve would run)
  uint64_t kv_arena_bytes = 3ull << 30;  // KV memory for the grid's largest shape
  int repeats = 5;
  bool quick = false;  // a few small shapes, one run each (tests)
};

struct CalibrationPoint {
  std::string label;  // "prefill 512 @ 0", "decode 16 x @ 1024", ...
  std::vector<SequenceWork> batch;
  double measured = 0;   // seconds (median or fastest run, see above)
  double predicted = 0;  // by the fitted profile
};

struct Calibration {
  HardwareProfile profile;
  std::vector<CalibrationPoint> points;
  double rms_log_error = 0;  // sqrt(mean (log predicted - log measured)^2)
  std::string notes_json;    // the profile's "notes": machine, model, points
};

Result<Calibration> Calibrate(const CalibrationOptions& options);

// The fit alone: the profile whose cost model best predicts `points` (their `predicted` and the
// returned profile's rates filled in), from `start`'s rates. kv_config: the per-rank KV config
// the points ran with.
HardwareProfile FitProfile(const ModelCompute& model, const kv::KvCacheConfig& kv_config,
                           const HardwareProfile& start, std::span<CalibrationPoint> points);

// Tier speeds measured with the real offload tiers for blocks of `block_bytes`.
struct TierSpeeds {
  TierSpeed cpu;   // load latency and bandwidth; store_bandwidth: the synchronous copy
  TierSpeed file;  // loads from files just written (page cache warm)
};
Result<TierSpeeds> MeasureTierSpeeds(const kv::KvCacheConfig& kv_config, int64_t block_bytes);

}  // namespace kvserve::sim
