// `qrun serve`'s tool calling over real HTTP (see tests/support/serve_process.h): a required
// call in the generic format (a template that knows no tools) and in the Hermes format (the
// Qwen 2.5 template), streamed and not; the tools reaching the prompt; a follow-up turn
// carrying the call and its result; tool_choice none; and each malformed field a 400 naming
// it. The story model knows nothing of tools, so every call here is one the grammar forced:
// what is checked is the plumbing, not the model's judgement.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/serve_process.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

using Json = nlohmann::json;

// Enums only, so that a forced call ends (the grammar bounds each run of spaces too).
const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "set_mood", "description": "Sets the mood",
    "parameters": {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}},
      "required": ["mood"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "pick_friend", "parameters": {"type": "object",
    "properties": {"name": {"enum": ["Tom", "Lily"]}}, "required": ["name"],
    "additionalProperties": false}}}
])");

Json chat_body(const Json& tool_choice) {
  return {{"messages", {{{"role", "user"}, {"content", "How does the kid feel?"}}}},
          {"max_tokens", 600},  // the story model pads the JSON with spaces
          {"temperature", 0},
          {"tools", kTools},
          {"tool_choice", tool_choice}};
}

// The one call of a non-streamed reply, checked against kTools; `name` "" takes either tool.
Json expect_one_call(const Json& reply, std::string name) {
  const Json& choice = reply["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << reply.dump();
  EXPECT_TRUE(choice["message"]["content"].is_null()) << reply.dump();
  const Json& calls = choice["message"]["tool_calls"];
  if (!calls.is_array() || calls.size() != 1) {
    ADD_FAILURE() << reply.dump();
    return Json();
  }
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["id"].get<std::string>().rfind("call_", 0), 0u) << reply.dump();
  if (name.empty()) name = calls[0]["function"]["name"];
  EXPECT_EQ(calls[0]["function"]["name"], name) << reply.dump();
  const Json args = Json::parse(calls[0]["function"]["arguments"].get<std::string>());
  const std::vector<Json> allowed = name == "set_mood"
                                        ? std::vector<Json>{{{"mood", "happy"}}, {{"mood", "sad"}}}
                                        : std::vector<Json>{{{"name", "Tom"}}, {{"name", "Lily"}}};
  EXPECT_TRUE(args == allowed[0] || args == allowed[1]) << args;
  return calls[0];
}

// The streamed form of the same reply: one tool_calls delta with the same name and
// arguments, then finish_reason "tool_calls" and [DONE].
void expect_streamed_call(httplib::Client& c, Json body, const Json& call) {
  body["stream"] = true;
  const httplib::Result r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Events events = parse_sse(r->body);
  EXPECT_TRUE(events.done) << r->body;
  std::vector<Json> deltas;
  std::string finish;
  for (const Json& chunk : events.chunks) {
    const Json& choice = chunk["choices"][0];
    if (choice["delta"].contains("tool_calls")) deltas.push_back(choice["delta"]["tool_calls"][0]);
    if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
  }
  ASSERT_EQ(deltas.size(), 1u) << r->body;
  EXPECT_EQ(deltas[0]["index"], 0);
  EXPECT_EQ(deltas[0]["function"], call["function"]) << r->body;
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(streamed_text(r->body), "");
}

