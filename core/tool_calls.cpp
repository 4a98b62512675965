// Tool calling: format detection, the messages and grammar for each format, and the parse
// of replies. See tool_calls.h for the formats.
#include "core/tool_calls.h"

#include <algorithm>
#include <random>

#include "core/grammar/json_schema.h"

namespace qrun {
namespace {

using Json = nlohmann::ordered_json;

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The key that holds a call's arguments in the format's JSON.
const char* arguments_key(ToolCallFormat format) {
  return format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
}

// The end of the JSON object or array that starts at text[begin] ('{' or '['): the index
// after its closing bracket, or npos when it does not close. Strings and escapes are
// skipped; whether the inside is valid JSON is for the parser to say.
size_t json_end(std::string_view text, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<Json> parse_json(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments as the reply gave them: an object, or a string holding one.
std::optional<std::string> arguments_text(const Json& args) {
  if (args.is_object()) return args.dump();
  if (args.is_string()) {
    std::optional<Json> inner = parse_json(args.get<std::string>());
    if (inner && inner->is_object()) return inner->dump();
  }
  return std::nullopt;
}

// {"name": ..., "arguments" (or "parameters"): {...}} as a call; nullopt when it is not one.
std::optional<ToolCall> call_from_json(ToolCallFormat format, const Json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  auto args = j.find(arguments_key(format));
  if (args == j.end()) args = j.find("arguments");
  ToolCall call;
  call.name = name->get<std::string>();
  if (args == j.end()) {
    call.arguments = "{}";
  } else if (std::optional<std::string> text = arguments_text(*args)) {
    call.arguments = std::move(*text);
  } else {
    return std::nullopt;
  }
  call.id = make_tool_call_id(format);
  return call;
}

// Hermes: <tool_call>JSON</tool_call> blocks (the last one may lack its closing tag when
// generation stopped at the end-of-turn token); text around them is content.
std::optional<ParsedReply> parse_hermes(std::string_view reply) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  size_t at = reply.find(kOpen);
  if (at == std::string_view::npos) return std::nullopt;
  ParsedReply out;
  out.content = std::string(reply.substr(0, at));
  while (at != std::string_view::npos) {
    const size_t body = at + kOpen.size();
    const size_t close = reply.find(kClose, body);
    const std::string_view json =
        reply.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    std::optional<Json> j = parse_json(trim(json));
    if (!j) return std::nullopt;
    std::optional<ToolCall> call = call_from_json(ToolCallFormat::kHermes, *j);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    if (close == std::string_view::npos) break;
    const size_t next = reply.find(kOpen, close + kClose.size());
    const std::string_view between = reply.substr(
        close + kClose.size(),
        next == std::string_view::npos ? std::string_view::npos : next - close - kClose.size());
    if (!trim(between).empty()) out.content += std::string(between);
    at = next;
  }
  return out;
}

// Llama 3: the whole reply is one call.
std::optional<ParsedReply> parse_llama3(std::string_view reply, const ToolSet& tools) {
  const std::string_view body = trim(reply);
  if (body.empty() || body.front() != '{') return std::nullopt;
  std::optional<Json> j = parse_json(body);
  if (!j) return std::nullopt;
  std::optional<ToolCall> call = call_from_json(ToolCallFormat::kLlama3, *j);
  // A JSON reply naming no offered function is an answer, not a call.
  if (!call) return std::nullopt;
  bool known = false;
  for (const Json& t : tools.tools) known = known || t["function"]["name"] == call->name;
  if (!known) return std::nullopt;
  ParsedReply out;
  out.calls.push_back(std::move(*call));
  return out;
}

// A JSON array of calls starting at rest[0].
bool parse_call_array(std::string_view rest, ParsedReply* out) {
  const size_t end = json_end(rest, 0);
  if (end == std::string_view::npos) return false;
  std::optional<Json> j = parse_json(rest.substr(0, end));
  if (!j || !j->is_array() || j->empty()) return false;
  for (const Json& item : *j) {
    std::optional<ToolCall> call = call_from_json(ToolCallFormat::kMistral, item);
    if (!call) return false;
    out->calls.push_back(std::move(*call));
  }
  return trim(rest.substr(end)).empty();
}

// Mistral: [TOOL_CALLS] and a JSON array, or [TOOL_CALLS]name[ARGS]{...} per call. A reply
// that is just the array (what the required-call grammar writes) is calls too.
std::optional<ParsedReply> parse_mistral(std::string_view reply) {
  constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]";
  ParsedReply out;
  const size_t at = reply.find(kCalls);
  if (at == std::string_view::npos) {
    const std::string_view body = trim(reply);
    if (body.empty() || body.front() != '[' || !parse_call_array(body, &out)) return std::nullopt;
    return out;
  }
  out.content = std::string(reply.substr(0, at));
  std::string_view rest = trim(reply.substr(at + kCalls.size()));
  if (!rest.empty() && rest.front() == '[') {
    if (!parse_call_array(rest, &out)) return std::nullopt;
    return out;
  }
  while (!rest.empty()) {
    const size_t args = rest.find(kArgs);
    if (args == std::string_view::npos) return std::nullopt;
    Json call = {{"name", std::string(trim(rest.substr(0, args)))}};
    rest = trim(rest.substr(args + kArgs.size()));
    const size_t end =
        rest.empty() || rest.front() != '{' ? std::string_view::npos : json_end(rest, 0);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<Json> j = parse_json(rest.substr(0, end));
    if (!j) return std::nullopt;
    call["arguments"] = std::move(*j);
    std::optional<ToolCall> parsed = call_from_json(ToolCallFormat::kMistral, call);
    if (!parsed) return std::nullopt;
    out.calls.push_back(std::move(*parsed));
    rest = trim(rest.substr(end));
    if (rest.substr(0, kCalls.size()) == kCalls) rest = trim(rest.substr(kCalls.size()));
  }
  return out;
}

// Generic: {"tool_call": {...}}, {"tool_calls": [...]} or {"response": "..."}.
std::optional<ParsedReply> parse_generic(std::string_view reply) {
  std::optional<Json> j = parse_json(trim(reply));
  if (!j || !j->is_object()) return std::nullopt;
  ParsedReply out;
  if (const auto r = j->find("response"); r != j->end() && r->is_string()) {
    out.content = r->get<std::string>();
    return out;
  }
  std::vector<const Json*> items;
  if (const auto one = j->find("tool_call"); one != j->end()) items.push_back(&*one);
  if (const auto many = j->find("tool_calls"); many != j->end() && many->is_array())
    for (const Json& item : *many) items.push_back(&item);
  if (items.empty()) return std::nullopt;
  for (const Json* item : items) {
    std::optional<ToolCall> call = call_from_json(ToolCallFormat::kGeneric, *item);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
  }
  return out;
}

// Rewrites every local "$ref" under `schema` ("#..." pointers, which are relative to the
// tool's parameters) to point to the same place once the parameters sit at `base`.
void rebase_refs(Json& schema, const std::string& base) {
  if (schema.is_object()) {
    for (auto& [key, value] : schema.items()) {
      if (key == "$ref" && value.is_string()) {
        const std::string ref = value.get<std::string>();
        if (!ref.empty() && ref.front() == '#') value = "#" + base + ref.substr(1);
      } else {
        rebase_refs(value, base);
      }
    }
  } else if (schema.is_array()) {
    for (Json& item : schema) rebase_refs(item, base);
  }
}

// The schema of one call of each offered tool (only the named one under tool_choice
// function), in $defs, and a schema for "one of them".
struct CallSchemas {
  Json defs = Json::object();
  Json any_call;
};

CallSchemas call_schemas(ToolCallFormat format, const ToolSet& tools) {
  CallSchemas out;
  Json choices = Json::array();
  const char* key = arguments_key(format);
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const Json& fn = tools.tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (tools.choice.mode == ToolChoice::Mode::kFunction && name != tools.choice.function) continue;
    const std::string def = "call-" + std::to_string(i);
    Json params = fn.contains("parameters") ? fn["parameters"] : Json{{"type", "object"}};
    rebase_refs(params, "/$defs/" + def + "/properties/" + key);
    Json properties = Json::object();
    properties["name"] = {{"const", name}};
    properties[key] = std::move(params);
    out.defs[def] = {{"type", "object"},
                     {"properties", std::move(properties)},
                     {"required", {"name", key}},
                     {"additionalProperties", false}};
    choices.push_back({{"$ref", "#/$defs/" + def}});
  }
  out.any_call = choices.size() == 1 ? choices[0] : Json{{"anyOf", std::move(choices)}};
  return out;
}

// The generic format's reply schema: a call (or calls), or a response unless one is required.
Json generic_schema(const ToolSet& tools) {
  CallSchemas calls = call_schemas(ToolCallFormat::kGeneric, tools);
  Json call_reply;
  if (tools.parallel) {
    call_reply = {
        {"type", "object"},
        {"properties",
         {{"tool_calls", {{"type", "array"}, {"items", calls.any_call}, {"minItems", 1}}}}},
        {"required", {"tool_calls"}},
        {"additionalProperties", false}};
  } else {
    call_reply = {{"type", "object"},
                  {"properties", {{"tool_call", calls.any_call}}},
                  {"required", {"tool_call"}},
                  {"additionalProperties", false}};
  }
  Json root;
  if (tools.choice.mode == ToolChoice::Mode::kAuto) {
    const Json response = {{"type", "object"},
                           {"properties", {{"response", {{"type", "string"}}}}},
                           {"required", {"response"}},
                           {"additionalProperties", false}};
    root = {{"anyOf", {std::move(call_reply), response}}};
  } else {
    root = std::move(call_reply);
  }
  root["$defs"] = std::move(calls.defs);
  return root;
}

// The generic format's instructions, which join the system message.
std::string generic_instructions(const ToolSet& tools) {
  std::string text =
      "You have access to the following tools, given as JSON function specifications:\n" +
      tools.tools.dump(2) + "\n\n";
  const char* call = tools.parallel
                         ? R"({"tool_calls": [{"name": "<function>", "arguments": {...}}, ...]})"
                         : R"({"tool_call": {"name": "<function>", "arguments": {...}}})";
  text += "Answer with a single JSON object and nothing else. To call ";
  text += tools.parallel ? "one or more tools" : "a tool";
  text += ", write " + std::string(call) + ".";
  if (tools.choice.mode == ToolChoice::Mode::kAuto)
    text += R"( To answer the user directly, write {"response": "<your answer>"}.)";
  else
    text += " You must call a tool now.";
  return text;
}

// The call JSON an earlier assistant turn made, in the generic format's shape.
Json generic_call(const Json& call) {
  const Json& fn = call["function"];
  Json args = fn.contains("arguments") ? fn["arguments"] : Json::object();
  if (args.is_string()) {
    std::optional<Json> parsed = parse_json(args.get<std::string>());
    if (parsed) args = std::move(*parsed);
  }
  return {{"name", fn["name"]}, {"arguments", std::move(args)}};
}

// Checks messages[i].tool_calls: an array of {"function": {"name": string, ...}}.
Result<void> check_tool_calls(const Json& message, size_t i) {
  const auto calls = message.find("tool_calls");
  if (calls == message.end() || calls->is_null()) return {};
  const std::string where = "messages[" + std::to_string(i) + "].tool_calls";
  if (!calls->is_array())
    return make_error(ErrorCode::kUsage, "'" + where + "' must be an array of tool calls");
  for (size_t k = 0; k < calls->size(); ++k) {
    const Json& c = (*calls)[k];
    const auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string()) {
      return make_error(ErrorCode::kUsage, "'" + where + "[" + std::to_string(k) +
                                               "]' must be an object with function.name");
    }
  }
  return {};
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kGeneric:
      break;
  }
  return "generic";
}

