// Whole texts named on the command line (prompt files, system prompts, message lists,
// saved conversations): a path, or "-" for standard input where a command allows it.
#pragma once

#include <string>
#include <string_view>

#include "ggml-like/result.h"

namespace qrun::cli {

// The bytes of `path` ("-": all of stdin). Errors are kIo and name what the user typed:
// "<what>: cannot open 'PATH': No such file or directory" (what: "-f", "/load", ...).
Result<std::string> read_text_file(std::string_view what, const std::string& path);

}  // namespace qrun::cli
