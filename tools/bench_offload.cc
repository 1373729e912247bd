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
// (in a shared Redis, say) hits. Each TTFT is the median of --repeats runs (the hit is re-created before each). The output
// is a Markdown table for docs/PERFORMANCE.md, plus load bandwidth per tier.
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

// Seconds from AddRequest to the first token of a one-token request.
Result<double> Ttft(engine::Engine& eng, const std::vector<int32_t>& prompt,
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
  double ttft = -1;
  while (eng.HasUnfinished()) {
    for (const engine::RequestOutput& out : eng.Step()) {
      if (out.id == id && !out.tokens.empty() && ttft < 0) {
        ttft = std::chrono::duration<double>(Clock::now() - start).count();
        *num_cached = out.num_cached_tokens;
      }
    }
  }
  return ttft;
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
  std::vector<double> cold, device, cpu;
  for (int i = 0; i < f.repeats; ++i) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = static_cast<int32_t>(3 + rng() % (eng->vocab_size() - 3));
    prompts.push_back(p);
    KV_ASSIGN_OR_RETURN(double c, Ttft(*eng, p, &cached));
    cold.push_back(c);
    KV_ASSIGN_OR_RETURN(double d, Ttft(*eng, p, &cached));
    CheckHit(row, "device", cached);
    device.push_back(d);
    eng->ResetPrefixCache();
    KV_ASSIGN_OR_RETURN(double m, Ttft(*eng, p, &cached));
    CheckHit(row, "cpu", cached);
    cpu.push_back(m);
    row.cached = cached;
  }
  row.bytes = static_cast<uint64_t>(eng->kv().capacity().bytes_per_token * row.cached);
  row.cold = Median(cold), row.device = Median(device), row.cpu = Median(cpu);
  eng.reset();  // flushes the write-through queue
  std::vector<double> file, redis;
  for (const std::vector<int32_t>& p : prompts) {
    row.page_cache_dropped = DropPageCache();
    KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> fe, Open(f, {false, true, false}, len + 8));
    KV_ASSIGN_OR_RETURN(double t, Ttft(*fe, p, &cached));
    CheckHit(row, "file", cached);
    file.push_back(t);
    if (!f.redis_url.empty()) {
      KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> re, Open(f, {false, false, true}, len + 8));
      KV_ASSIGN_OR_RETURN(double rt, Ttft(*re, p, &cached));
      CheckHit(row, "redis", cached);
      redis.push_back(rt);
    }
  }
  row.file = Median(file);
  if (!redis.empty()) row.redis = Median(redis);
  return row;
}

std::string Ms(double s) { return s < 0 ? "-" : fmt::format("{:.1f} ms", s * 1e3); }
std::string Gbps(uint64_t bytes, double s, double device_s) {
  if (s < 0 || s <= device_s) return "-";
  return fmt::format("{:.2f} GB/s", static_cast<double>(bytes) / std::max(1e-9, s - device_s) / 1e9);
}

Status RunBenchOffload(BenchOffloadFlags f) {
  if (f.root_dir.empty()) {
    f.root_dir = (std::filesystem::temp_directory_path() /
                  fmt::format("kvserve-bench-offload-{}", ::getpid())).string();
  }
  if (f.repeats < 1) return InvalidArgument("--repeats must be at least 1");
  fmt::print("| prompt tokens | cold | device hit | CPU tier | file tier | Redis | cached "
             "tokens | KV loaded | CPU load rate | file load rate |\n|---|---|---|---|---|---|---|---|---|---|\n");
  bool dropped = true;
  for (size_t i = 0; i < f.input_lens.size(); ++i) {
    KV_ASSIGN_OR_RETURN(Row r, Measure(f, f.input_lens[i], static_cast<uint32_t>(17 + i)));
    dropped = dropped && r.page_cache_dropped;
    fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.len, Ms(r.cold),
               Ms(r.device), Ms(r.cpu), Ms(r.file), Ms(r.redis), r.cached, FormatBytes(r.bytes),
               Gbps(r.bytes, r.cpu, r.device), Gbps(r.bytes, r.file, r.device));
    if (!r.notes.empty()) fmt::print("warning ({} tokens):{}\n", r.len, r.notes);
    std::fflush(stdout);
  }
  fmt::print("\nmedians of {} runs; page cache {} before each file-tier run; load rate = KV "
             "bytes / (tier TTFT - device-hit TTFT)\n",
             f.repeats, dropped ? "dropped" : "NOT dropped (not root)");
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
