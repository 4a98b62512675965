// Subcommand registration and dispatch (placeholder until the subcommands land).
#include "cli/commands.h"

#include <CLI/CLI.hpp>

namespace qrun::cli {

int run_main(int argc, char** argv) {
  CLI::App app{"qrun: run quantized language models from GGUF files"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

}  // namespace qrun::cli
