// The qrun subcommands. Each lives in its own cli/cmd_*.cpp and registers itself on the
// CLI11 app: its options, its help, and the action to run when it is selected.
// run_main parses argv, runs the selected action, prints any Error as one line on stderr
// ("qrun: <message>") and returns the ErrorCode as the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "ggml-like/result.h"

namespace qrun::cli {

using Action = std::function<Result<void>()>;

// Each register_* adds one subcommand to `app`; when the user selects it, its callback
// stores the action to run in `*selected`.
void register_info(CLI::App& app, Action* selected);
void register_synth(CLI::App& app, Action* selected);
void register_tokenize(CLI::App& app, Action* selected);
void register_run(CLI::App& app, Action* selected);
void register_chat(CLI::App& app, Action* selected);
void register_template(CLI::App& app, Action* selected);
void register_bench(CLI::App& app, Action* selected);
void register_quantize(CLI::App& app, Action* selected);
void register_perplexity(CLI::App& app, Action* selected);
void register_grammar(CLI::App& app, Action* selected);
void register_serve(CLI::App& app, Action* selected);

int run_main(int argc, char** argv);

}  // namespace qrun::cli
