// `qrun run` (not yet implemented: registers nothing).
#include "cli/commands.h"

namespace qrun::cli {

void register_run(CLI::App& app, Action* selected) {}

}  // namespace qrun::cli
