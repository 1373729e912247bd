// `kvserve simulate`: the real scheduler and KV cache manager in virtual time, with a cost model
// in place of the forward pass (src/sim/, docs/simulator.md).
//
//   kvserve simulate --model PRESET|FILE.gguf (--gpu PRESET | --profile FILE) [--tp N]
//       [engine knobs, as serve] [workload, as bench throughput / bench serve]
//       [--json | --format text|json|svg] [-o FILE] [--sweep KNOB=V1,V2,...]
// Prints what `kvserve bench throughput` prints (throughput, TTFT / TPOT / ITL / E2E
// percentiles, preemptions, prefix-cache hit rate) plus per-tier numbers, KV usage and queue
// length; --sweep runs every value on the same workload and prints one table.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/units.h"
#include "sim/calibrate.h"
#include "sim/report.h"
#include "sim/setup.h"
#include "sim/svg.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace kvserve::tools {
namespace {

struct SimulateFlags {
  sim::SimKnobs knobs;
  EngineFlags engine;  // the serve knobs (tools/engine_flags.h)
  std::string cpu_offload_weights;
  std::string input_len_dist;
  std::string output_len_dist;
  std::string arrivals = "even";
  bool json = false;
  std::string format = "text";
  std::string output;
  std::string sweep;
  std::string calibrate;  // MODEL.gguf to measure this machine with
};

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t next = text.find(sep, pos);
    if (next == std::string::npos) next = text.size();
    if (next > pos) out.push_back(text.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

// The flags' text values into knobs (each bad value: an error naming its flag).
Result<sim::SimKnobs> ToKnobs(const SimulateFlags& f) {
  sim::SimKnobs k = f.knobs;
  KV_ASSIGN_OR_RETURN(k.engine, ResolveEngineFlags(f.engine));
  k.cpu_offload_weights = Split(f.cpu_offload_weights, ',');
  if (!f.input_len_dist.empty()) {
    KV_ASSIGN_OR_RETURN(k.workload.input_dist,
                        sim::ParseLengthDist(f.input_len_dist, static_cast<double>(k.workload.input_len)));
  }
  if (!f.output_len_dist.empty()) {
    KV_ASSIGN_OR_RETURN(k.workload.output_dist,
                        sim::ParseLengthDist(f.output_len_dist, static_cast<double>(k.workload.output_len)));
  }
  KV_ASSIGN_OR_RETURN(k.workload.arrivals, sim::ParseArrivals(f.arrivals));
  return k;
}

Status WriteOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  std::ofstream out(path);
  out << text;
  if (!out) return IoError(fmt::format("cannot write {}", path));
  return Status::Ok();
}

struct Outcome {
  std::string label;
  sim::RunLabel run_label;
  sim::SimResult result;
};

Result<Outcome> RunOne(const sim::SimKnobs& knobs, std::string label) {
  KV_ASSIGN_OR_RETURN(sim::PreparedSim p, sim::Prepare(knobs));
  KV_ASSIGN_OR_RETURN(sim::SimResult result, sim::Simulate(p.setup, p.cost, p.workload));
  return Outcome{std::move(label), std::move(p.label), std::move(result)};
}

std::string Render(const std::string& format, const std::string& sweep_knob,
                   const std::vector<Outcome>& outcomes) {
  if (format == "svg") {
    std::vector<sim::PlotSeries> series;
    for (const Outcome& o : outcomes) series.push_back({o.label, &o.result});
    const sim::RunLabel& l = outcomes.front().run_label;
    return sim::FormatSvg(fmt::format("kvserve simulate: {} on {}", l.model, l.hardware), series);
  }
  if (format == "json") {
    std::string out = outcomes.size() > 1 ? "[\n" : "";
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& o = outcomes[i];
      out += sim::FormatJson(o.run_label, o.result, sim::Summarize(o.result));
      if (outcomes.size() > 1) out += i + 1 < outcomes.size() ? ",\n" : "]\n";
    }
    return out;
  }
  if (outcomes.size() == 1) {
    const Outcome& o = outcomes.front();
    return sim::FormatText(o.run_label, o.result, sim::Summarize(o.result));
  }
  std::vector<std::pair<std::string, sim::Summary>> rows;
  for (const Outcome& o : outcomes) rows.emplace_back(o.label, sim::Summarize(o.result));
  const sim::RunLabel& l = outcomes.front().run_label;
  return fmt::format("Simulated: {} on {}; {}\n\n", l.model, l.hardware,
                     fmt::join(l.knobs, ", ")) +
         sim::FormatSweepTable(sweep_knob, rows);
}

// --calibrate: measure, fit, write the profile to -o and a table of the fit to stdout.
Status RunCalibrate(const SimulateFlags& f) {
  if (f.output.empty() || f.output == "-") {
    return InvalidArgument("--calibrate needs -o FILE for the profile");
  }
  sim::CalibrationOptions o;
  o.model_path = f.calibrate;
  KV_ASSIGN_OR_RETURN(o.engine, ResolveEngineFlags(f.engine));
  KV_ASSIGN_OR_RETURN(sim::Calibration c, sim::Calibrate(o));
  KV_RETURN_IF_ERROR(WriteOutput(f.output, sim::ProfileToJson(c.profile, c.notes_json)));
  fmt::print("Calibrated {} on {} ({} threads)\n| shape | measured ms | predicted ms |\n|---|---|---|\n",
             f.calibrate, c.profile.description, o.engine.NumThreads());
  for (const sim::CalibrationPoint& p : c.points) {
    fmt::print("| {} | {:.2f} | {:.2f} |\n", p.label, p.measured * 1e3, p.predicted * 1e3);
  }
  fmt::print("RMS log error {:.3f}; profile written to {}\n", c.rms_log_error, f.output);
  fmt::print("Engine overhead (Engine::Step less its forward pass and sampler work): "
             "{:.2f} us per step, {:.3f} us per sequence, {:.4f} us per token\n"
             "| engine step | step ms | forward + sampler ms | fitted ms | extra ms | "
             "fitted extra ms |\n|---|---|---|---|---|---|\n",
             c.engine.step * 1e6, c.engine.sequence * 1e6, c.engine.token * 1e6);
  for (const sim::EngineOverheadPoint& p : c.engine.points) {
    fmt::print("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", p.label, p.step * 1e3,
               (p.forward + p.sampler) * 1e3, p.fitted * 1e3, p.extra * 1e3, p.predicted * 1e3);
  }
  return Status::Ok();
}

