#include "sim/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_cache_manager.h"
#include "sampling/sampler.h"

namespace kvserve::sim {
namespace {

using Shape = std::vector<SequenceWork>;

// The grid: (label, shape). Contexts up to 4096, chunks up to 2048, batches up to 64.
std::vector<std::pair<std::string, Shape>> Grid(bool quick) {
  std::vector<std::pair<std::string, Shape>> grid;
  auto prefill = [&](int64_t n, int64_t context) {
    grid.push_back({fmt::format("prefill {} @ {}", n, context), {{context, n, true}}});
  };
  auto decode = [&](int64_t batch, int64_t context) {
    grid.push_back({fmt::format("decode {} x @ {}", batch, context),
                    Shape(static_cast<size_t>(batch), SequenceWork{context, 1, true})});
  };
  auto prompts = [&](int64_t count, int64_t n) {  // several prompts in one step
    grid.push_back({fmt::format("prefill {} x {} @ 0", count, n),
                    Shape(static_cast<size_t>(count), SequenceWork{0, n, true})});
  };
  auto mixed = [&](int64_t chunk, int64_t batch, int64_t context) {
    Shape s(static_cast<size_t>(batch), SequenceWork{context, 1, true});
    s.push_back({0, chunk, false});
    grid.push_back({fmt::format("chunk {} + decode {} x @ {}", chunk, batch, context), s});
  };
  if (quick) {
    for (int64_t n : {8, 32}) prefill(n, 0);
    for (int64_t b : {1, 4}) decode(b, 16);
    mixed(16, 2, 16);
    return grid;
  }
  for (int64_t n : {16, 64, 256, 512, 1024, 2048}) prefill(n, 0);
  prefill(512, 1024);
  prefill(1024, 3072);
  // Batches of prompts (a step of short-chat, or of prompts after prefix hits): the same rows
  // as one long prompt with far less attention, which separates the GEMM time from the
  // attention time.
  prompts(16, 128);
  prompts(4, 512);
  prompts(32, 64);
  for (int64_t b : {1, 2, 4, 8, 16, 32, 64}) decode(b, 128);
  for (int64_t b : {1, 4, 16}) decode(b, 1024);
  // KV footprints from within the caches to far past them (the footprint term's knee and
  // slope): with the tiny preset's 2 KiB per token, 32 MiB (these two and 16 x @ 1024), 64 and
  // 128 MiB. Shapes past the model's context length are skipped.
  decode(64, 256);
  decode(32, 512);
  decode(64, 512);
  decode(64, 1024);
  decode(32, 2048);
  decode(1, 4095);
  decode(8, 2048);
  mixed(256, 16, 512);
  mixed(1024, 8, 256);
  return grid;
}

// Runs shapes through the real forward pass and sampler.
class StepTimer {
 public:
  StepTimer(model::Model& model, kv::KvCacheManager& kv, int threads)
      : model_(model), kv_(kv), views_(model::ViewsOf(kv)), pool_(threads),
        samplers_(static_cast<size_t>(threads), sampling::Sampler(static_cast<int32_t>(model.vocab_size()))) {}

  // After one warm-up, the median of `repeats` runs on the thread's CPU clock (one thread),
  // the fastest on the wall clock (more): see Now().
  // ResourceExhausted when the arena cannot hold the shape.
  Result<double> Time(const Shape& shape, int repeats) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::span<const int32_t>> tables;  // (sequences, groups)
    const size_t groups = static_cast<size_t>(kv_.num_groups());
    for (size_t i = 0; i < shape.size(); ++i) {
      kv::PrefixHit none;
      none.blocks_per_group.resize(groups);
      const int64_t total = shape[i].num_computed_tokens + shape[i].num_new_tokens;
      if (!kv_.AllocateNew(i + 1, std::move(none), total)) {
        FreeAll(i);
        return ResourceExhausted(fmt::format("the calibration arena cannot hold {} sequences "
                                             "of {} tokens", shape.size(), total));
      }
      for (size_t g = 0; g < groups; ++g) {
        tables.emplace_back(kv_.BlockTable(i + 1, static_cast<int>(g)));
        Touch(static_cast<int>(g), tables.back());
      }
      tokens.push_back(RandomTokens(shape[i].num_new_tokens));
    }
    model::Batch batch;
    int64_t rows = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int32_t logits = shape[i].sampled ? 1 : 0;
      batch.sequences.push_back({tokens[i], static_cast<int32_t>(shape[i].num_computed_tokens),
                                 std::span<const std::span<const int32_t>>(tables).subspan(
                                     i * groups, groups),
                                 logits});
      rows += logits;
    }
    logits_.resize(static_cast<size_t>(std::max<int64_t>(rows, 1) * model_.vocab_size()));
    std::vector<double> runs;
    for (int r = 0; r <= repeats; ++r) {
      const double start = Now();
      model_.Forward(batch, views_, pool_, logits_.data());
      Sample(rows, tokens.front());
      const double s = Now() - start;
      if (r > 0) runs.push_back(s);  // run 0 warms up
    }
    FreeAll(shape.size());
    std::sort(runs.begin(), runs.end());
    return pool_.num_threads() == 1 ? runs[runs.size() / 2] : runs.front();
  }