ToolCallFormat detect_tool_call_format(const ChatTemplate& tmpl) {
  const std::string& s = tmpl.source();
  if (contains(s, "[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  // XML-style calls inside <tool_call> (Qwen3-Coder, GLM, Nemotron) are not Hermes JSON.
  if (contains(s, "<tool_call>") && !contains(s, "<function=") && !contains(s, "<arg_key>"))
    return ToolCallFormat::kHermes;
  if (contains(s, "<|start_header_id|>") && contains(s, "tools") && contains(s, "\"parameters\""))
    return ToolCallFormat::kLlama3;
  return ToolCallFormat::kGeneric;
}

Result<nlohmann::ordered_json> tool_messages(ToolCallFormat format, const ToolSet& tools,
                                             const nlohmann::ordered_json& messages,
                                             bool system_role) {
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (Result<void> ok = check_tool_calls(messages[i], i); !ok.ok()) return ok.error();
  }
  if (format != ToolCallFormat::kGeneric) {
    out = messages;
    for (Json& m : out) {
      if (!m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
      for (Json& c : m["tool_calls"]) {
        Json& args = c["function"]["arguments"];
        if (!args.is_string()) continue;
        std::optional<Json> parsed = parse_json(args.get<std::string>());
        if (parsed && parsed->is_object()) args = std::move(*parsed);
      }
    }
    return out;
  }
  const std::string instructions = generic_instructions(tools);
  const bool has_system = !messages.empty() && messages[0].value("role", "") == "system";
  if (!has_system && system_role) out.push_back({{"role", "system"}, {"content", instructions}});
  bool placed = has_system || system_role;
  for (size_t i = 0; i < messages.size(); ++i) {
    Json m = messages[i];
    const std::string role = m.value("role", "");
    const std::string content = m["content"].is_string() ? m["content"].get<std::string>() : "";
    if (i == 0 && role == "system") {
      m["content"] = content.empty() ? instructions : content + "\n\n" + instructions;
    } else if (!placed && role == "user") {
      m["content"] = instructions + "\n\n" + content;
      placed = true;
    } else if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      Json calls = Json::array();
      for (const Json& c : m["tool_calls"]) calls.push_back(generic_call(c));
      const Json call_json = calls.size() == 1 && !tools.parallel
                                 ? Json{{"tool_call", calls[0]}}
                                 : Json{{"tool_calls", std::move(calls)}};
      m = {{"role", "assistant"}, {"content", call_json.dump()}};
    } else if (role == "tool") {
      // Consecutive results become one user message, as the call that asked for them was one
      // assistant message.
      Json results = Json::array();
      for (; i < messages.size() && messages[i].value("role", "") == "tool"; ++i) {
        const Json& t = messages[i];
        Json r = Json::object();
        if (t.contains("tool_call_id")) r["tool_call_id"] = t["tool_call_id"];
        if (t.contains("name")) r["name"] = t["name"];
        r["content"] = t.contains("content") ? t["content"] : Json("");
        results.push_back(std::move(r));
      }
      --i;
      const Json result_json = results.size() == 1 ? Json{{"tool_response", results[0]}}
                                                   : Json{{"tool_responses", std::move(results)}};
      m = {{"role", "user"}, {"content", result_json.dump()}};
    }
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::optional<ToolGrammar>> tool_call_grammar(ToolCallFormat format, const ToolSet& tools) {
  using Out = std::optional<ToolGrammar>;
  if (!tools.active()) return Out();
  const bool required = tools.choice.mode != ToolChoice::Mode::kAuto;
  // Under auto the known formats' grammars are lazy: they hold from the text that opens a
  // call (Llama 3's calls are bare JSON that names the function first).
  const bool lazy = !required && format != ToolCallFormat::kGeneric;
  // Each tool's parameters alone first, so that a refusal names the tool and a path
  // within its parameters.
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const Json& fn = tools.tools[i]["function"];
    if (!fn.contains("parameters")) continue;
    Result<std::string> alone = json_schema_to_grammar(fn["parameters"].dump());
    if (!alone.ok()) {
      return make_error(ErrorCode::kUsage, "tools[" + std::to_string(i) +
                                               "].function.parameters: " + alone.error().message);
    }
  }
  Json schema;
  if (format == ToolCallFormat::kGeneric) {
    schema = generic_schema(tools);
  } else {
    CallSchemas calls = call_schemas(format, tools);
    schema = std::move(calls.any_call);
    schema["$defs"] = std::move(calls.defs);
  }
  Result<std::string> gbnf = json_schema_to_grammar(schema.dump());
  if (!gbnf.ok()) return make_error(ErrorCode::kUsage, "tools: " + gbnf.error().message);
  if (format == ToolCallFormat::kGeneric) return Out(ToolGrammar{std::move(*gbnf), ""});
  if (format == ToolCallFormat::kLlama3)
    return Out(ToolGrammar{std::move(*gbnf), lazy ? R"({"name")" : ""});
  // Hermes and Mistral wrap the call: the converter's root becomes one call.
  std::string text = std::move(*gbnf);
  const size_t root = text.rfind("root ::=", 0) == 0 ? 0 : text.find("\nroot ::=");
  if (root == std::string::npos) return make_error(ErrorCode::kRuntime, "no root rule");
  text.replace(root == 0 ? 0 : root + 1, 4, "qrun-tool-call");
  if (format == ToolCallFormat::kHermes) {
    // Each block as Qwen and Hermes write it, the newlines inside optional.
    text += R"(qrun-tool-block ::= "<tool_call>" "\n"? qrun-tool-call "\n"? "</tool_call>")"
            "\n";
    text += tools.parallel ? R"(root ::= qrun-tool-block ("\n"? qrun-tool-block)*)"
                             "\n"
                           : "root ::= qrun-tool-block\n";
    return Out(ToolGrammar{std::move(text), lazy ? "<tool_call>" : ""});
  }
  // [TOOL_CALLS] is a control token the grammar cannot write; the array alone is parsed as
  // calls. Under auto the token triggers the grammar, which then holds the array after it.
  const char* more = tools.parallel ? R"( ("," qrun-tool-call)*)" : "";
  text += R"(root ::= "[" qrun-tool-call)" + std::string(more) + " \"]\"\n";
  return Out(ToolGrammar{std::move(text), lazy ? "[TOOL_CALLS]" : ""});
}

bool tool_calls_need_special_tokens(ToolCallFormat format) {
  return format == ToolCallFormat::kMistral;
}

std::string_view tool_call_opener(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "<tool_call>";
    case ToolCallFormat::kMistral:
      return "[TOOL_CALLS]";
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kGeneric:
      break;
  }
  return "";
}

size_t content_before_calls(std::string_view text, std::string_view opener) {
  if (opener.empty()) return text.size();
  const size_t at = text.find(opener);
  if (at != std::string_view::npos) return at;
  for (size_t k = std::min(opener.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == opener.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view reply, const ToolSet& tools) {
  std::optional<ParsedReply> parsed;
  switch (format) {
    case ToolCallFormat::kHermes:
      parsed = parse_hermes(reply);
      break;
    case ToolCallFormat::kLlama3:
      parsed = parse_llama3(reply, tools);
      break;
    case ToolCallFormat::kMistral:
      parsed = parse_mistral(reply);
      break;
    case ToolCallFormat::kGeneric:
      parsed = parse_generic(reply);
      break;
  }
  if (!parsed) return ParsedReply{std::string(reply), {}};
  if (!parsed->calls.empty() && trim(parsed->content).empty()) parsed->content.clear();
  return std::move(*parsed);
}

std::string make_tool_call_id(ToolCallFormat format) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, 61);
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[pick(rng)];
  return id;
}

}  // namespace qrun
