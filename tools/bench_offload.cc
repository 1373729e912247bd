// `kvserve bench offload MODEL [--input-len 1024,4096] [--root-dir DIR] [--redis-url URL]
// [--threads N]`: time to first token of one prompt served five ways, in-process through the
// real engine and tiers:
//   cold    nothing cached: the whole prompt is computed
//   device  the same prompt again: a device prefix-cache hit
//   cpu     after ResetPrefixCache (the blocks go to the CPU tier): loaded from CPU memory
//   file    a new engine over the same directory (empty CPU tier): loaded from files, after
//           dropping the page cache when this process may (root: /proc/sys/vm/drop_caches)
//   redis   a new engine with only a Redis tier (--redis-url), which the first engine wrote
//           through to
// Every request carries a cache_salt unique to the run, so nothing stored by an earlier run
// (in a shared Redis, say) hits. Each TTFT is the median of --repeats runs (the hit is
// re-created before each). Each tier's load is timed on its own too: from AddRequest to the
// start of the step that computes the rest of the prompt (lookup, load, hand-over), so the
// forward pass, the same work as a device hit's, does not add its noise to the load rate. The
// output is a Markdown table for docs/PERFORMANCE.md.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/log.h"
#include "core/units.h"
#include "engine/engine.h"
#include "tools/bench_compare_util.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

struct BenchOffloadFlags {
  std::string model;
  std::vector<int64_t> input_lens = {1024, 4096};
  std::string root_dir;  // default: a fresh directory under /tmp
  std::string redis_url;
  int repeats = 3;
  EngineFlags engine_flags;  // --kv-cache-memory-bytes defaults to 2GiB here
};

using Clock = std::chrono::steady_clock;

// One one-token request: seconds from AddRequest to its first token (ttft), and to the start
// of the step that computed it (admit: the prefix lookup, a tier load and the hand-over back to
// the scheduler; about zero for a device hit, whose lookup runs inside that step).
struct Timing {
  double ttft = -1;
  double admit = -1;
};

Result<Timing> Ttft(engine::Engine& eng, const std::vector<int32_t>& prompt,
                    int64_t* num_cached) {
  engine::EngineRequest r;
  r.prompt = prompt;
  r.params.max_tokens = 1;
  r.params.temperature = 0;
  // A salt of this run: blocks a shared Redis (or a reused directory) kept from an earlier
  // run never hit.
  static const std::string salt = fmt::format(
      "bench-offload-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
  r.cache_salt = salt;
  const Clock::time_point start = Clock::now();
  KV_ASSIGN_OR_RETURN(engine::RequestId id, eng.AddRequest(std::move(r)));
  Timing t;
  auto seconds = [start](Clock::time_point at) {
    return std::chrono::duration<double>(at - start).count();
  };
  while (eng.HasUnfinished()) {
    const Clock::time_point step_start = Clock::now();
    for (const engine::RequestOutput& out : eng.Step()) {
      if (out.id == id && !out.tokens.empty() && t.ttft < 0) {
        t.ttft = seconds(Clock::now());
        t.admit = seconds(step_start);
        *num_cached = out.num_cached_tokens;
      }
    }
  }
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool DropPageCache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "1\n";
  return static_cast<bool>(f.flush());
}

struct Setup {
  bool cpu = true;
  bool files = false;
  bool redis = false;
};

Result<std::unique_ptr<engine::Engine>> Open(const BenchOffloadFlags& f, const Setup& s,
                                             int64_t max_model_len) {
  KV_ASSIGN_OR_RETURN(engine::EngineConfig config, ResolveEngineFlags(f.engine_flags));
  config.max_model_len = max_model_len;
  offload::OffloadConfig oc;
  oc.spec_name = "TieringOffloadingSpec";
  oc.cpu_bytes_to_use = s.cpu ? 8ull << 30 : 0;
  if (s.files) oc.file = offload::FileTierConfig{f.root_dir, 8, 8};
  if (s.redis) {
    KV_ASSIGN_OR_RETURN(offload::RedisAddress address, offload::ParseRedisUrl(f.redis_url));
    oc.redis = offload::RedisTierConfig{f.redis_url, address};
  }
  config.offload = oc;
  return engine::Engine::Load(f.model, config);
}

// The five TTFTs (seconds; -1 when not measured) of one prompt length.
struct Row {
  int64_t len = 0;
  double cold = -1, device = -1, cpu = -1, file = -1, redis = -1;
  // Medians of Timing::admit of the tier runs: the load phase (lookup, load, hand-over).
  double cpu_load = -1, file_load = -1, redis_load = -1;
  int64_t cached = 0;
  uint64_t bytes = 0;  // KV bytes loaded for the prompt
  bool page_cache_dropped = false;
  std::string notes;  // runs whose hit was not the full one
};

// Notes a run that was served fewer cached tokens than the full hit.
void CheckHit(Row& row, const char* what, int64_t cached) {
  const int64_t block = engine::EngineConfig{}.block_size;  // Open() keeps the default
  const int64_t want = (row.len - 1) / block * block;
  if (cached != want) row.notes += fmt::format(" {} served {} of {} tokens;", what, cached, want);
}

Result<Row> Measure(const BenchOffloadFlags& f, int64_t len, uint32_t seed) {
  Row row;
  row.len = len;
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  int64_t cached = 0;
  Setup first{true, true, !f.redis_url.empty()};
  KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng, Open(f, first, len + 8));
  std::vector<double> cold, device, cpu, cpu_load;
  for (int i = 0; i < f.repeats; ++i) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = static_cast<int32_t>(3 + rng() % (eng->vocab_size() - 3));
    prompts.push_back(p);
    KV_ASSIGN_OR_RETURN(Timing c, Ttft(*eng, p, &cached));
    cold.push_back(c.ttft);
    KV_ASSIGN_OR_RETURN(Timing d, Ttft(*eng, p, &cached));
    CheckHit(row, "device", cached);
    device.push_back(d.ttft);
    eng->ResetPrefixCache();
    KV_ASSIGN_OR_RETURN(Timing m, Ttft(*eng, p, &cached));
    CheckHit(row, "cpu", cached);
    cpu.push_back(m.ttft);
    cpu_load.push_back(m.admit);
    row.cached = cached;
  }
  row.bytes = static_cast<uint64_t>(eng->kv().capacity().bytes_per_token * row.cached);
  row.cold = Median(cold), row.device = Median(device), row.cpu = Median(cpu);
  row.cpu_load = Median(cpu_load);
  eng.reset();  // flushes the write-through queue
  std::vector<double> file, redis, file_load, redis_load;
  for (const std::vector<int32_t>& p : prompts) {
    row.page_cache_dropped = DropPageCache();
    KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> fe, Open(f, {false, true, false}, len + 8));
    KV_ASSIGN_OR_RETURN(Timing t, Ttft(*fe, p, &cached));
    CheckHit(row, "file", cached);
    file.push_back(t.ttft);
    file_load.push_back(t.admit);
    if (!f.redis_url.empty()) {
      KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> re, Open(f, {false, false, true}, len + 8));
      KV_ASSIGN_OR_RETURN(Timing rt, Ttft(*re, p, &cached));
      CheckHit(row, "redis", cached);
      redis.push_back(rt.ttft);
      redis_load.push_back(rt.admit);
    }
  }
  row.file = Median(file);
  row.file_load = Median(file_load);
  if (!redis.empty()) row.redis = Median(redis), row.redis_load = Median(redis_load);
  return row;
}