TEST(CliServeTools, GenericFormatForcesARequiredCall) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "--chat-template-file",
                  roles_template().string()});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json required = chat_body("required");
  const Json call = expect_one_call(post(c, "/v1/chat/completions", required, 200), "");
  expect_streamed_call(c, required, call);
  const Json named = chat_body({{"type", "function"}, {"function", {{"name", "pick_friend"}}}});
  const Json friend_call =
      expect_one_call(post(c, "/v1/chat/completions", named, 200), "pick_friend");
  expect_streamed_call(c, named, friend_call);

  // The tools and their instructions reach the prompt; tool_choice none leaves it as
  // without tools.
  Json plain = required;
  plain.erase("tools");
  plain.erase("tool_choice");
  const Json none_body = chat_body("none");
  plain["max_tokens"] = 4;
  Json none_short = none_body;
  none_short["max_tokens"] = 4;
  const Json without = post(c, "/v1/chat/completions", plain, 200);
  const Json none = post(c, "/v1/chat/completions", none_short, 200);
  EXPECT_EQ(none["usage"]["prompt_tokens"], without["usage"]["prompt_tokens"]);
  EXPECT_EQ(none["choices"][0]["message"]["content"], without["choices"][0]["message"]["content"]);
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  Json with_tools = required;
  with_tools["tool_choice"] = "auto";
  with_tools["max_tokens"] = 4;
  EXPECT_GT(post(c, "/v1/chat/completions", with_tools, 200)["usage"]["prompt_tokens"].get<int>(),
            without["usage"]["prompt_tokens"].get<int>() + 50);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServeTools, HermesTemplateRendersToolsAndTheFollowUp) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "--chat-template-file",
                  data_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json named = chat_body({{"type", "function"}, {"function", {{"name", "pick_friend"}}}});
  const Json call = expect_one_call(post(c, "/v1/chat/completions", named, 200), "pick_friend");
  expect_streamed_call(c, named, call);

  // The next turn carries the call (arguments as the string the server sent) and its
  // result; the template renders both, so the prompt grows by them.
  Json follow = named;
  follow["tool_choice"] = "auto";
  follow["max_tokens"] = 4;
  const int before = post(c, "/v1/chat/completions", follow, 200)["usage"]["prompt_tokens"];
  follow["messages"].push_back(
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}});
  follow["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "Lily is at the park."}});
  const Json after = post(c, "/v1/chat/completions", follow, 200);
  EXPECT_GT(after["usage"]["prompt_tokens"].get<int>(), before + 20) << after.dump();
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServeTools, MalformedFieldsAreRefusedByName) {
  ServeProcess s(
      {"-m", shared_model("stories260K.gguf"), "--chat-template-file", roles_template().string()});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto with = [&](const std::string& key, const Json& value) {
    Json body = chat_body("auto");
    body[key] = value;
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  expect_error(with("tools", "get_weather"), 400, "tools", "array");
  expect_error(with("tools", {{{"type", "retrieval"}}}), 400, "tools[0]", "\"function\"");
  // A "type" that is not a string is a wrong type like any other (it threw before).
  expect_error(with("tools", {{{"type", {{"name", "noop"}}}}}), 400, "tools[0]", "\"function\"");
  expect_error(with("tools", {{{"type", "function"}, {"function", {{"description", "x"}}}}}), 400,
               "tools[0].function", "'name'");
  expect_error(with("tools", {kTools[0], kTools[0]}), 400, "tools[1].function.name", "named twice");
  Json bad_params = kTools;
  bad_params[1]["function"]["parameters"] = 7;
  expect_error(with("tools", bad_params), 400, "tools[1].function.parameters", "object");
  bad_params[1]["function"]["parameters"] = {{"not", {{"type", "null"}}}};
  expect_error(with("tools", bad_params), 400, "tools", "tools[1].function.parameters");
  expect_error(with("tool_choice", "maybe"), 400, "tool_choice", "\"maybe\"");
  expect_error(with("tool_choice", {{"type", "function"}, {"function", {{"name", "fly"}}}}), 400,
               "tool_choice", "\"fly\"");
  expect_error(with("parallel_tool_calls", "yes"), 400, "parallel_tool_calls", "boolean");
  expect_error(with("response_format", {{"type", "json_object"}}), 400, "response_format",
               "'tools'");
  Json no_tools = chat_body("required");
  no_tools.erase("tools");
  expect_error(c.Post("/v1/chat/completions", no_tools.dump(), "application/json"), 400,
               "tool_choice", "'tools' is empty");
  Json bad_history = chat_body("auto");
  bad_history["messages"].push_back(
      {{"role", "assistant"}, {"tool_calls", {{{"function", {{"arguments", "{}"}}}}}}});
  expect_error(c.Post("/v1/chat/completions", bad_history.dump(), "application/json"), 400,
               "messages", "messages[1].tool_calls[0]");
  EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace qrun::test
