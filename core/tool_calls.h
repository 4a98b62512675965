// Tool calling (OpenAI's "tools"): how a chat template expects a model to call functions,
// how the tools and earlier calls reach the template, the grammar that holds the model to a
// call when one is required, and the parse of a reply into text and calls.
//
// The format comes from the template's text:
//   kHermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call
//             (Hermes 2 Pro, Qwen 2.5, Qwen 3, QwQ, SmolLM 3 and their many fine-tunes);
//   kLlama3   the whole reply is {"name": ..., "parameters": {...}} (Llama 3.1 to 3.3);
//   kMistral  [TOOL_CALLS] then a JSON array of {"name", "arguments"} (Mistral Nemo), or
//             [TOOL_CALLS]name[ARGS]{...} per call (Mistral Small 3.2, Devstral);
//   kGeneric  any other template: the tools are described in the system message and the
//             reply is always one JSON object, {"tool_call": {"name", "arguments"}} (or
//             {"tool_calls": [...]} when parallel calls are allowed) or {"response": TEXT},
//             which a grammar enforces. This is how llama.cpp serves such templates.
// For the first three the template renders the tools and the history itself (it is given
// the "tools" variable, and "arguments" as objects, as their templates' tojson expects).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/jinja/chat_template.h"
#include "ggml-like/result.h"

namespace qrun {

enum class ToolCallFormat { kHermes, kLlama3, kMistral, kGeneric };
// "hermes", "llama3", "mistral", "generic"
const char* tool_call_format_name(ToolCallFormat format);
ToolCallFormat detect_tool_call_format(const ChatTemplate& tmpl);

// OpenAI's tool_choice: "auto", "none", "required", or one named function.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction only
};

// The tools of one request, already checked: each entry is
// {"type": "function", "function": {"name", "description"?, "parameters"?}}.
struct ToolSet {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice choice;
  bool parallel = false;  // parallel_tool_calls
  // True when the request offers tools the model may call (some tools, choice not none).
  bool active() const { return !tools.empty() && choice.mode != ToolChoice::Mode::kNone; }
};

struct ToolCall {
  std::string id;         // "call_..." (Mistral: 9 letters and digits, as its template asks)
  std::string name;       // the function
  std::string arguments;  // a JSON object, as text
};

// The messages as the template should see them. Known formats: assistant tool_calls'
// "arguments" strings that hold JSON objects become objects. Generic: the tool
// instructions join the system message (one is added in front when there is none), and
// earlier calls and tool results become assistant and user messages holding the JSON the
// format uses, so that templates that know only user and assistant still render them.
// With `system_role` false (a template that refuses system messages, as Gemma 2's) the
// instructions open the first user message instead. kUsage for a malformed tool_calls
// entry, naming messages[i].
Result<nlohmann::ordered_json> tool_messages(ToolCallFormat format, const ToolSet& tools,
                                             const nlohmann::ordered_json& messages,
                                             bool system_role = true);

// The grammar that holds a reply to the format, and the text that starts it (llama.cpp's
// lazy grammar: "" when it holds from the first token).
struct ToolGrammar {
  std::string gbnf;
  std::string trigger;
};
// The grammar for a reply, or nullopt for none. kGeneric: always. A required call (choice
// required or a named function): the call, from the first token. The known formats under
// auto: the calls, once the reply opens one (their JSON then follows the tools' schemas):
// kHermes from <tool_call>, kLlama3 from {"name" (its calls are bare JSON), kMistral after
// the [TOOL_CALLS] control token (make_grammar_stage fires on the token).
// kUsage when a tool's parameters are a schema the converter refuses (naming tools[i]).
Result<std::optional<ToolGrammar>> tool_call_grammar(ToolCallFormat format, const ToolSet& tools);

// Whether generation must render control tokens as text for the parse to see the format's
// markers (Mistral's [TOOL_CALLS] and [ARGS] are control tokens).
bool tool_calls_need_special_tokens(ToolCallFormat format);

// The text that opens the calls in a reply ("<tool_call>", "[TOOL_CALLS]"), or "" when
// the whole reply has to be seen first (kLlama3, kGeneric). Text before it is content that
// can be streamed as it comes.
std::string_view tool_call_opener(ToolCallFormat format);

// How much of a partial reply is content for sure: all of it up to `opener`, less a tail
// that could be the opener's beginning (all of it when `opener` is empty).
size_t content_before_calls(std::string_view text, std::string_view opener);

struct ParsedReply {
  std::string content;  // the text that is not a call (kGeneric: the "response" string)
  std::vector<ToolCall> calls;
};
// Splits a whole reply. A reply whose calls are not valid JSON (a model that drifted from
// the format) is all content, with no calls: the client sees what the model wrote. A
// Llama 3 reply is a call only when it names one of `tools` (it is otherwise just JSON).
ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view reply, const ToolSet& tools);

// A fresh call id for `format`.
std::string make_tool_call_id(ToolCallFormat format);

}  // namespace qrun
