// `qrun synth` (not yet implemented: registers nothing).
#include "cli/commands.h"

namespace qrun::cli {

void register_synth(CLI::App& app, Action* selected) {}

}  // namespace qrun::cli
