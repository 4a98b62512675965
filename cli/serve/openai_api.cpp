// Request parsing and response building for the OpenAI API. Fields the server does not
// use (user, logprobs false, ...) are accepted and ignored, as other local servers do;
// fields it uses are type-checked, and n other than 1 is refused.
#include "cli/serve/openai_api.h"

#include <cmath>
#include <limits>
#include <set>

#include "cli/sampling_flags.h"

namespace qrun::cli::serve {
namespace {

using Json = nlohmann::ordered_json;

ApiError field_error(const std::string& field, const std::string& what) {
  ApiError e;
  e.message = "'" + field + "' " + what;
  e.param = field;
  return e;
}

// A number field within [lo, hi]; absent or null leaves `out` unset.
bool number_field(const Json& body, const char* name, double lo, double hi,
                  std::optional<double>* out, ApiError* error) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number()) {
    *error = field_error(name, "must be a number");
    return false;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    *error = field_error(
        name, "is " + it->dump() + ", outside [" + Json(lo).dump() + ", " + Json(hi).dump() + "]");
    return false;
  }
  *out = v;
  return true;
}

bool integer_field(const Json& body, const char* name, int64_t lo, int64_t hi,
                   std::optional<int64_t>* out, ApiError* error) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number_integer()) {
    *error = field_error(name, "must be an integer");
    return false;
  }
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi) {
    *error = field_error(name, "is " + it->dump() + ", outside [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
    return false;
  }
  *out = v;
  return true;
}

bool bool_field(const Json& obj, const char* name, bool* out, ApiError* error) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    *error = field_error(name, "must be a boolean");
    return false;
  }
  *out = it->get<bool>();
  return true;
}

// "stop": a string or an array of strings (OpenAI allows up to 4; more are accepted).
bool stop_field(const Json& body, std::optional<std::vector<std::string>>* out, ApiError* error) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return true;
  std::vector<std::string> stops;
  if (it->is_string()) {
    stops.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const Json& s : *it) {
      if (!s.is_string()) {
        *error = field_error("stop", "must be a string or an array of strings");
        return false;
      }
      stops.push_back(s.get<std::string>());
    }
  } else {
    *error = field_error("stop", "must be a string or an array of strings");
    return false;
  }
  *out = std::move(stops);
  return true;
}

bool messages_field(const Json& body, Json* out, ApiError* error) {
  const auto it = body.find("messages");
  if (it == body.end()) {
    *error = field_error("messages", "is required");
    return false;
  }
  if (!it->is_array() || it->empty()) {
    *error = field_error("messages", "must be a non-empty array of messages");
    return false;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      *error = field_error(where, "must be an object with a string 'role'");
      return false;
    }
    const auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_array() &&
        !content->is_null()) {
      *error = field_error(where + ".content", "must be a string or an array of parts");
      return false;
    }
  }
  *out = *it;
  return true;
}

bool prompt_field(const Json& body, std::string* out, ApiError* error) {
  const auto it = body.find("prompt");
  if (it == body.end()) {
    *error = field_error("prompt", "is required");
    return false;
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return true;
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    *out = (*it)[0].get<std::string>();
    return true;
  }
  *error = field_error("prompt", "must be a string (or an array of one string)");
  return false;
}

// "logit_bias": an object mapping token ids (decimal strings) to biases in [-100, 100].
bool logit_bias_field(const Json& body, int32_t n_vocab, std::vector<LogitBias>* out,
                      ApiError* error) {
  const auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_object()) {
    *error = field_error("logit_bias", "must be an object mapping token ids to biases");
    return false;
  }
  for (const auto& [key, value] : it->items()) {
    const std::string where = "logit_bias[\"" + key + "\"]";
    int64_t token = -1;
    if (!key.empty() && key.size() <= 10 &&
        key.find_first_not_of("0123456789") == std::string::npos) {
      token = std::stoll(key);
    }
    if (token < 0) {
      *error = field_error("logit_bias", "has the key \"" + key + "\", which is not a token id");
      return false;
    }
    if (token >= n_vocab) {
      *error = field_error("logit_bias", "has token " + key + ", outside the vocabulary of " +
                                             std::to_string(n_vocab) + " tokens");
      return false;
    }
    if (!value.is_number()) {
      *error = field_error(where, "must be a number");
      error->param = "logit_bias";
      return false;
    }
    const double bias = value.get<double>();
    if (!std::isfinite(bias) || bias < -100 || bias > 100) {
      *error = field_error(where, "is " + value.dump() + ", outside [-100, 100]");
      error->param = "logit_bias";
      return false;
    }
    out->push_back(LogitBias{static_cast<int32_t>(token), static_cast<float>(bias)});
  }
  return true;
}

