// `kvserve bench throughput MODEL --num-prompts N --input-len I --output-len O [knobs]`:
// offline throughput like `vllm bench throughput`. Runs the engine in-process on random
// token prompts (fixed seed), every request ignoring EOS and generating exactly O tokens;
// prints requests/s, total tokens/s and output tokens/s, exact TTFT / inter-token latency
// percentiles, the aggregate decode rate (tokens / wall time of the steps that computed no
// prompt token: batched decode alone, without the prefill of arriving requests), the
// engine's metrics and, on Linux, how long the stepping thread ran, waited for a core and
// idled (what a shared machine cost the run). A progress bar goes to stderr.
// --request-rate R spreads arrivals (request i at i / R seconds) for latency measurements
// under a mixed load; --shared-prefix-len P gives every prompt the same first P tokens (with
// --num-prefix-groups G, request i gets group i % G's P tokens). The KV tiers of serve
// (--kv-transfer-config, --kv-offloading-size) apply too.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <thread>

#include "core/units.h"
#include "engine/engine.h"
#include "sampling/sampling_params.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  std::string model;
  int num_prompts = 100;
  int input_len = 128;
  int output_len = 128;
  int shared_prefix_len = 0;
  int num_prefix_groups = 1;
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 0;
  sampling::SamplingParams sampling;  // every request's (the flags set a few fields)
  EngineFlags engine_flags;
  engine::EngineConfig config;  // resolved from engine_flags
};

struct Timing {
  double arrival = 0;
  std::vector<double> token_times;  // seconds since start
  // The same instants on a clock that stops while the stepping thread waits for a core (see
  // ThreadSchedstat): the run as an undisturbed machine would have timed it.
  std::vector<double> undisturbed_times;
};

// Steps that computed no prompt token (pure batched decode): their wall time and tokens.
struct DecodeSteps {
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

// The calling thread's scheduler accounting (Linux /proc/thread-self/schedstat): seconds it ran
// on a core and seconds it was ready to run but waited for one (other processes, or the
// engine's own I/O threads, held the cores). Bound to the thread that constructs it; Read is
// one pread (about a microsecond). Read gives nullopt where the file is missing.
class ThreadSchedstat {
 public:
  struct Sample {
    double running = 0;
    double waiting = 0;
  };
  ThreadSchedstat() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~ThreadSchedstat() {
    if (fd_ >= 0) ::close(fd_);
  }
  ThreadSchedstat(const ThreadSchedstat&) = delete;
  ThreadSchedstat& operator=(const ThreadSchedstat&) = delete;

  std::optional<Sample> Read() const {
    if (fd_ < 0) return std::nullopt;
    char text[128];
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    if (n <= 0) return std::nullopt;
    text[n] = '\0';
    unsigned long long running_ns = 0, waiting_ns = 0;
    if (std::sscanf(text, "%llu %llu", &running_ns, &waiting_ns) != 2) return std::nullopt;
    return Sample{1e-9 * static_cast<double>(running_ns), 1e-9 * static_cast<double>(waiting_ns)};
  }

