// `qrun info` (not yet implemented: registers nothing).
#include "cli/commands.h"

namespace qrun::cli {

void register_info(CLI::App& app, Action* selected) {}

}  // namespace qrun::cli