// "response_format": {"type": "text"}, {"type": "json_object"} (any JSON object) or
// {"type": "json_schema", "json_schema": {"schema": {...}, "name", "strict", ...}}.
bool response_format_field(const Json& body, std::shared_ptr<const Grammar>* out, ApiError* error) {
  const auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return true;
  const auto type = it->is_object() ? it->find("type") : it->end();
  if (!it->is_object() || type == it->end() || !type->is_string()) {
    *error = field_error("response_format", "must be an object with a string 'type'");
    return false;
  }
  const std::string kind = type->get<std::string>();
  if (kind == "text") return true;
  if (kind == "json_object") {
    static const std::shared_ptr<const Grammar> any_object =
        json_schema_grammar(R"({"type": "object", "additionalProperties": true})").value();
    *out = any_object;
    return true;
  }
  if (kind != "json_schema") {
    *error =
        field_error("response_format.type",
                    "is \"" + kind + "\"; expected \"text\", \"json_object\" or \"json_schema\"");
    return false;
  }
  const Json* schema = nullptr;
  const auto spec = it->find("json_schema");
  if (spec != it->end() && spec->is_object()) {
    const auto found = spec->find("schema");
    if (found != spec->end() && found->is_object()) schema = &*found;
  }
  if (schema == nullptr) {
    *error = field_error("response_format.json_schema.schema", "must be an object (a JSON Schema)");
    return false;
  }
  Result<std::shared_ptr<const Grammar>> grammar = json_schema_grammar(schema->dump());
  if (!grammar.ok()) {
    *error = field_error("response_format.json_schema.schema",
                         "is not supported: " + grammar.error().message);
    return false;
  }
  *out = std::move(*grammar);
  return true;
}

// "tools": [{"type": "function", "function": {"name", "description"?, "parameters"?}}].
bool tools_field(const Json& body, ToolSet* out, ApiError* error) {
  const auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_array()) {
    *error = field_error("tools", "must be an array of tools");
    return false;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("type") || t["type"] != "function") {
      *error = field_error(where,
                           "must be an object with \"type\": \"function\" (the one "
                           "kind of tool qrun serve supports)");
      return false;
    }
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string() ||
        (*fn)["name"].get<std::string>().empty()) {
      *error = field_error(where + ".function", "must be an object with a non-empty 'name'");
      return false;
    }
    const auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_object() && !params->is_null()) {
      *error = field_error(where + ".function.parameters", "must be an object (a JSON Schema)");
      return false;
    }
    const std::string name = (*fn)["name"].get<std::string>();
    if (!names.insert(name).second) {
      *error = field_error(where + ".function.name", "is \"" + name + "\", named twice");
      return false;
    }
    Json function = *fn;
    if (params != fn->end() && params->is_null()) function.erase("parameters");
    out->tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return true;
}

// "tool_choice": "none", "auto", "required" or {"type": "function", "function": {"name"}};
// "parallel_tool_calls": a boolean.
bool tool_choice_field(const Json& body, ToolSet* tools, ApiError* error) {
  if (!bool_field(body, "parallel_tool_calls", &tools->parallel, error)) return false;
  const auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return true;
  ToolChoice& choice = tools->choice;
  if (it->is_string()) {
    const std::string mode = it->get<std::string>();
    if (mode == "none") {
      choice.mode = ToolChoice::Mode::kNone;
    } else if (mode == "auto") {
      choice.mode = ToolChoice::Mode::kAuto;
    } else if (mode == "required") {
      choice.mode = ToolChoice::Mode::kRequired;
    } else {
      *error = field_error("tool_choice", "is \"" + mode +
                                              "\"; expected \"none\", \"auto\", \"required\" "
                                              "or a function");
      return false;
    }
  } else {
    const auto fn = it->is_object() ? it->find("function") : it->end();
    if (fn == it->end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string()) {
      *error = field_error("tool_choice",
                           "must be a string or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}");
      return false;
    }
    choice.mode = ToolChoice::Mode::kFunction;
    choice.function = (*fn)["name"].get<std::string>();
    bool known = false;
    for (const Json& t : tools->tools) known = known || t["function"]["name"] == choice.function;
    if (!known) {
      *error = field_error(
          "tool_choice", "names the function \"" + choice.function + "\", which is not in 'tools'");
      return false;
    }
  }
  if (tools->tools.empty() && choice.mode != ToolChoice::Mode::kNone &&
      choice.mode != ToolChoice::Mode::kAuto) {
    *error = field_error("tool_choice", "asks for a tool call but 'tools' is empty");
    return false;
  }
  return true;
}

}  // namespace