std::string Ms(double s) { return s < 0 ? "-" : fmt::format("{:.1f} ms", s * 1e3); }
// "load phase (rate)", e.g. "27.9 ms (5.39 GB/s)".
std::string Load(uint64_t bytes, double s) {
  if (s <= 0) return "-";
  return fmt::format("{} ({:.2f} GB/s)", Ms(s), static_cast<double>(bytes) / s / 1e9);
}

Status RunBenchOffload(BenchOffloadFlags f) {
  if (f.root_dir.empty()) {
    f.root_dir = (std::filesystem::temp_directory_path() /
                  fmt::format("kvserve-bench-offload-{}", ::getpid())).string();
  }
  if (f.repeats < 1) return InvalidArgument("--repeats must be at least 1");
  KV_ASSIGN_OR_RETURN(engine::EngineConfig config, ResolveEngineFlags(f.engine_flags));
  const int threads = config.NumThreads();
  const double bandwidth = MeasureReadBandwidth(threads);
  fmt::print("memory read bandwidth ({} threads, best of 3 passes over 1 GiB): {:.1f} GB/s; "
             "load average {}\n\n",
             threads, bandwidth / 1e9, LoadAverage());
  fmt::print("| prompt tokens | cold | device hit | CPU tier | file tier | Redis | cached "
             "tokens | KV loaded | CPU tier load | file tier load | Redis load |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool dropped = true;
  std::vector<double> rates;  // CPU tier load rates (bytes/s), per prompt length
  for (size_t i = 0; i < f.input_lens.size(); ++i) {
    KV_ASSIGN_OR_RETURN(Row r, Measure(f, f.input_lens[i], static_cast<uint32_t>(17 + i)));
    dropped = dropped && r.page_cache_dropped;
    fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.len, Ms(r.cold),
               Ms(r.device), Ms(r.cpu), Ms(r.file), Ms(r.redis), r.cached, FormatBytes(r.bytes),
               Load(r.bytes, r.cpu_load), Load(r.bytes, r.file_load), Load(r.bytes, r.redis_load));
    rates.push_back(r.cpu_load > 0 ? static_cast<double>(r.bytes) / r.cpu_load : 0);
    if (!r.notes.empty()) fmt::print("warning ({} tokens):{}\n", r.len, r.notes);
    std::fflush(stdout);
  }
  fmt::print("\nmedians of {} runs; page cache {} before each file-tier run; tier load = the "
             "request's time from AddRequest to the step that computes its rest (prefix lookup, "
             "load into device blocks, hand-over), rate = KV bytes / that time; the rest of a "
             "tier TTFT is that step, the same work as a device hit's\n",
             f.repeats, dropped ? "dropped" : "NOT dropped (not root)");
  for (size_t i = 0; i < rates.size(); ++i) {
    fmt::print("CPU tier load at {} tokens: {:.0f}% of the memory read bandwidth\n",
               f.input_lens[i], 100 * rates[i] / bandwidth);
  }
  std::error_code ec;
  std::filesystem::remove_all(f.root_dir, ec);
  return Status::Ok();
}

}  // namespace

void RegisterBenchOffload(CLI::App* bench) {
  auto f = std::make_shared<BenchOffloadFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "offload", "TTFT cold vs device hit vs CPU / file / Redis tier reload");
  cmd->add_option("model", f->model, "GGUF model")->required();
  cmd->add_option("--input-len", f->input_lens, "prompt lengths")->delimiter(',');
  cmd->add_option("--root-dir", f->root_dir, "file tier directory (default: a temp dir)");
  cmd->add_option("--redis-url", f->redis_url, "also measure a Redis tier, e.g. redis://127.0.0.1:6379");
  cmd->add_option("--repeats", f->repeats)->capture_default_str();
  f->engine_flags.kv_cache_memory = "2GiB";
  AddEngineFlags(cmd, f->engine_flags, EngineFlagSet::kEngine);
  cmd->callback([f] { ReportFailure("bench offload", RunBenchOffload(*f)); });
}

}  // namespace kvserve::tools
