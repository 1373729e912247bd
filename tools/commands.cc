#include "tools/commands.h"

namespace kvserve::tools {
namespace {
int exit_code = 0;
}  // namespace

int ExitCode() { return exit_code; }
void SetExitCode(int code) { exit_code = code; }

// Subcommands register here; each lives in tools/<command>.cc.
void RegisterCommands(CLI::App& app) {
  RegisterMakeModel(app);
  RegisterInspect(app);
  RegisterPlan(app);
  RegisterBench(app);
  RegisterBenchOffload(app.get_subcommand("bench"));
  RegisterGenerate(app);
  RegisterServe(app);
}

}  // namespace kvserve::tools
