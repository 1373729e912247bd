// `kvserve bench serve --base-url URL --num-prompts N --concurrency C [--request-rate R]
// (--input-len I --output-len O | --dataset FILE) [--model NAME] [--api-key KEY]`:
// online serving benchmark like `vllm bench serve`, against kvserve or any other
// OpenAI-compatible server. Streams /v1/completions requests (ignore_eos, exactly O tokens),
// at most C in flight, arrivals Poisson at R per second (default: all at once), and prints
// TTFT, TPOT and ITL mean/p50/p90/p99 plus request and token throughput.
// Random prompts are token ids (I of them, fixed seed; with --shared-prefix-len P the first P
// are the same in every prompt, so the server's prefix cache can serve them); --dataset is
// JSON lines with a "prompt" string and optional "max_tokens". The usage chunk's
// prompt_tokens_details.cached_tokens is summed into the prefix-cache line. --dashboard prints
// the URL of kvserve's live KV dashboard (docs/dashboard.md) before the run starts.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchServeFlags {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;  // default: the server's first model
  std::string api_key;
  std::string dataset;
  int num_prompts = 100;
  int concurrency = 1;
  double request_rate = std::numeric_limits<double>::infinity();
  int input_len = 128;
  int output_len = 128;
  int shared_prefix_len = 0;
  int vocab_hint = 500;  // random token ids are drawn from [1, vocab_hint)
  uint64_t seed = 0;
  bool dashboard = false;  // print the server's live KV dashboard URL first
  int dashboard_clients = 0;  // open /v1/kv/events streams during the run (load on the server)
};

struct Job {
  json prompt;
  int max_tokens = 0;
};

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;
};

Result<std::vector<Job>> MakeJobs(const BenchServeFlags& f) {
  std::vector<Job> jobs;
  if (!f.dataset.empty()) {
    std::ifstream in(f.dataset);
    if (!in) return NotFound("cannot read --dataset " + f.dataset);
    std::string line;
    while (static_cast<int>(jobs.size()) < f.num_prompts && std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("prompt")) continue;
      jobs.push_back({j["prompt"], j.value("max_tokens", f.output_len)});
    }
    if (jobs.empty()) return InvalidArgument("--dataset has no {\"prompt\": ...} lines");
    return jobs;
  }
  std::mt19937_64 rng(f.seed);
  auto random_id = [&] { return 1 + static_cast<int>(rng() % (f.vocab_hint - 1)); };
  json prefix = json::array();
  for (int t = 0; t < std::min(f.shared_prefix_len, f.input_len); ++t)
    prefix.push_back(random_id());
  for (int i = 0; i < f.num_prompts; ++i) {
    json ids = prefix;
    while (static_cast<int>(ids.size()) < f.input_len) ids.push_back(random_id());
    jobs.push_back({ids, f.output_len});
  }
  return jobs;
}