Status RunSimulate(const SimulateFlags& f) {
  if (!f.calibrate.empty()) return RunCalibrate(f);
  const std::string format = f.json ? "json" : f.format;
  if (format != "text" && format != "json" && format != "svg") {
    return InvalidArgument(fmt::format("--format must be text, json or svg, got '{}'", format));
  }
  KV_ASSIGN_OR_RETURN(sim::SimKnobs base, ToKnobs(f));
  std::vector<Outcome> outcomes;
  std::string knob;
  if (f.sweep.empty()) {
    KV_ASSIGN_OR_RETURN(Outcome o, RunOne(base, "simulated"));
    outcomes.push_back(std::move(o));
  } else {
    const size_t eq = f.sweep.find('=');
    knob = f.sweep.substr(0, eq);
    const std::vector<std::string> values =
        eq == std::string::npos ? std::vector<std::string>() : Split(f.sweep.substr(eq + 1), ',');
    if (values.empty()) return InvalidArgument("--sweep wants KNOB=V1,V2,...");
    for (const std::string& v : values) KV_RETURN_IF_ERROR(sim::SetKnob(base, knob, v));  // check all
    for (const std::string& v : values) {
      sim::SimKnobs k = base;
      KV_RETURN_IF_ERROR(sim::SetKnob(k, knob, v));
      Result<Outcome> o = RunOne(k, fmt::format("{} {}", knob, v));
      if (!o.ok()) return o.status().WithContext(fmt::format("--sweep {}={}", knob, v));
      outcomes.push_back(*std::move(o));
    }
  }
  return WriteOutput(f.output, Render(format, knob, outcomes));
}

void AddEngineKnobs(CLI::App* cmd, SimulateFlags& f) {
  AddEngineFlags(cmd, f.engine, EngineFlagSet::kServe);  // the serve knobs (--threads unused)
  cmd->add_option("--tp,--tensor-parallel-size", f.knobs.tp, "tensor-parallel ranks")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", f.knobs.gpu_memory_utilization)
      ->capture_default_str();
  cmd->add_option("--cpu-offload-weights", f.cpu_offload_weights,
                  "weight parts kept in CPU memory (e.g. engram), with --gpu");
}

void AddWorkload(CLI::App* cmd, SimulateFlags& f) {
  sim::WorkloadSpec& w = f.knobs.workload;
  cmd->add_option("--num-prompts", w.num_prompts)->capture_default_str();
  cmd->add_option("--input-len", w.input_len)->capture_default_str();
  cmd->add_option("--output-len", w.output_len)->capture_default_str();
  cmd->add_option("--input-len-dist", f.input_len_dist,
                  "fixed | uniform:LO,HI | lognormal:MEAN,SIGMA | exponential:MEAN");
  cmd->add_option("--output-len-dist", f.output_len_dist, "as --input-len-dist");
  cmd->add_option("--request-rate", w.request_rate, "requests/s (default: all at once)");
  cmd->add_option("--arrivals", f.arrivals, "even (bench throughput) | poisson (bench serve)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-len", w.shared_prefix_len, "prompt tokens shared by a group");
  cmd->add_option("--num-prefix-groups", w.num_prefix_groups, "request i is in group i % G")
      ->capture_default_str();
  cmd->add_option("--trace", w.trace_path, "JSONL: arrival_time, input_len | prompt_token_ids, "
                  "output_len, prefix_group, prefix_len");
  cmd->add_option("--seed", w.seed)->capture_default_str();
}

}  // namespace

void RegisterSimulate(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "simulate", "the real scheduler and KV cache in virtual time, for hardware you don't have");
  auto f = std::make_shared<SimulateFlags>();
  cmd->add_option("--model", f->knobs.model, "model preset or FILE.gguf");
  cmd->add_option("--gpu", f->knobs.gpu, "device preset (memory and compute numbers)");
  cmd->add_option("--profile", f->knobs.profile, "calibrated hardware profile (JSON)");
  AddEngineKnobs(cmd, *f);
  AddWorkload(cmd, *f);
  cmd->add_flag("--json", f->json, "same as --format json");
  cmd->add_option("--format", f->format, "text | json | svg")->capture_default_str();
  cmd->add_option("-o,--output", f->output, "write the report here (default: stdout)");
  cmd->add_option("--sweep", f->sweep, "KNOB=V1,V2,...: one run per value, one table");
  cmd->add_option("--calibrate", f->calibrate,
                  "MODEL.gguf: time this machine's kernels, write the profile to -o");
  cmd->callback([f] { ReportFailure("simulate", RunSimulate(*f)); });
}

}  // namespace kvserve::tools
