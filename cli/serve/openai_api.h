// The OpenAI API's JSON for `qrun serve`, apart from HTTP: parsing a /v1/completions or
// /v1/chat/completions body into a CompletionRequest (each bad field a 400 naming it), the
// error object, and the response and streaming-chunk objects. See
// https://platform.openai.com/docs/api-reference/chat for the shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/generate.h"
#include "core/grammar/grammar.h"
#include "core/sampling/sampling.h"
#include "core/tool_calls.h"

namespace qrun::cli::serve {

// An error as the API reports it: the HTTP status and the "error" object's fields.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, "" for none (null in the JSON)
  std::string code;   // "" for none
};
// {"error": {"message", "type", "param", "code"}}
nlohmann::json error_json(const ApiError& e);

enum class Endpoint { kCompletions, kChat };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string prompt;               // /v1/completions
  nlohmann::ordered_json messages;  // /v1/chat/completions: the array, as sent
  int64_t max_tokens = -1;          // -1: until end of generation or a full context
  std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint32_t> seed;
  std::optional<std::vector<std::string>> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // logit_bias: {"TOKEN_ID": BIAS, ...}, each bias in [-100, 100] added to its logit.
  std::vector<LogitBias> logit_bias;
  // response_format json_object or json_schema: the grammar the output must follow; null
  // for text (the server's --grammar / --json-schema, if any, then applies).
  std::shared_ptr<const Grammar> grammar;
  std::string grammar_trigger;  // a lazy grammar's trigger (tool calls), "" for none
  // /v1/chat/completions: tools, tool_choice and parallel_tool_calls (default false, as
  // llama-server: one call per reply).
  ToolSet tools;
};

// Parses a request body for `endpoint` against a vocabulary of `n_vocab` tokens. Malformed
// JSON, a missing or wrongly typed field, a value out of range (a logit_bias token outside
// the vocabulary too), n != 1 and a JSON schema the converter refuses (the message names
// the keyword) are 400s naming the field.
std::optional<CompletionRequest> parse_request(const std::string& body, Endpoint endpoint,
                                               int32_t n_vocab, ApiError* error);

// `defaults` (the server's sampling flags) with the request's overrides applied; the
// request's logit biases are added after the server's.
SamplingParams request_sampling(const CompletionRequest& r, const SamplingParams& defaults);

// OpenAI's finish_reason: "stop" for an end-of-generation token or a stop string, "length"
// for the token budget or a full context ("tool_calls" is the caller's to give).
const char* finish_reason(StopReason reason);

// The fixed parts of every response to one request.
struct ResponseIds {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// usage, with prompt_tokens_details.cached_tokens: prompt tokens the prefix cache held.
nlohmann::json usage_json(int64_t n_prompt, int64_t n_completion, int64_t n_cached = 0);
// The whole (non-streamed) response.
nlohmann::json response_json(Endpoint endpoint, const ResponseIds& ids, const std::string& text,
                             StopReason reason, int64_t n_prompt, int64_t n_completion,
                             int64_t n_cached = 0);
// The whole chat response for a reply that called tools: content (null when empty),
// tool_calls, and finish_reason "tool_calls".
nlohmann::json tool_calls_response_json(const ResponseIds& ids, const ParsedReply& reply,
                                        int64_t n_prompt, int64_t n_completion,
                                        int64_t n_cached = 0);
// The streamed chunk announcing call `index` whole (id, name and arguments at once).
nlohmann::json tool_call_chunk_json(const ResponseIds& ids, const ToolCall& call, size_t index,
                                    bool include_usage);
// The last streamed chunk of a reply that called tools: finish_reason "tool_calls".
nlohmann::json tool_calls_finish_chunk_json(const ResponseIds& ids, bool include_usage);
// The tool_calls entry of a message: {"id", "type": "function", "function": {...}}.
nlohmann::json tool_call_json(const ToolCall& call);
// One streamed chunk: `text` as the delta (chat: with the role on the first chunk), and a
// finish_reason when `reason` is set. With include_usage every chunk has "usage": null.
nlohmann::json chunk_json(Endpoint endpoint, const ResponseIds& ids, const std::string& text,
                          bool first, std::optional<StopReason> reason, bool include_usage);
// The last chunk with include_usage: empty choices and the usage.
nlohmann::json usage_chunk_json(Endpoint endpoint, const ResponseIds& ids, int64_t n_prompt,
                                int64_t n_completion, int64_t n_cached = 0);

}  // namespace qrun::cli::serve
