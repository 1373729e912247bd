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
//   3. The engine's own work per step (HardwareProfile::engine_*): the real engine::Engine
//      (scheduler, KV manager with prefix caching, sampling, outputs) runs decode batches and
//      admissions of fresh prompts with the model behind a wrapper that times each Forward;
//      what a step takes beyond its forward pass and the sampler work step 1 times with each
//      shape (SampleRows, timed right after the step on as many rows) is the engine's, fitted
//      as per step + per sequence + per token (MeasureEngineOverhead).
//   4. Tiers: the real offload::OffloadManager loads blocks of the model's size from a CPU
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
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "sampling/sampler.h"
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

// One shape of the engine-overhead measurement.
struct EngineOverheadPoint {
  std::string label;       // "decode 16 x @ 96", "admit 8 x 128"
  int64_t sequences = 0;   // in the step
  int64_t tokens = 0;      // computed in the step
  double step = 0;         // Engine::Step, seconds (the median run by `extra`)
  double forward = 0;      // of which in Model::Forward
  double sampler = 0;      // SampleRows on the step's sampled rows (what step 1 times)
  double fitted = 0;       // what the fitted profile predicts for forward + sampler
  double extra = 0;        // step - forward - sampler
  double predicted = 0;    // by the fitted overheads
};
struct EngineOverhead {
  double step = 0, sequence = 0, token = 0;  // seconds per step, sequence, token
  std::vector<EngineOverheadPoint> points;
};

struct Calibration {
  HardwareProfile profile;
  std::vector<CalibrationPoint> points;
  EngineOverhead engine;     // the engine's own work (step 3), as in profile.engine_*
  double rms_log_error = 0;  // sqrt(mean (log predicted - log measured)^2)
  std::string notes_json;    // the profile's "notes": machine, model, points
};

Result<Calibration> Calibrate(const CalibrationOptions& options);

// The fit alone: the profile whose cost model best predicts `points` (their `predicted` and the
// returned profile's rates filled in), from `start`'s rates. kv_config: the per-rank KV config
// the points ran with.
HardwareProfile FitProfile(const ModelCompute& model, const kv::KvCacheConfig& kv_config,
                           const HardwareProfile& start, std::span<CalibrationPoint> points);

// The sampler work calibration times with each shape, as the engine samples: each of `rows`
// rows of `logits` (rows x vocab) drawn on `pool` at temperature 1 (bench throughput's), one
// sampler per pool thread (samplers.size() >= pool.num_threads()).
void SampleRows(ThreadPool& pool, std::vector<sampling::Sampler>& samplers, const float* logits,
                int64_t rows, int64_t vocab, std::span<const int32_t> history);

// The calibration clock: with one thread that thread's CPU time, with more the wall clock
// (see step 1 above), in seconds.
double CalibrationSeconds(int threads);

// Step 3 above with `model` (moved into the engine): decode batches of 1, 4, 16 and 64
// sequences and admissions of 1 x 512, 8 x 128 and 32 x 32 fresh prompt tokens (quick: a few
// tiny ones), each the median of several steps. `cost`: the fitted profile (for `fitted`).
Result<EngineOverhead> MeasureEngineOverhead(std::unique_ptr<model::Model> model,
                                             const kv::KvCacheConfig& layout,
                                             const kv::KvCacheManagerOptions& kv_options,
                                             const engine::EngineConfig& config,
                                             const CostModel& cost, bool quick);
// The fit alone: step + sequence x sequences + token x tokens closest to the points' `extra`
// in least squares, every term >= 0; fills the points' `predicted`.
void FitEngineOverhead(EngineOverhead& overhead);

// Tier speeds measured with the real offload tiers for blocks of `block_bytes`.
struct TierSpeeds {
  TierSpeed cpu;   // load latency and bandwidth; store_bandwidth: the synchronous copy
  TierSpeed file;  // loads from files just written (page cache warm)
};
Result<TierSpeeds> MeasureTierSpeeds(const kv::KvCacheConfig& kv_config, int64_t block_bytes);

}  // namespace kvserve::sim