Outcome RunOne(const BenchServeFlags& f, const std::string& model, const Job& job) {
  httplib::Client client(f.base_url);
  client.set_read_timeout(600, 0);
  httplib::Headers headers;
  if (!f.api_key.empty()) headers.emplace("Authorization", "Bearer " + f.api_key);
  json body = {{"model", model}, {"prompt", job.prompt}, {"max_tokens", job.max_tokens},
               {"temperature", 0}, {"ignore_eos", true}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  Outcome out;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  std::string buffer;
  int64_t chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = headers;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        out.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
        out.output_tokens = chunk["usage"].value("completion_tokens", 0);
        const json& details = chunk["usage"].value("prompt_tokens_details", json::object());
        if (details.is_object()) out.cached_tokens = details.value("cached_tokens", 0);
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      if (chunk["choices"][0].value("text", "").empty()) continue;
      const Clock::time_point now = Clock::now();
      if (chunks++ == 0) {
        out.ttft = std::chrono::duration<double>(now - start).count();
      } else {
        out.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  httplib::Result res = client.send(req);
  out.e2e = std::chrono::duration<double>(Clock::now() - start).count();
  if (!res || res->status != 200) {
    out.error = res ? fmt::format("HTTP {}: {}", res->status, res->body)
                    : "connection failed: " + httplib::to_string(res.error());
    return out;
  }
  if (out.output_tokens == 0) out.output_tokens = chunks;
  out.ok = chunks > 0;
  return out;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

void PrintStats(const char* name, const std::vector<double>& seconds) {
  double sum = 0;
  for (double s : seconds) sum += s;
  const double mean = seconds.empty() ? 0 : sum / static_cast<double>(seconds.size());
  fmt::print("{:<8} ms: mean {:8.2f}  p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}\n", name, mean * 1e3,
             Percentile(seconds, 0.5) * 1e3, Percentile(seconds, 0.9) * 1e3,
             Percentile(seconds, 0.99) * 1e3);
}

Result<std::string> FirstModel(const BenchServeFlags& f) {
  httplib::Client client(f.base_url);
  httplib::Headers headers;
  if (!f.api_key.empty()) headers.emplace("Authorization", "Bearer " + f.api_key);
  httplib::Result res = client.Get("/v1/models", headers);
  if (!res || res->status != 200) return Unavailable("GET " + f.base_url + "/v1/models failed");
  json body = json::parse(res->body, nullptr, false);
  if (body.is_discarded() || body["data"].empty()) return Unavailable("/v1/models lists no model");
  return body["data"][0]["id"].get<std::string>();
}

// Runs the jobs with at most `concurrency` in flight, releasing job i at its arrival time.
std::vector<Outcome> RunAll(const BenchServeFlags& f, const std::string& model,
                            const std::vector<Job>& jobs, double& elapsed) {
  std::vector<double> arrivals(jobs.size(), 0.0);
  std::mt19937_64 rng(f.seed + 1);
  std::exponential_distribution<double> gap(std::isinf(f.request_rate) ? 1.0 : f.request_rate);
  for (size_t i = 1; i < jobs.size(); ++i) {
    arrivals[i] = std::isinf(f.request_rate) ? 0.0 : arrivals[i - 1] + gap(rng);
  }
  std::vector<Outcome> outcomes(jobs.size());
  std::atomic<size_t> next = 0;
  std::atomic<int> done = 0;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < f.concurrency; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrivals[i])));
        outcomes[i] = RunOne(f, model, jobs[i]);
        const int n = ++done;
        std::fprintf(stderr, "\r%d/%zu requests", n, jobs.size());
      }
    });
  }
  for (std::thread& t : workers) t.join();
  std::fprintf(stderr, "\n");
  elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return outcomes;
}

// N clients reading GET /v1/kv/events (as N open dashboards would) until destroyed.
class DashboardClients {
 public:
  DashboardClients(const BenchServeFlags& f, int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, &f] {
        httplib::Client client(f.base_url);
        client.set_read_timeout(30, 0);  // events may come once every few seconds
        httplib::Headers headers;
        if (!f.api_key.empty()) headers.emplace("Authorization", "Bearer " + f.api_key);
        while (!stop_.load()) {
          opened_.fetch_add(1);
          client.Get("/v1/kv/events", headers, [&](const char* data, size_t size) {
            // Counted locally, added once: one atomic add per byte would cost the readers
            // (on the server's cores) more than the server spends on the stream.
            int64_t events = 0;
            for (size_t i = 0; i + 1 < size; ++i) events += data[i] == '\n' && data[i + 1] == '\n';
            if (events > 0) events_.fetch_add(events);
            return !stop_.load();
          });
        }
      });
    }
  }
  ~DashboardClients() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
  }
  int64_t events() const { return events_.load(); }
  int64_t opened() const { return opened_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> events_{0}, opened_{0};
  std::vector<std::thread> threads_;
};

