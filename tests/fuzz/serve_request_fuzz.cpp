// libFuzzer entry point for `qrun serve`'s request parsing (cli/serve/openai_api.*), the
// code every HTTP body reaches first. Each input is parsed as a /v1/completions and as a
// /v1/chat/completions body: parse_request must return a request, or an error that is a
// 4xx with a one-line message; a request must then give sampling parameters and serialize
// its responses (whole, streamed, usage) as JSON that dumps, as the server would; a chat
// with tools goes through each tool-call format's messages, grammar and reply parse.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/serve/openai_api.h"
#include "core/grammar/grammar.h"

namespace {

using qrun::cli::serve::ApiError;
using qrun::cli::serve::CompletionRequest;
using qrun::cli::serve::Endpoint;

constexpr int32_t kVocab = 32000;

void check_error(const ApiError& e) {
  QRUN_CHECK(e.status >= 400 && e.status < 500, "status %d for a bad body", e.status);
  QRUN_CHECK(!e.message.empty() && e.message.find('\n') == std::string::npos,
             "empty or multi-line message: %s", e.message.c_str());
  (void)qrun::cli::serve::error_json(e).dump();
}

void respond(Endpoint endpoint, const CompletionRequest& r) {
  (void)qrun::cli::serve::request_sampling(r, qrun::SamplingParams{});
  const qrun::cli::serve::ResponseIds ids{"cmpl-fuzz", 1, "fuzz.gguf"};
  const std::string text = r.endpoint == Endpoint::kChat ? "\xc3\xa9t\xc3\xa9" : "text";
  using qrun::StopReason;
  (void)qrun::cli::serve::response_json(endpoint, ids, text, StopReason::kLength, 3, 1).dump();
  (void)qrun::cli::serve::chunk_json(endpoint, ids, text, true, std::nullopt, r.include_usage)
      .dump();
  (void)qrun::cli::serve::chunk_json(endpoint, ids, "", false, StopReason::kStop, r.include_usage)
      .dump();
  (void)qrun::cli::serve::usage_chunk_json(endpoint, ids, 3, 1).dump();
}

// A chat request with tools, through every format: the messages as the template would see
// them, the grammar (which must parse), and the body itself read back as a model's reply.
void through_tool_formats(const CompletionRequest& r, const std::string& body) {
  if (!r.tools.active()) return;
  using qrun::ToolCallFormat;
  for (const ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                 ToolCallFormat::kMistral, ToolCallFormat::kGeneric}) {
    qrun::Result<nlohmann::ordered_json> messages = qrun::tool_messages(f, r.tools, r.messages);
    if (messages.ok())
      (void)messages->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    qrun::Result<std::optional<qrun::ToolGrammar>> g = qrun::tool_call_grammar(f, r.tools);
    if (g.ok() && g->has_value()) {
      qrun::Result<qrun::Grammar> parsed = qrun::parse_grammar((*g)->gbnf);
      QRUN_CHECK(parsed.ok(), "the tool-call grammar does not parse: %s",
                 parsed.error().message.c_str());
    }
    const qrun::ParsedReply reply = qrun::parse_tool_calls(f, body, r.tools);
    const qrun::cli::serve::ResponseIds ids{"chatcmpl-fuzz", 1, "fuzz.gguf"};
    (void)qrun::cli::serve::tool_calls_response_json(ids, reply, 3, 1)
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
    ApiError error;
    const std::optional<CompletionRequest> r =
        qrun::cli::serve::parse_request(body, endpoint, kVocab, &error);
    if (r.has_value()) {
      QRUN_CHECK(r->endpoint == endpoint, "parsed for another endpoint");
      respond(endpoint, *r);
      through_tool_formats(*r, body);
    } else {
      check_error(error);
    }
  }
  return 0;
}