nlohmann::json error_json(const ApiError& e) {
  nlohmann::json err = {{"message", e.message},
                        {"type", e.type},
                        {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                        {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}};
  return {{"error", err}};
}

std::optional<CompletionRequest> parse_request(const std::string& body_text, Endpoint endpoint,
                                               int32_t n_vocab, ApiError* error) {
  const Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    error->message = "the request body is not valid JSON";
    return std::nullopt;
  }
  if (!body.is_object()) {
    error->message = "the request body must be a JSON object";
    return std::nullopt;
  }
  CompletionRequest r;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::kChat) {
    if (!messages_field(body, &r.messages, error)) return std::nullopt;
  } else if (!prompt_field(body, &r.prompt, error)) {
    return std::nullopt;
  }

  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> n, max_tokens, max_completion_tokens, top_k, seed;
  if (!integer_field(body, "n", 1, kMaxInt32, &n, error)) return std::nullopt;
  if (n && *n != 1) {
    *error = field_error("n", "must be 1: qrun serve returns one choice per request");
    return std::nullopt;
  }
  if (!integer_field(body, "max_tokens", 0, kMaxInt32, &max_tokens, error) ||
      !integer_field(body, "max_completion_tokens", 0, kMaxInt32, &max_completion_tokens, error) ||
      !integer_field(body, "top_k", 0, kMaxInt32, &top_k, error) ||
      !integer_field(body, "seed", INT64_MIN, INT64_MAX, &seed, error)) {
    return std::nullopt;
  }
  if (max_completion_tokens)
    r.max_tokens = *max_completion_tokens;
  else if (max_tokens)
    r.max_tokens = *max_tokens;
  if (top_k) r.top_k = static_cast<int32_t>(*top_k);
  // Any integer seeds the generator; its low 32 bits are what std::mt19937 takes.
  if (seed) r.seed = static_cast<uint32_t>(static_cast<uint64_t>(*seed));

  std::optional<double> temperature, top_p, min_p, presence, frequency;
  if (!number_field(body, "temperature", 0, 2, &temperature, error) ||
      !number_field(body, "top_p", 0, 1, &top_p, error) ||
      !number_field(body, "min_p", 0, 1, &min_p, error) ||
      !number_field(body, "presence_penalty", -2, 2, &presence, error) ||
      !number_field(body, "frequency_penalty", -2, 2, &frequency, error)) {
    return std::nullopt;
  }
  const auto to_float = [](const std::optional<double>& v) -> std::optional<float> {
    if (!v) return std::nullopt;
    return static_cast<float>(*v);
  };
  r.temperature = to_float(temperature);
  r.top_p = to_float(top_p);
  r.min_p = to_float(min_p);
  r.presence_penalty = to_float(presence);
  r.frequency_penalty = to_float(frequency);

  if (!stop_field(body, &r.stop, error) || !bool_field(body, "stream", &r.stream, error)) {
    return std::nullopt;
  }
  const auto options = body.find("stream_options");
  if (options != body.end() && !options->is_null()) {
    if (!options->is_object()) {
      *error = field_error("stream_options", "must be an object");
      return std::nullopt;
    }
    if (!bool_field(*options, "include_usage", &r.include_usage, error)) {
      error->param = "stream_options.include_usage";
      error->message = "'stream_options.include_usage' must be a boolean";
      return std::nullopt;
    }
  }
  if (!logit_bias_field(body, n_vocab, &r.logit_bias, error) ||
      !response_format_field(body, &r.grammar, error)) {
    return std::nullopt;
  }
  if (endpoint == Endpoint::kChat &&
      (!tools_field(body, &r.tools, error) || !tool_choice_field(body, &r.tools, error))) {
    return std::nullopt;
  }
  if (r.tools.active() && r.grammar) {
    *error = field_error("response_format",
                         "cannot be combined with 'tools' (send tool_choice \"none\" to answer "
                         "in the format without calling tools)");
    return std::nullopt;
  }
  return r;
}

