// The chat REPL's slash commands, declared once (name, arguments, help) for /help and the
// dispatcher, and the small parsers they share: "/name args", /set's KEY=VALUE words, and
// the sampling settings as JSON for /save and /load.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/sampling_flags.h"
#include "ggml-like/result.h"

namespace qrun::cli {

enum class Command {
  kHelp,
  kExit,
  kClear,
  kSystem,
  kSet,
  kShow,
  kSave,
  kLoad,
  kRegen,
  kUndo,
  kStats,
  kContext,
};

struct CommandSpec {
  Command command;
  const char* name;  // without the slash; the first name is the one /help shows
  const char* args;
  const char* help;
};

std::span<const CommandSpec> command_specs();
// The /help text: one line per command, then how messages are typed.
std::string command_help();

struct CommandLine {
  std::string name;                // as typed, without the slash
  std::string args;                // the rest, trimmed
  std::optional<Command> command;  // unset: unknown name
};

// A message starting with one '/' is a command; "//text" is the message "/text" (see
// unescape_message), and a lone "/" is a message too.
std::optional<CommandLine> parse_command(std::string_view message);
// "//text" -> "/text"; anything else unchanged.
std::string unescape_message(std::string message);

// /set's arguments: KEY=VALUE words separated by spaces; double quotes group spaces into a
// value and are removed (backslash escapes inside them are kept for the flag to read).
// kUsage for a word without '=' or an unclosed quote.
Result<std::vector<std::pair<std::string, std::string>>> parse_assignments(std::string_view args);

// The sampling settings as a JSON object, each value written as /set takes it (lists as
// arrays): {"temp": "0.8", ..., "stop": ["\\n\\n"]}.
nlohmann::ordered_json sampling_to_json(const SamplingFlags& flags);
// Applies such an object to `flags` (lists replace the current ones). kFormat naming
// `origin` and the key for anything set_sampling_flag refuses.
Result<void> sampling_from_json(const nlohmann::ordered_json& j, const std::string& origin,
                                SamplingFlags& flags);

}  // namespace qrun::cli