 private:
  // Seconds on the clock the profile is in: with one thread (the pool runs everything on the
  // calling thread) that thread's CPU time, which time spent waiting for a core on a shared
  // machine does not inflate; with more threads the wall clock (workers spin between calls,
  // so CPU time would overcount). CPU time still varies with what other processes do to the
  // caches and memory bandwidth (16 decodes at 1,024 tokens took 3.2 ms in one calibration,
  // 5.3 ms in the next): the median run is the typical one, which a served workload sees;
  // the fastest wall-clock run is the one least delayed by waiting for a core.
  double Now() const { return CalibrationSeconds(pool_.num_threads()); }
  std::vector<int32_t> RandomTokens(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng_() % static_cast<uint64_t>(model_.vocab_size()));
    return t;
  }
  void Sample(int64_t rows, std::span<const int32_t> history) {
    SampleRows(pool_, samplers_, logits_.data(), rows, model_.vocab_size(), history);
  }
  // Writes every page of `blocks` once, as the engine's prefill would have: untouched memory
  // reads as the kernel's shared zero page, which stays in cache and would make the attention
  // look faster than reading a real context. 0x3c in every byte is a small finite number in
  // every KV format.
  void Touch(int group, std::span<const int32_t> blocks) {
    const kv::KvArena& arena = kv_.arena(group);
    for (int32_t id : blocks) {
      if (id != kv::kNullBlock) std::memset(arena.BlockData(id), 0x3c, arena.block_bytes());
    }
  }
  void FreeAll(size_t n) {
    for (size_t i = 0; i < n; ++i) kv_.Free(i + 1);
  }

  model::Model& model_;
  kv::KvCacheManager& kv_;
  model::KvViews views_;
  ThreadPool pool_;
  std::vector<sampling::Sampler> samplers_;
  std::vector<float> logits_;
  std::mt19937_64 rng_{42};
};

// Rough rates from the grid's extremes, for the fit to start from.
HardwareProfile StartingPoint(const ModelCompute& model, std::span<const CalibrationPoint> points) {
  HardwareProfile h;
  h.name = "calibrated";
  double flops = 0, seconds = 0;
  for (const CalibrationPoint& p : points) {
    if (p.batch.size() == 1 && p.batch[0].num_new_tokens > flops) {
      flops = static_cast<double>(p.batch[0].num_new_tokens);
      seconds = p.measured;
    }
  }
  const double params = model.ActiveParamsPerToken();
  h.peak_flops["default"] = std::max(1e9, 2 * params * flops / seconds);
  h.memory_bandwidth = std::max(1e9, model.TotalWeightBytes() / points[0].measured);
  h.attention_flops = h.peak_flops["default"] / 4;
  h.attention_bandwidth = h.memory_bandwidth / 2;
  h.sampling_rate = 1e8;
  h.step_overhead = 1e-4;
  h.sequence_overhead = 1e-5;
  h.token_overhead = 1e-6;
  return h;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::vector<double> LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::vector<double> out(3, 0.0);
  in >> out[0] >> out[1] >> out[2];
  return out;
}

std::string NotesJson(const CalibrationOptions& o, const Calibration& c, int threads,
                      const std::vector<double>& load_before, std::string_view kv_dtype) {
  nlohmann::json j;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  j["calibrated"] = date;
  j["machine"] = CpuModelName();
  j["threads"] = threads;
  j["clock"] = threads == 1 ? "thread CPU time" : "wall";
  j["model"] = o.model_path;
  j["kv_cache_dtype"] = kv_dtype;
  j["load_average_before"] = load_before;
  j["load_average_after"] = LoadAverage();
  j["rms_log_error"] = c.rms_log_error;
  for (const CalibrationPoint& p : c.points) {
    j["points"].push_back({{"shape", p.label}, {"measured_s", p.measured},
                           {"predicted_s", p.predicted}});
  }
  for (const EngineOverheadPoint& p : c.engine.points) {
    j["engine_points"].push_back({{"shape", p.label}, {"step_s", p.step},
                                  {"forward_s", p.forward}, {"sampler_s", p.sampler},
                                  {"fitted_s", p.fitted}, {"extra_s", p.extra},
                                  {"predicted_s", p.predicted}});
  }
  return j.dump();
}

}  // namespace

