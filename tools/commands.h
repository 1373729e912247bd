// Each subcommand registers itself on the CLI11 app and runs from its callback.
#pragma once

#include <CLI/CLI.hpp>

namespace kvserve::tools {

// Every Register* function lives in its own tools/<command>.cc.
void RegisterCommands(CLI::App& app);

// Exit code set by the subcommand that ran (0 unless it failed).
int ExitCode();
void SetExitCode(int code);

}  // namespace kvserve::tools
