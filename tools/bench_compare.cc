// `kvserve bench compare MODEL [--threads N --rounds R --rows LIST --decode-tokens G]`:
// kvserve and llama.cpp side by side on the same GGUF, the anchor of every speed claim
// (docs/PERFORMANCE.md). llama.cpp is node-llama-cpp@3.21.1's prebuilt CPU build, driven by
// tests/compat/node/bench.mjs (installed there on demand with npm). Both sides get the same
// thread count; the rounds interleave them (kvserve first in odd rounds, llama.cpp first in
// even ones) and the table gives every round, the medians and their ratio.
//
// kvserve's side is `kvserve bench throughput` with a user's defaults (one process per run,
// this binary): prefill = prompt tokens / TTFT of a single request; decode = its decode-only
// steps' rate; batched decode = the decode-only rate of 16 requests of 128-token prompts
// admitted at once. llama.cpp's side is set up as llama-bench does it (bench.mjs).
// Also printed: the CPU, the SIMD target kvserve's kernels chose, the memory read bandwidth
// measured here and the decode roof (bandwidth / bytes read per token).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/matmul.h"
#include "model/kv_layout.h"
#include "tools/bench_compare_util.h"
#include "tools/commands.h"

namespace kvserve::tools {
namespace {

namespace fs = std::filesystem;

struct CompareFlags {
  std::string model;
  int threads = 0;  // 0: all cores (both sides' default)
  int rounds = 3;
  std::string rows = "all";
  int decode_tokens = 128;
  std::string llama_cpp_dir = KVSERVE_SOURCE_DIR "/tests/compat/node";
};

// One measured run: `sequences` prompts of `prompt_len` tokens, then `gen` tokens each.
struct RunSpec {
  std::string prefill_row;  // the row its prefill rate fills ("" for none)
  std::string decode_row;   // the row its decode rate fills ("" for none)
  int sequences = 1;
  int prompt_len = 0;
  int gen = 0;
};

std::vector<RunSpec> AllRuns(int decode_tokens) {
  return {{"", "decode-0", 1, 1, decode_tokens},
          {"prefill-512", "", 1, 512, 1},
          {"prefill-4096", "decode-4096", 1, 4096, decode_tokens},
          {"prefill-16384", "decode-16384", 1, 16384, decode_tokens},
          {"", "batch-16", 16, 128, decode_tokens}};
}

const std::vector<std::string> kRowOrder = {"prefill-512",  "prefill-4096", "prefill-16384",
                                            "decode-0",     "decode-4096",  "decode-16384",
                                            "batch-16"};

struct RunRates {
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  // llama.cpp only: its own counters (time inside llama_decode, as llama-bench counts it).
  double own_prefill_tokens_per_s = 0;
  double own_decode_tokens_per_s = 0;
};

// kvserve's side: this binary's `bench throughput`, parsed.
Result<RunRates> RunKvserve(const CompareFlags& f, const RunSpec& run, int round) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  // A single request's first token comes from its prefill step: gen + 1 outputs give gen
  // decode-only steps.
  const int outputs = run.sequences == 1 && run.gen > 1 ? run.gen + 1 : run.gen;
  const std::string command = fmt::format(
      "'{}' bench throughput '{}' --num-prompts {} --input-len {} --output-len {} --threads {} "
      "--seed {} 2>/dev/null", self, f.model, run.sequences, run.prompt_len, outputs, f.threads,
      round);
  KV_ASSIGN_OR_RETURN(std::string out, RunCommand(command));
  RunRates rates;
  if (std::optional<double> ttft_ms = NumberAfter(out, "(first request ")) {
    rates.prefill_tokens_per_s = run.prompt_len / (*ttft_ms / 1e3);
  }
  if (std::optional<double> decode = NumberAfter(out, " tokens, ", " tokens/s")) {
    rates.decode_tokens_per_s = *decode;
  }
  if (rates.prefill_tokens_per_s == 0) return Internal("no TTFT line in:\n" + out);
  return rates;
}

// llama.cpp's side: bench.mjs with the same run.
Result<RunRates> RunLlamaCpp(const CompareFlags& f, const RunSpec& run, int round, int vocab,
                             const std::string& work_dir) {
  const nlohmann::json job = {{"model", fs::absolute(f.model).string()}, {"threads", f.threads},
                              {"sequences", run.sequences}, {"prompt_len", run.prompt_len},
                              {"gen", run.gen}, {"seed", round}, {"vocab", vocab}};
  const std::string job_path = work_dir + "/job.json";
  std::ofstream(job_path) << job.dump();
  KV_ASSIGN_OR_RETURN(std::string out, RunCommand(fmt::format("node '{}/bench.mjs' '{}'",
                                                              f.llama_cpp_dir, job_path)));
  try {
    const nlohmann::json j = nlohmann::json::parse(out);
    return RunRates{j.at("prefill_tokens_per_s").get<double>(),
                    j.at("decode_tokens_per_s").get<double>(),
                    j.at("own_prefill_tokens_per_s").get<double>(),
                    j.at("own_decode_tokens_per_s").get<double>()};
  } catch (const nlohmann::json::exception& e) {
    return Internal(std::string("bench.mjs printed no result: ") + e.what() + "\n" + out);
  }
}

// row -> per-round rates, for each side.
using Samples = std::map<std::string, std::vector<double>>;

void Record(const RunSpec& run, double prefill, double decode, const std::set<std::string>& rows,
            Samples& samples) {
  if (rows.contains(run.prefill_row)) samples[run.prefill_row].push_back(prefill);
  if (rows.contains(run.decode_row)) samples[run.decode_row].push_back(decode);
}

Result<std::set<std::string>> ParseRows(const std::string& list) {
  if (list == "all") return std::set<std::string>(kRowOrder.begin(), kRowOrder.end());
  std::set<std::string> rows;
  std::stringstream ss(list);
  for (std::string row; std::getline(ss, row, ',');) {
    if (std::find(kRowOrder.begin(), kRowOrder.end(), row) == kRowOrder.end()) {
      return InvalidArgument(fmt::format("unknown row '{}' (rows: {})", row,
                                         fmt::join(kRowOrder, ", ")));
    }
    rows.insert(row);
  }
  return rows;
}

// A decode row's mean context: the prompt plus half the generated tokens.
double MeanContext(const RunSpec& run) { return run.prompt_len + run.gen / 2.0; }

// The decode roof of a row: bandwidth over the bytes its decode steps read (StepBytes: weights,
// for batch-16 the experts its 16 tokens touch, and the KV at the row's mean context), in
// tokens per second.
std::optional<double> Roof(const std::string& row, const MachineFacts& m, int decode_tokens) {
  for (const RunSpec& run : AllRuns(decode_tokens)) {
    if (run.decode_row != row) continue;
    return run.sequences * m.bandwidth_bytes_per_s /
           StepBytes(m, run.sequences, MeanContext(run));
  }
  return std::nullopt;
}

std::string RoofShare(const std::string& row, double median, const MachineFacts& m,
                      int decode_tokens) {
  const std::optional<double> roof = Roof(row, m, decode_tokens);
  if (!roof) return "-";
  return fmt::format("{:.0f}% of {:.0f}", 100 * median / *roof, *roof);
}

// The ratio compares wall-clock rates (what a user of either gets); "llama.cpp own" is the
// same runs by llama.cpp's counters (no JavaScript round trip, no sampling), for reference.
void PrintTable(const std::set<std::string>& rows, const Samples& kv, const Samples& llama,
                const Samples& llama_own, const MachineFacts& m, int decode_tokens) {
  fmt::print("\n| row | kvserve tok/s (rounds) | llama.cpp tok/s (rounds) | kvserve median | "
             "llama.cpp median | ratio | llama.cpp own median | ratio to own | "
             "kvserve vs decode roof |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& row : kRowOrder) {
    if (!rows.contains(row) || !kv.contains(row) || !llama.contains(row)) continue;
    const double a = Median(kv.at(row)), b = Median(llama.at(row));
    const double own = Median(llama_own.at(row));
    fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.2f}x | {:.1f} | {:.2f}x | {} |\n", row,
               JoinRates(kv.at(row)), JoinRates(llama.at(row)), a, b, a / b, own, a / own,
               RoofShare(row, a, m, decode_tokens));
  }
  // The 16 sequences' aggregate over kvserve's own single stream, beside what the bytes allow:
  // the two roofs' ratio is the aggregate at which both run at the same share of the bandwidth.
  if (kv.contains("batch-16") && kv.contains("decode-0")) {
    const double single_roof = *Roof("decode-0", m, decode_tokens);
    const double batch_roof = *Roof("batch-16", m, decode_tokens);
    fmt::print("kvserve batch-16 over its decode-0: {:.2f}x (at equal shares of the bandwidth: "
               "{:.2f}x)\n", Median(kv.at("batch-16")) / Median(kv.at("decode-0")),
               batch_roof / single_roof);
  }
}