Status RunBenchServe(BenchServeFlags f) {
  if (f.num_prompts < 1 || f.concurrency < 1 || f.input_len < 1 || f.output_len < 1) {
    return InvalidArgument("--num-prompts, --concurrency, --input-len, --output-len must be >= 1");
  }
  if (f.shared_prefix_len < 0) return InvalidArgument("--shared-prefix-len must be >= 0");
  if (f.dashboard_clients < 0) return InvalidArgument("--dashboard-clients must be >= 0");
  if (!(f.request_rate > 0)) return InvalidArgument("--request-rate must be positive");
  if (f.model.empty()) {
    KV_ASSIGN_OR_RETURN(f.model, FirstModel(f));
  }
  KV_ASSIGN_OR_RETURN(std::vector<Job> jobs, MakeJobs(f));
  if (f.dashboard) {
    std::string_view base = f.base_url;
    while (base.ends_with('/')) base.remove_suffix(1);
    fmt::print("Live KV dashboard: {}/dashboard\n", base);
    std::fflush(stdout);
  }
  double elapsed = 0;
  std::optional<DashboardClients> dashboards;
  if (f.dashboard_clients > 0) {
    dashboards.emplace(f, f.dashboard_clients);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // every stream open
  }
  const int64_t events_before = dashboards ? dashboards->events() : 0;
  std::vector<Outcome> outcomes = RunAll(f, f.model, jobs, elapsed);
  const int64_t dashboard_events = dashboards ? dashboards->events() - events_before : 0;
  const int64_t dashboard_opens = dashboards ? dashboards->opened() : 0;
  dashboards.reset();
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t in_tokens = 0, out_tokens = 0, cached_tokens = 0;
  int ok = 0;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      fmt::print(stderr, "request failed: {}\n", o.error);
      continue;
    }
    ++ok;
    ttft.push_back(o.ttft);
    e2e.push_back(o.e2e);
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
    if (o.output_tokens > 1) tpot.push_back((o.e2e - o.ttft) / static_cast<double>(o.output_tokens - 1));
    in_tokens += o.prompt_tokens;
    out_tokens += o.output_tokens;
    cached_tokens += o.cached_tokens;
  }
  fmt::print("============ Serving Benchmark Result ============\n");
  fmt::print("model {} at {}; concurrency {}, request rate {}\n", f.model, f.base_url,
             f.concurrency, std::isinf(f.request_rate) ? "inf" : fmt::format("{}", f.request_rate));
  fmt::print("Successful requests:             {}/{}\n", ok, outcomes.size());
  fmt::print("Benchmark duration (s):          {:.2f}\n", elapsed);
  fmt::print("Total input tokens:              {}\n", in_tokens);
  fmt::print("Total generated tokens:          {}\n", out_tokens);
  fmt::print("Prefix-cached input tokens:      {} ({:.1f}%)\n", cached_tokens,
             in_tokens ? 100.0 * static_cast<double>(cached_tokens) / in_tokens : 0.0);
  fmt::print("Request throughput (req/s):      {:.2f}\n", ok / elapsed);
  fmt::print("Output token throughput (tok/s): {:.2f}\n", out_tokens / elapsed);
  fmt::print("Total token throughput (tok/s):  {:.2f}\n", (in_tokens + out_tokens) / elapsed);
  PrintStats("TTFT", ttft);
  PrintStats("TPOT", tpot);
  PrintStats("ITL", itl);
  PrintStats("E2E", e2e);
  if (f.dashboard_clients > 0) {
    fmt::print("Dashboard streams: {} (opened {} times), {:.2f} events/s each during the run\n",
               f.dashboard_clients, dashboard_opens,
               static_cast<double>(dashboard_events) / f.dashboard_clients / elapsed);
  }
  if (ok != static_cast<int>(outcomes.size())) return Unavailable("some requests failed");
  return Status::Ok();
}

}  // namespace

void RegisterBenchServe(CLI::App* bench) {
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* cmd = bench->add_subcommand("serve", "online serving benchmark (like vllm bench serve)");
  cmd->add_option("--base-url", f->base_url, "server, e.g. http://127.0.0.1:8000")
      ->capture_default_str();
  cmd->add_option("--model", f->model, "model name (default: the server's first)");
  cmd->add_option("--api-key", f->api_key);
  cmd->add_option("--num-prompts", f->num_prompts)->capture_default_str();
  cmd->add_option("--concurrency,--max-concurrency", f->concurrency, "requests in flight")
      ->capture_default_str();
  cmd->add_option("--request-rate", f->request_rate, "Poisson arrivals per second (default inf)");
  cmd->add_option("--input-len", f->input_len, "random prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", f->output_len, "tokens per request")->capture_default_str();
  cmd->add_option("--shared-prefix-len,--random-prefix-len", f->shared_prefix_len,
                  "first prompt tokens shared by every request (part of --input-len)")
      ->capture_default_str();
  cmd->add_option("--dataset", f->dataset, "JSON lines: {\"prompt\": ..., \"max_tokens\": N}");
  cmd->add_option("--random-vocab", f->vocab_hint, "random token ids below this")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed)->capture_default_str();
  cmd->add_option("--dashboard-clients", f->dashboard_clients,
                  "keep N GET /v1/kv/events streams open during the run (N open dashboards)")
      ->capture_default_str();
  cmd->add_flag("--dashboard", f->dashboard,
                "print the URL of the server's live KV dashboard (kvserve serve's /dashboard)");
  cmd->callback([f] { ReportFailure("bench serve", RunBenchServe(*f)); });
}

}  // namespace kvserve::tools