void SampleRows(ThreadPool& pool, std::vector<sampling::Sampler>& samplers, const float* logits,
                int64_t rows, int64_t vocab, std::span<const int32_t> history) {
  sampling::SamplingParams params;
  pool.ParallelFor(static_cast<size_t>(rows), [&](size_t begin, size_t end, int thread) {
    for (size_t i = begin; i < end; ++i) {
      (void)samplers[thread].Sample({logits + i * vocab, static_cast<size_t>(vocab)}, params,
                                    {history, {}}, 1234 + i);
    }
  });
}

double CalibrationSeconds(int threads) {
  if (threads == 1) {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<Calibration> Calibrate(const CalibrationOptions& o) {
  const std::vector<double> load_before = LoadAverage();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> header, gguf::GgufFile::Open(o.model_path));
  KV_ASSIGN_OR_RETURN(ModelCompute compute, ComputeFromGguf(*header));
  KV_ASSIGN_OR_RETURN(model::ModelKvShape shape, model::ReadModelKvShape(*header));
  engine::EngineConfig config = o.engine;
  config.kv_cache_bytes = o.kv_arena_bytes;
  config.max_model_len = std::min<int64_t>(shape.context_length, o.quick ? 64 : 4096 + 1);
  config.max_num_batched_tokens = o.quick ? 64 : 2048 + 64;
  KV_ASSIGN_OR_RETURN(engine::LoadedModel loaded, engine::LoadModel(o.model_path, config));
  const kv::KvCacheConfig& layout = loaded.layout.config;
  kv::KvCacheManagerOptions kv_options;
  kv_options.enable_prefix_caching = false;
  kv_options.fingerprint = loaded.fingerprint;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvCacheManager> kv,
                      kv::KvCacheManager::Create(layout, o.kv_arena_bytes, kv_options));
  const int64_t block_bytes = kv->capacity().groups.at(0).block_bytes;
  Calibration c;
  {
    StepTimer timer(*loaded.model, *kv, config.NumThreads());
    for (auto& [label, batch] : Grid(o.quick)) {
      int64_t longest = 0;
      for (const SequenceWork& w : batch) {
        longest = std::max(longest, w.num_computed_tokens + w.num_new_tokens);
      }
      if (longest > layout.max_model_len) continue;  // past the model's context
      KV_ASSIGN_OR_RETURN(double seconds, timer.Time(batch, o.quick ? 1 : o.repeats));
      c.points.push_back({label, batch, seconds, 0});
    }
  }
  kv.reset();  // the grid's arena; the engine below has its own
  c.profile = FitProfile(compute, layout, StartingPoint(compute, c.points), c.points);
  double sum = 0;
  for (const CalibrationPoint& p : c.points) sum += std::pow(std::log(p.predicted / p.measured), 2);
  c.rms_log_error = std::sqrt(sum / static_cast<double>(c.points.size()));
  {
    KV_ASSIGN_OR_RETURN(CostModel fitted, CostModel::Create(compute, layout, c.profile, 1));
    kv::KvCacheManagerOptions engine_kv;
    engine_kv.enable_prefix_caching = config.enable_prefix_caching;
    engine_kv.fingerprint = loaded.fingerprint;
    KV_ASSIGN_OR_RETURN(c.engine, MeasureEngineOverhead(std::move(loaded.model), layout, engine_kv,
                                                        config, fitted, o.quick));
    c.profile.engine_step_overhead = c.engine.step;
    c.profile.engine_sequence_overhead = c.engine.sequence;
    c.profile.engine_token_overhead = c.engine.token;
  }
  KV_ASSIGN_OR_RETURN(TierSpeeds tiers, MeasureTierSpeeds(layout, block_bytes));
  c.profile.cpu_tier = tiers.cpu;
  c.profile.file_tier = tiers.file;
  c.profile.name = "cpu (calibrated)";
  c.profile.description = fmt::format("{}, {} threads, calibrated on {}", CpuModelName(),
                                      config.NumThreads(), o.model_path);
  c.notes_json = NotesJson(o, c, config.NumThreads(), load_before,
                           kv::DescribeKvFormats(layout));
  return c;
}

}  // namespace kvserve::sim