Status RunCompare(CompareFlags f) {
  if (f.threads <= 0) f.threads = DefaultThreadCount();
  if (f.rounds < 1 || f.decode_tokens < 2) {
    return InvalidArgument("--rounds must be >= 1 and --decode-tokens >= 2");
  }
  KV_ASSIGN_OR_RETURN(std::set<std::string> rows, ParseRows(f.rows));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(f.model));
  KV_RETURN_IF_ERROR(EnsureLlamaCpp(f.llama_cpp_dir));
  KV_ASSIGN_OR_RETURN(MachineFacts m, GatherFacts(*file, f.threads, f.llama_cpp_dir));
  fmt::print("kvserve bench compare {} --threads {} --rounds {} --rows {} --decode-tokens {}\n",
             f.model, f.threads, f.rounds, f.rows, f.decode_tokens);
  PrintFacts(m, f.threads);
  std::fflush(stdout);  // before the runs' progress lines on stderr
  const std::string work_dir = fs::temp_directory_path() / fmt::format("kvserve-compare-{}", ::getpid());
  fs::create_directories(work_dir);
  Samples kv, llama, llama_own;
  for (int round = 1; round <= f.rounds; ++round) {
    for (const RunSpec& run : AllRuns(f.decode_tokens)) {
      if (!rows.contains(run.prefill_row) && !rows.contains(run.decode_row)) continue;
      for (int side = 0; side < 2; ++side) {
        const bool kvserve_turn = (side == 0) == (round % 2 == 1);
        Result<RunRates> r = kvserve_turn ? RunKvserve(f, run, round)
                                          : RunLlamaCpp(f, run, round, m.vocab_size, work_dir);
        if (!r.ok()) {
          fs::remove_all(work_dir);
          return r.status();
        }
        Record(run, r->prefill_tokens_per_s, r->decode_tokens_per_s, rows,
               kvserve_turn ? kv : llama);
        if (!kvserve_turn) {
          Record(run, r->own_prefill_tokens_per_s, r->own_decode_tokens_per_s, rows, llama_own);
        }
        // A batched run's prefill figure means different things on the two sides (kvserve:
        // one request's prompt / its TTFT; llama.cpp: every prompt / the batch's time) and
        // feeds no row, so only the single-request runs print it.
        const std::string prefill =
            run.prefill_row.empty() ? ""
                                    : fmt::format(" prefill {:.1f} tok/s,", r->prefill_tokens_per_s);
        fmt::print(stderr, "round {}: {} x {} + {}: {}{} decode {:.1f} tok/s\n", round,
                   run.sequences, run.prompt_len, run.gen, kvserve_turn ? "kvserve" : "llama.cpp",
                   prefill, r->decode_tokens_per_s);
      }
    }
  }
  fs::remove_all(work_dir);
  PrintTable(rows, kv, llama, llama_own, m, f.decode_tokens);
  fmt::print("load average at the end: {}\n", LoadAverage());
  return Status::Ok();
}

}  // namespace

void RegisterBenchCompare(CLI::App* bench) {
  auto f = std::make_shared<CompareFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "compare", "kvserve and llama.cpp (node-llama-cpp) side by side on the same GGUF");
  cmd->add_option("model", f->model, "GGUF model")->required();
  cmd->add_option("--threads", f->threads, "threads for both; 0 = all cores")->capture_default_str();
  cmd->add_option("--rounds", f->rounds, "interleaved rounds")->capture_default_str();
  cmd->add_option("--rows", f->rows,
                  "comma list of prefill-512, prefill-4096, prefill-16384, decode-0, "
                  "decode-4096, decode-16384, batch-16; or all")->capture_default_str();
  cmd->add_option("--decode-tokens", f->decode_tokens, "tokens generated per decode run")
      ->capture_default_str();
  cmd->add_option("--llama-cpp-dir", f->llama_cpp_dir,
                  "node-llama-cpp's folder (bench.mjs, node_modules)")->capture_default_str();
  cmd->callback([f] { ReportFailure("bench compare", RunCompare(*f)); });
}

}  // namespace kvserve::tools
