// Slash command table and parsers for the chat REPL (see repl_commands.h).
#include "cli/repl_commands.h"

#include <array>

namespace qrun::cli {
namespace {

constexpr std::array kCommands = {
    CommandSpec{Command::kHelp, "help", "", "this help"},
    CommandSpec{Command::kExit, "exit", "", "quit (also /quit, Ctrl-D)"},
    CommandSpec{Command::kExit, "quit", "", ""},
    CommandSpec{Command::kClear, "clear", "", "start a new conversation (keeps the system prompt)"},
    CommandSpec{Command::kSystem, "system", "[TEXT]",
                "set the system prompt (no TEXT: show it; \"\" removes it)"},
    CommandSpec{Command::kSet, "set", "KEY=VALUE ...",
                "change sampling settings (any sampling flag without dashes, e.g. temp=0.2 "
                "top-k=20 stop=\"\\n\\n\"), n-predict or context-policy"},
    CommandSpec{Command::kShow, "show", "", "the model, template and settings"},
    CommandSpec{Command::kSave, "save", "FILE [--kv]",
                "save the conversation and sampling settings as JSON (--kv: and the KV cache "
                "as FILE.kv)"},
    CommandSpec{Command::kLoad, "load", "FILE",
                "load a saved conversation and settings, and prefill it (from FILE.kv when "
                "there)"},
    CommandSpec{Command::kRegen, "regen", "", "drop the last reply and generate it again"},
    CommandSpec{Command::kUndo, "undo", "", "drop the last exchange (your message and the reply)"},
    CommandSpec{Command::kStats, "stats", "",
                "timings of the last reply: prompt tokens reused and fed, time to first token, "
                "tok/s"},
    CommandSpec{Command::kContext, "context", "", "how full the context is (used/total tokens)"},
};

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

std::span<const CommandSpec> command_specs() {
  return kCommands;
}

std::string command_help() {
  std::string out = "Commands:\n";
  for (const CommandSpec& c : kCommands) {
    if (c.help[0] == '\0') continue;  // an alias
    std::string head = std::string("  /") + c.name + (c.args[0] ? " " : "") + c.args;
    if (head.size() < 22) head.resize(22, ' ');
    out += head + " " + c.help + "\n";
  }
  out +=
      "Typing: Enter sends; a line ending in \\ continues on the next line; a line \"\"\" opens\n"
      "a block that another \"\"\" line closes. //text sends \"/text\". Up/Down and Ctrl-R search\n"
      "the history. Ctrl-C stops a reply (the part already written is kept) or clears the line.";
  return out;
}

std::optional<CommandLine> parse_command(std::string_view message) {
  if (message.size() < 2 || message[0] != '/' || message[1] == '/') return std::nullopt;
  const size_t end = message.find_first_of(" \t\n");
  CommandLine c;
  c.name = std::string(message.substr(1, end == std::string_view::npos ? end : end - 1));
  c.args = end == std::string_view::npos ? "" : trim(message.substr(end));
  for (const CommandSpec& spec : kCommands) {
    if (c.name == spec.name) c.command = spec.command;
  }
  return c;
}

std::string unescape_message(std::string message) {
  if (message.size() >= 2 && message[0] == '/' && message[1] == '/') message.erase(0, 1);
  return message;
}

Result<std::vector<std::pair<std::string, std::string>>> parse_assignments(std::string_view args) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i < args.size()) {
    if (args[i] == ' ' || args[i] == '\t' || args[i] == '\n') {
      ++i;
      continue;
    }
    std::string word;
    bool quoted = false;
    for (; i < args.size(); ++i) {
      const char c = args[i];
      if (!quoted && (c == ' ' || c == '\t' || c == '\n')) break;
      if (c == '"') {
        quoted = !quoted;
        continue;
      }
      if (quoted && c == '\\' && i + 1 < args.size()) {
        word += c;
        word += args[++i];
        continue;
      }
      word += c;
    }
    if (quoted) return make_error(ErrorCode::kUsage, "/set: unclosed quote in '" + word + "'");
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) {
      return make_error(ErrorCode::kUsage,
                        "/set: expected KEY=VALUE, got '" + word + "' (see /show for the keys)");
    }
    out.emplace_back(word.substr(0, eq), word.substr(eq + 1));
  }
  return out;
}

nlohmann::ordered_json sampling_to_json(const SamplingFlags& flags) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  Result<std::vector<std::pair<std::string, std::string>>> kv =
      parse_assignments(describe_sampling_flags(flags));
  QRUN_CHECK(kv.ok(), "describe_sampling_flags gave unparsable text: %s",
             kv.error().message.c_str());
  for (auto& [key, value] : *kv) {
    if (key == "stop" || key == "logit-bias") {
      if (!j.contains(key)) j[key] = nlohmann::ordered_json::array();
      j[key].push_back(value);
    } else {
      j[key] = value;
    }
  }
  for (const char* list : {"stop", "logit-bias"}) {
    if (!j.contains(list)) j[list] = nlohmann::ordered_json::array();
  }
  return j;
}

Result<void> sampling_from_json(const nlohmann::ordered_json& j, const std::string& origin,
                                SamplingFlags& flags) {
  if (!j.is_object())
    return make_error(ErrorCode::kFormat, origin + ": \"sampling\" is not an object");
  SamplingFlags updated = flags;
  for (const auto& [key, value] : j.items()) {
    auto set = [&](const nlohmann::ordered_json& v) -> Result<void> {
      if (!v.is_string()) {
        return make_error(ErrorCode::kFormat,
                          origin + ": sampling setting '" + key + "' is not a string");
      }
      Result<void> r = set_sampling_flag(updated, key, v.get<std::string>());
      if (!r.ok()) return make_error(ErrorCode::kFormat, origin + ": " + r.error().message);
      return {};
    };
    if (value.is_array()) {
      QRUN_TRY(set(""));  // clears the list
      for (const nlohmann::ordered_json& v : value) QRUN_TRY(set(v));
    } else {
      QRUN_TRY(set(value));
    }
  }
  flags = std::move(updated);
  return {};
}

}  // namespace qrun::cli
