// Each subcommand registers itself on the CLI11 app and runs from its callback.
#pragma once

#include <CLI/CLI.hpp>

#include <string_view>

#include "core/status.h"

namespace kvserve::tools {

// Every Register* function lives in its own tools/<command>.cc.
void RegisterCommands(CLI::App& app);

// The subcommands (tools/<command>.cc).
void RegisterMakeModel(CLI::App& app);  // make_model.cc
void RegisterInspect(CLI::App& app);    // inspect.cc
void RegisterPlan(CLI::App& app);       // plan.cc
void RegisterBench(CLI::App& app);      // bench.cc
void RegisterGenerate(CLI::App& app);   // generate.cc
void RegisterServe(CLI::App& app);      // serve.cc
void RegisterSimulate(CLI::App& app);   // simulate.cc
void RegisterBenchServe(CLI::App* bench);  // bench_serve.cc: `bench serve`
void RegisterBenchOffload(CLI::App* bench);  // bench_offload.cc: `bench offload`
void RegisterBenchCompare(CLI::App* bench);  // bench_compare.cc: `bench compare`

// Exit code set by the subcommand that ran (0 unless it failed).
int ExitCode();
void SetExitCode(int code);
// For a failed `status`: prints "error: <command>: <status>" to stderr and sets exit code 1.
void ReportFailure(std::string_view command, const Status& status);

}  // namespace kvserve::tools
