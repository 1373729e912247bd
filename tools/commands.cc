#include "tools/commands.h"

#include <fmt/format.h>

namespace kvserve::tools {
namespace {
int exit_code = 0;
}  // namespace

int ExitCode() { return exit_code; }
void SetExitCode(int code) { exit_code = code; }

void ReportFailure(std::string_view command, const Status& status) {
  if (status.ok()) return;
  fmt::print(stderr, "error: {}: {}\n", command, status.ToString());
  SetExitCode(1);
}

// Subcommands register here; each lives in tools/<command>.cc.
void RegisterCommands(CLI::App& app) {
  RegisterMakeModel(app);
  RegisterInspect(app);
  RegisterPlan(app);
  RegisterBench(app);
  RegisterBenchOffload(app.get_subcommand("bench"));
  RegisterBenchCompare(app.get_subcommand("bench"));
  RegisterGenerate(app);
  RegisterServe(app);
  RegisterSimulate(app);
}

}  // namespace kvserve::tools