 private:
  int fd_;
};

// TTFT, inter-token latency and time per output token of every request, from `times` (a
// member pointer: the wall-clock or the undisturbed instants).
struct Latencies {
  std::vector<double> ttft, itl, tpot;
};
Latencies Collect(const std::vector<Timing>& timings, std::vector<double> Timing::*times) {
  Latencies l;
  for (const Timing& timing : timings) {
    const std::vector<double>& t = timing.*times;
    l.ttft.push_back(t.front() - timing.arrival);
    for (size_t i = 1; i < t.size(); ++i) l.itl.push_back(t[i] - t[i - 1]);
    if (t.size() > 1) l.tpot.push_back((t.back() - t.front()) / static_cast<double>(t.size() - 1));
  }
  return l;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

void DrawProgress(int done, int total, double elapsed) {
  const int width = 40;
  const int filled = total ? done * width / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d requests, %.1f s", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), done, total, elapsed);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

std::vector<engine::EngineRequest> MakeRequests(const BenchFlags& f, int32_t vocab) {
  std::mt19937_64 rng(f.seed);
  std::vector<std::vector<int32_t>> prefixes(f.num_prefix_groups);
  for (std::vector<int32_t>& prefix : prefixes) {
    prefix.resize(std::min(f.shared_prefix_len, f.input_len));
    for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % vocab);
  }
  std::vector<engine::EngineRequest> requests(f.num_prompts);
  for (int i = 0; i < f.num_prompts; ++i) {
    engine::EngineRequest& r = requests[i];
    r.prompt = prefixes[i % f.num_prefix_groups];
    while (static_cast<int>(r.prompt.size()) < f.input_len) {
      r.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    }
    r.params = f.sampling;
    r.params.ignore_eos = true;
    r.params.max_tokens = f.output_len;
    r.params.seed = f.seed + i;
    r.request_id = std::to_string(i);
  }
  return requests;
}

// How the stepping thread spent a run (ThreadSchedstat), and the run's length on the clock
// that stops while it waits for a core.
struct ThreadTimes {
  double running = 0;
  double waiting = 0;
  double undisturbed_elapsed = 0;
};

// Adds requests as they arrive, steps until everything finished; fills `timings` and, where
// the system tells, how the stepping thread's time split between running and waiting for a
// core (`thread`).
Status Drive(engine::Engine& eng, std::vector<engine::EngineRequest> requests, double rate,
             std::vector<Timing>& timings, double& elapsed, DecodeSteps& decode,
             std::optional<ThreadTimes>& thread) {
  const ThreadSchedstat schedstat;
  const std::optional<ThreadSchedstat::Sample> first = schedstat.Read();
  const Clock::time_point start = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  // now() less the time spent waiting for a core since the start.
  auto undisturbed = [&](double wall) {
    const std::optional<ThreadSchedstat::Sample> s = schedstat.Read();
    return first && s ? wall - (s->waiting - first->waiting) : wall;
  };
  std::unordered_map<engine::RequestId, size_t> index;
  size_t next = 0;
  int done = 0;
  const int total = static_cast<int>(requests.size());
  timings.assign(requests.size(), {});
  while (done < total) {
    for (; next < requests.size() && (std::isinf(rate) || next / rate <= now()); ++next) {
      timings[next].arrival = std::isinf(rate) ? 0.0 : next / rate;
      KV_ASSIGN_OR_RETURN(engine::RequestId id, eng.AddRequest(std::move(requests[next])));
      index[id] = next;
    }
    if (!eng.HasUnfinished()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(next / rate - now()));
      continue;
    }
    const int64_t prompt_before = eng.Metrics().num_prompt_tokens;
    const double step_start = now();
    const std::vector<engine::RequestOutput> outputs = eng.Step();
    const double step_seconds = now() - step_start;  // the metrics copy below is not timed
    if (eng.Metrics().num_prompt_tokens == prompt_before) {
      ++decode.steps;
      decode.seconds += step_seconds;
      for (const engine::RequestOutput& out : outputs) decode.tokens += out.tokens.size();
    }
    const double wall = now();
    const double calm = undisturbed(wall);
    for (const engine::RequestOutput& out : outputs) {
      Timing& t = timings[index.at(out.id)];
      t.token_times.insert(t.token_times.end(), out.tokens.size(), wall);
      t.undisturbed_times.insert(t.undisturbed_times.end(), out.tokens.size(), calm);
      if (out.finish) {
        if (*out.finish == engine::FinishReason::kError) return Internal(out.error);
        ++done;
        DrawProgress(done, total, now());
      }
    }
  }
  elapsed = now();
  const std::optional<ThreadSchedstat::Sample> last = schedstat.Read();
  if (first && last) {
    thread = ThreadTimes{last->running - first->running, last->waiting - first->waiting,
                         elapsed - (last->waiting - first->waiting)};
  }
  return Status::Ok();
}

Status RunThroughput(BenchFlags f) {
  if (f.num_prompts < 1 || f.input_len < 1 || f.output_len < 1) {
    return InvalidArgument("--num-prompts, --input-len and --output-len must be at least 1");
  }
  if (!(f.request_rate > 0)) return InvalidArgument("--request-rate must be positive");
  if (f.num_prefix_groups < 1) return InvalidArgument("--num-prefix-groups must be at least 1");
  KV_ASSIGN_OR_RETURN(f.config, ResolveEngineFlags(f.engine_flags));
  // The workload's KV blocks are made resident before the clock starts, as llama.cpp (the
  // other side of `bench compare`) clears its context's KV buffer when it creates it: a block's
  // first write would otherwise take a page fault, a fresh process's one-off cost (slow in some
  // VMs: ~10 ms per 2 MiB page) that would land in decode steps but not in a single stream's.
  const int64_t block = f.config.block_size;
  f.config.prefault_kv_tokens =
      int64_t{f.num_prompts} * ((int64_t{f.input_len} + f.output_len + block - 1) / block * block);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                      engine::Engine::Load(f.model, f.config));
  fmt::print("KV made resident before the clock: {} in {:.0f} ms\n",
             FormatBytes(static_cast<uint64_t>(eng->kv().prefaulted_bytes())),
             eng->kv().prefault_seconds() * 1e3);
  std::vector<Timing> timings;
  double elapsed = 0;
  DecodeSteps decode;
  std::optional<ThreadTimes> thread;
  KV_RETURN_IF_ERROR(Drive(*eng, MakeRequests(f, eng->vocab_size()), f.request_rate, timings,
                           elapsed, decode, thread));
  const auto [ttft, itl, tpot] = Collect(timings, &Timing::token_times);
  const double n = f.num_prompts;
  const double out_tokens = n * f.output_len;
  fmt::print("Throughput: {:.2f} requests/s, {:.2f} total tokens/s, {:.2f} output tokens/s\n",
             n / elapsed, n * (f.input_len + f.output_len) / elapsed, out_tokens / elapsed);
  fmt::print("Elapsed {:.2f} s; {} requests x ({} prompt + {} output) tokens; threads {}, "
             "max-num-seqs {}, max-num-batched-tokens {}, max-model-len {}\n",
             elapsed, f.num_prompts, f.input_len, f.output_len, f.config.NumThreads(),
             f.config.max_num_seqs, f.config.max_num_batched_tokens, eng->max_model_len());
  auto ms = [](double s) { return s * 1e3; };
  if (thread) {
    // On a shared machine: how much of the elapsed time the stepping thread could not run, and
    // (every request there from the start, so nothing else depends on the wall clock) the
    // numbers on a clock that stops while it waits for a core.
    fmt::print("Engine thread: {:.3f} s running, {:.3f} s waiting for a core, {:.3f} s idle\n",
               thread->running, thread->waiting,
               std::max(0.0, elapsed - thread->running - thread->waiting));
    if (std::isinf(f.request_rate)) {
      const Latencies calm = Collect(timings, &Timing::undisturbed_times);
      fmt::print("Without the waits for a core: elapsed {:.3f} s, {:.2f} requests/s; TTFT ms p50 "
                 "{:.1f}; time per output token ms p50 {:.2f}; inter-token latency ms p50 {:.2f}\n",
                 thread->undisturbed_elapsed, n / thread->undisturbed_elapsed,
                 ms(Percentile(calm.ttft, 0.5)), ms(Percentile(calm.tpot, 0.5)),
                 ms(Percentile(calm.itl, 0.5)));
    }
  }
  double ttft_sum = 0;
  for (double v : ttft) ttft_sum += v;
  fmt::print("TTFT ms: mean {:.1f} p50 {:.1f} p99 {:.1f} (first request {:.1f}, last {:.1f})\n",
             ms(ttft_sum / n), ms(Percentile(ttft, 0.5)), ms(Percentile(ttft, 0.99)),
             ms(ttft.front()), ms(ttft.back()));
  fmt::print("Inter-token latency ms: p50 {:.2f} p99 {:.2f}; time per output token ms: p50 {:.2f}\n",
             ms(Percentile(itl, 0.5)), ms(Percentile(itl, 0.99)), ms(Percentile(tpot, 0.5)));
  if (decode.steps > 0) {
    fmt::print(
        "Decode-only steps: {} steps, {} tokens, {:.2f} tokens/s ({:.1f} sequences and "
        "{:.2f} ms per step)\n",
        decode.steps, decode.tokens, decode.tokens / decode.seconds,
        static_cast<double>(decode.tokens) / decode.steps, ms(decode.seconds / decode.steps));
  }
  for (const std::string& line : eng->Metrics().Format()) fmt::print("  {}\n", line);
  if (const offload::OffloadManager* tiers = eng->offload()) {
    for (const offload::TierStats& t : tiers->Stats()) {
      fmt::print("  tier {}: {} hits, {} bytes loaded, {} stores, {} evictions\n", t.tier, t.hits,
                  t.bytes_loaded, t.stores, t.evictions);
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterBench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks of the serving engine");
  bench->require_subcommand(1);
  RegisterBenchServe(bench);
  CLI::App* tp = bench->add_subcommand("throughput", "offline throughput (like vllm bench throughput)");
  auto f = std::make_shared<BenchFlags>();
  tp->add_option("model", f->model, "GGUF llama model")->required();
  tp->add_option("--num-prompts", f->num_prompts, "requests")->capture_default_str();
  tp->add_option("--input-len", f->input_len, "prompt tokens per request")->capture_default_str();
  tp->add_option("--output-len", f->output_len, "generated tokens per request")->capture_default_str();
  tp->add_option("--shared-prefix-len", f->shared_prefix_len, "prompt tokens shared by all");
  tp->add_option("--num-prefix-groups", f->num_prefix_groups,
                 "request i shares group i % G's prefix")->capture_default_str();
  tp->add_option("--request-rate", f->request_rate, "arrivals per second (default: all at once)");
  tp->add_option("--seed", f->seed, "prompt and sampling seed")->capture_default_str();
  tp->add_option("--temperature", f->sampling.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  tp->add_option("--top-p", f->sampling.top_p,
                 "nucleus sampling: the most likely tokens up to this mass")
      ->capture_default_str();
  tp->add_option("--top-k", f->sampling.top_k,
                 "sample among the k most likely tokens (0 or -1: all)")
      ->capture_default_str();
  tp->add_option("--min-p", f->sampling.min_p,
                 "drop tokens below min-p x the most likely one's prob")
      ->capture_default_str();
  tp->add_option("--logprobs", f->sampling.logprobs,
                 "return each token's logprob and the N most likely");
  AddEngineFlags(tp, f->engine_flags, EngineFlagSet::kServe);
  tp->callback([f] { ReportFailure("bench throughput", RunThroughput(*f)); });
}

}  // namespace kvserve::tools
