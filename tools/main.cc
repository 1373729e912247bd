// kvserve: one binary, one subcommand per job (DESIGN.md section 1, tools/).
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM inference server built around the KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvserve 0.1.0");
  kvserve::tools::RegisterCommands(app);
  CLI11_PARSE(app, argc, argv);
  return kvserve::tools::ExitCode();
}