SamplingParams request_sampling(const CompletionRequest& r, const SamplingParams& defaults) {
  SamplingParams p = defaults;
  if (r.temperature) p.temperature = *r.temperature;
  if (r.top_p) p.top_p = *r.top_p;
  if (r.min_p) p.min_p = *r.min_p;
  if (r.top_k) p.top_k = *r.top_k;
  if (r.presence_penalty) p.presence_penalty = *r.presence_penalty;
  if (r.frequency_penalty) p.frequency_penalty = *r.frequency_penalty;
  if (r.seed) p.seed = *r.seed;
  p.logit_bias.insert(p.logit_bias.end(), r.logit_bias.begin(), r.logit_bias.end());
  return p;
}

const char* finish_reason(StopReason reason) {
  switch (reason) {
    case StopReason::kLength:
    case StopReason::kContext:
      return "length";
    case StopReason::kEos:
    case StopReason::kStop:
    case StopReason::kInterrupted:
      break;
  }
  return "stop";
}

nlohmann::json usage_json(int64_t n_prompt, int64_t n_completion, int64_t n_cached) {
  return {{"prompt_tokens", n_prompt},
          {"completion_tokens", n_completion},
          {"total_tokens", n_prompt + n_completion},
          {"prompt_tokens_details", {{"cached_tokens", n_cached}}}};
}

namespace {

nlohmann::json envelope(Endpoint endpoint, const ResponseIds& ids, bool chunk) {
  const char* object = endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

}  // namespace

nlohmann::json response_json(Endpoint endpoint, const ResponseIds& ids, const std::string& text,
                             StopReason reason, int64_t n_prompt, int64_t n_completion,
                             int64_t n_cached) {
  nlohmann::json j = envelope(endpoint, ids, false);
  nlohmann::json choice = {{"index", 0}};
  if (endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason(reason);
  j["choices"] = nlohmann::json::array({choice});
  j["usage"] = usage_json(n_prompt, n_completion, n_cached);
  return j;
}

nlohmann::json tool_call_json(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

nlohmann::json tool_calls_response_json(const ResponseIds& ids, const ParsedReply& reply,
                                        int64_t n_prompt, int64_t n_completion, int64_t n_cached) {
  nlohmann::json j = envelope(Endpoint::kChat, ids, false);
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCall& c : reply.calls) calls.push_back(tool_call_json(c));
  nlohmann::json message = {
      {"role", "assistant"},
      {"content", reply.content.empty() ? nlohmann::json() : nlohmann::json(reply.content)},
      {"tool_calls", std::move(calls)}};
  j["choices"] = nlohmann::json::array({{{"index", 0},
                                         {"message", std::move(message)},
                                         {"logprobs", nullptr},
                                         {"finish_reason", "tool_calls"}}});
  j["usage"] = usage_json(n_prompt, n_completion, n_cached);
  return j;
}

nlohmann::json tool_call_chunk_json(const ResponseIds& ids, const ToolCall& call, size_t index,
                                    bool include_usage) {
  nlohmann::json j = envelope(Endpoint::kChat, ids, true);
  nlohmann::json entry = tool_call_json(call);
  entry["index"] = index;
  j["choices"] = nlohmann::json::array(
      {{{"index", 0},
        {"delta", {{"tool_calls", nlohmann::json::array({std::move(entry)})}}},
        {"logprobs", nullptr},
        {"finish_reason", nullptr}}});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

nlohmann::json tool_calls_finish_chunk_json(const ResponseIds& ids, bool include_usage) {
  nlohmann::json j = envelope(Endpoint::kChat, ids, true);
  j["choices"] = nlohmann::json::array({{{"index", 0},
                                         {"delta", nlohmann::json::object()},
                                         {"logprobs", nullptr},
                                         {"finish_reason", "tool_calls"}}});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

nlohmann::json chunk_json(Endpoint endpoint, const ResponseIds& ids, const std::string& text,
                          bool first, std::optional<StopReason> reason, bool include_usage) {
  nlohmann::json j = envelope(endpoint, ids, true);
  nlohmann::json choice = {{"index", 0}};
  if (endpoint == Endpoint::kChat) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !reason)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = reason ? nlohmann::json(finish_reason(*reason)) : nlohmann::json();
  j["choices"] = nlohmann::json::array({choice});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

nlohmann::json usage_chunk_json(Endpoint endpoint, const ResponseIds& ids, int64_t n_prompt,
                                int64_t n_completion, int64_t n_cached) {
  nlohmann::json j = envelope(endpoint, ids, true);
  j["choices"] = nlohmann::json::array();
  j["usage"] = usage_json(n_prompt, n_completion, n_cached);
  return j;
}

}  // namespace qrun::cli::serve
