// Tool calling (core/tool_calls.h): the format each shared template implies, the parse of
// replies in every format (well-formed, drifted and partial), the messages each format's
// template sees (real templates rendering tools and earlier calls), and the grammars that
// hold a reply to a call, checked on sentences they must accept and reject.
#include "core/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/grammar/grammar.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

using Json = nlohmann::ordered_json;

ChatTemplate shared_template(const std::string& name) {
  const std::string path = test::data_path("templates/" + name + ".jinja");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Result<ChatTemplate> t = ChatTemplate::parse(text.str(), path);
  EXPECT_TRUE(t.ok()) << path;
  return std::move(*t);
}

ToolSet weather_tools(ToolChoice::Mode mode = ToolChoice::Mode::kAuto, bool parallel = false) {
  ToolSet t;
  t.tools = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "unit": {"$ref": "#/$defs/unit"}}, "required": ["city"],
        "$defs": {"unit": {"enum": ["C", "F"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
  ])");
  t.choice.mode = mode;
  t.parallel = parallel;
  return t;
}

TEST(ToolCalls, DetectsTheFormatFromTheTemplate) {
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
      {"Qwen-QwQ-32B", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
      {"unsloth-mistral-Devstral-Small-2507", ToolCallFormat::kMistral},
      // XML calls inside <tool_call>, and templates without tools, take the generic format.
      {"Qwen3-Coder", ToolCallFormat::kGeneric},
      {"GLM-4.6", ToolCallFormat::kGeneric},
      {"google-gemma-2-2b-it", ToolCallFormat::kGeneric},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ToolCallFormat::kGeneric},
  };
  for (const auto& [name, format] : cases) {
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(shared_template(name))),
              std::string(tool_call_format_name(format)))
        << name;
  }
}

TEST(ToolCalls, ParsesHermesBlocks) {
  const ToolSet tools = weather_tools();
  const ParsedReply r = parse_tool_calls(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "\"{\\\"zone\\\": \\\"CET\\\"}\"}\n</tool_call>",
      tools);
  EXPECT_EQ(r.content, "Let me check.\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, R"({"zone":"CET"})");  // a string holding JSON, unwrapped
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.calls[0].id.size(), 29u);
  EXPECT_NE(r.calls[0].id, r.calls[1].id);

  // Generation ends at the end-of-turn token, which may come before the closing tag.
  const ParsedReply open = parse_tool_calls(
      ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n", tools);
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_EQ(open.content, "");
  EXPECT_EQ(open.calls[0].arguments, "{}");

  // Drifted output stays the client's to see, as content.
  for (const char* bad :
       {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\n",
        "<tool_call>not json</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"x\", \"arguments\": 3}</tool_call>"}) {
    const ParsedReply r2 = parse_tool_calls(ToolCallFormat::kHermes, bad, tools);
    EXPECT_TRUE(r2.calls.empty()) << bad;
    EXPECT_EQ(r2.content, bad);
  }
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kHermes, "Just text.", tools).content, "Just text.");
}

// What streams before the calls: text up to the opener, holding back any tail that could
// still become it.
TEST(ToolCalls, ContentBeforeCallsHoldsBackAPossibleOpener) {
  const std::string_view opener = tool_call_opener(ToolCallFormat::kHermes);
  EXPECT_EQ(content_before_calls("Hello", opener), 5u);
  EXPECT_EQ(content_before_calls("Hello <", opener), 6u);
  EXPECT_EQ(content_before_calls("Hello <tool_ca", opener), 6u);
  EXPECT_EQ(content_before_calls("Hello <tool_call>{\"na", opener), 6u);
  EXPECT_EQ(content_before_calls("a < b", opener), 5u);      // "< b" cannot become it
  EXPECT_EQ(content_before_calls("<tool_cal", opener), 0u);  // nothing sure yet
  EXPECT_EQ(content_before_calls("x<tool_calm", opener), 11u);
  EXPECT_EQ(content_before_calls("{\"name\"", ""), 7u);  // no opener: all of it
  EXPECT_EQ(content_before_calls("ok [TOOL_", tool_call_opener(ToolCallFormat::kMistral)), 3u);
}

TEST(ToolCalls, ParsesLlama3OnlyForOfferedFunctions) {
  const ToolSet tools = weather_tools();
  const ParsedReply r = parse_tool_calls(
      ToolCallFormat::kLlama3,
      " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"C\"}}", tools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo","unit":"C"})");
  // JSON that names no offered function is an answer.
  const std::string answer = R"({"name": "Ada", "parameters": {}})";
  EXPECT_TRUE(parse_tool_calls(ToolCallFormat::kLlama3, answer, tools).calls.empty());
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kLlama3, answer, tools).content, answer);
}

TEST(ToolCalls, ParsesBothMistralForms) {
  const ToolSet tools = weather_tools();
  const ParsedReply nemo = parse_tool_calls(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}, {\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
      tools);
  ASSERT_EQ(nemo.calls.size(), 2u);
  EXPECT_EQ(nemo.calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(nemo.calls[0].id.size(), 9u);  // Mistral's template refuses other ids
  for (char c : nemo.calls[0].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));

  const ParsedReply small = parse_tool_calls(
      ToolCallFormat::kMistral,
      "Sure.[TOOL_CALLS]get_time[ARGS]{\"zone\": \"UTC\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": "
      "\"a]}\"}",
      tools);
  EXPECT_EQ(small.content, "Sure.");
  ASSERT_EQ(small.calls.size(), 2u);
  EXPECT_EQ(small.calls[0].name, "get_time");
  EXPECT_EQ(small.calls[1].arguments, R"({"city":"a]}"})");

  // The bare array the required-call grammar writes.
  const ParsedReply bare = parse_tool_calls(ToolCallFormat::kMistral,
                                            "[{\"name\":\"get_time\",\"arguments\":{}}]", tools);
  ASSERT_EQ(bare.calls.size(), 1u);
  for (const char* bad : {"[TOOL_CALLS][{\"name\": \"get_time\"", "[TOOL_CALLS]get_time{}",
                          "[1, 2]", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] tail"}) {
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::kMistral, bad, tools).calls.empty()) << bad;
  }
}

TEST(ToolCalls, ParsesGenericReplies) {
  const ToolSet tools = weather_tools();
  const ParsedReply call = parse_tool_calls(
      ToolCallFormat::kGeneric,
      R"({"tool_call": {"name": "get_weather", "arguments": {"city": "Lima"}}})", tools);
  ASSERT_EQ(call.calls.size(), 1u);
  EXPECT_EQ(call.calls[0].arguments, R"({"city":"Lima"})");
  const ParsedReply many =
      parse_tool_calls(ToolCallFormat::kGeneric,
                       R"({"tool_calls": [{"name": "get_time", "arguments": {"zone": "A"}}, )"
                       R"({"name": "get_time", "arguments": {"zone": "B"}}]})",
                       tools);
  EXPECT_EQ(many.calls.size(), 2u);
  const ParsedReply answer =
      parse_tool_calls(ToolCallFormat::kGeneric, R"({"response": "It is \"sunny\"."})", tools);
  EXPECT_TRUE(answer.calls.empty());
  EXPECT_EQ(answer.content, "It is \"sunny\".");
  // Cut short (the token budget): the text as written.
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kGeneric, R"({"response": "It is)", tools).content,
            R"({"response": "It is)");
}

const Json kHistory = Json::parse(R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefghi", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "abcdefghi", "content": "18 C, clear"}
])");

Json flattened_history() {
  Json m = kHistory;
  m[1]["content"] = "";  // as the server hands messages over (null content made "")
  return m;
}

TEST(ToolCalls, KnownTemplatesRenderTheToolsAndTheHistory) {
  const ToolSet tools = weather_tools();
  for (const char* name : {"Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
                           "mistralai-Mistral-Nemo-Instruct-2407"}) {
    const ChatTemplate t = shared_template(name);
    const ToolCallFormat format = detect_tool_call_format(t);
    Result<Json> messages = tool_messages(format, tools, flattened_history());
    ASSERT_TRUE(messages.ok()) << messages.error().message;
    // The string arguments became the object the templates' tojson expects.
    EXPECT_TRUE((*messages)[1]["tool_calls"][0]["function"]["arguments"].is_object());
    ChatRenderOptions options;
    options.tools = tools.tools;
    Result<std::string> text = t.render_json(*messages, options);
    ASSERT_TRUE(text.ok()) << name << ": " << text.error().message;
    EXPECT_NE(text->find("get_time"), std::string::npos) << name << ":\n" << *text;
    EXPECT_NE(text->find("Weather in a city"), std::string::npos) << name;
    EXPECT_NE(text->find("18 C, clear"), std::string::npos) << name;
    EXPECT_NE(text->find("\"city\": \"Paris\""), std::string::npos) << name << ":\n" << *text;
  }
}

TEST(ToolCalls, GenericMessagesFitTemplatesThatKnowOnlyTwoRoles) {
  ToolSet tools = weather_tools();
  Json history = flattened_history();
  history.push_back({{"role", "tool"}, {"tool_call_id", "x"}, {"content", "second"}});
  Result<Json> messages = tool_messages(ToolCallFormat::kGeneric, tools, history);
  ASSERT_TRUE(messages.ok()) << messages.error().message;
  ASSERT_EQ(messages->size(), 4u) << messages->dump(1);
  EXPECT_EQ((*messages)[0]["role"], "system");
  EXPECT_NE((*messages)[0]["content"].get<std::string>().find("get_weather"), std::string::npos);
  EXPECT_EQ((*messages)[2]["role"], "assistant");
  EXPECT_EQ(
      Json::parse((*messages)[2]["content"].get<std::string>()),
      Json::parse(R"({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})"));
  EXPECT_EQ((*messages)[3]["role"], "user");  // both results in one message
  const Json results = Json::parse((*messages)[3]["content"].get<std::string>());
  EXPECT_EQ(results["tool_responses"].size(), 2u) << results.dump();
  // Gemma 2's template refuses system messages and anything but alternating user and
  // assistant turns: the instructions open the first user message.
  const ChatTemplate gemma = shared_template("google-gemma-2-2b-it");
  EXPECT_FALSE(gemma.supports_system_role());
  EXPECT_TRUE(shared_template("Qwen-Qwen2.5-7B-Instruct").supports_system_role());
  Result<Json> for_gemma =
      tool_messages(ToolCallFormat::kGeneric, tools, history, gemma.supports_system_role());
  ASSERT_TRUE(for_gemma.ok());
  ASSERT_EQ(for_gemma->size(), 3u) << for_gemma->dump(1);
  const std::string first = (*for_gemma)[0]["content"];
  EXPECT_EQ(first.rfind("You have access to the following tools", 0), 0u) << first;
  EXPECT_EQ(first.substr(first.size() - 19), "\n\nWeather in Paris?");
  Result<std::string> text = gemma.render_json(*for_gemma, ChatRenderOptions{});
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_NE(text->find("tool_responses"), std::string::npos);

  // A system message of the client's keeps its text, first.
  Json with_system = Json::array({{{"role", "system"}, {"content", "Be brief."}}});
  with_system.push_back(history[0]);
  Result<Json> m2 = tool_messages(ToolCallFormat::kGeneric, tools, with_system);
  ASSERT_TRUE(m2.ok());
  ASSERT_EQ(m2->size(), 2u);
  EXPECT_EQ((*m2)[0]["content"].get<std::string>().rfind("Be brief.\n\n", 0), 0u);

  Json bad = history;
  bad[1]["tool_calls"][0] = {{"function", {{"arguments", "{}"}}}};
  Result<Json> refused = tool_messages(ToolCallFormat::kHermes, tools, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("messages[1].tool_calls[0]"), std::string::npos);
}

bool matches(const std::string& gbnf, const std::string& s) {
  Result<Grammar> g = parse_grammar(gbnf);
  EXPECT_TRUE(g.ok()) << g.error().message << "\n" << gbnf;
  if (!g.ok()) return false;
  Result<GrammarMatcher> m = GrammarMatcher::create(std::make_shared<const Grammar>(std::move(*g)));
  EXPECT_TRUE(m.ok());
  Result<bool> ok = m->accept(s);
  return ok.ok() && *ok && m->can_end();
}

std::string grammar_for(ToolCallFormat format, const ToolSet& tools,
                        const std::string& trigger = "") {
  Result<std::optional<ToolGrammar>> g = tool_call_grammar(format, tools);
  EXPECT_TRUE(g.ok()) << g.error().message;
  EXPECT_TRUE(g.ok() && g->has_value());
  if (!g.ok() || !*g) return "";
  EXPECT_EQ((*g)->trigger, trigger);
  return (*g)->gbnf;
}

TEST(ToolCalls, GenericGrammarAllowsCallsOrAResponse) {
  const std::string g = grammar_for(ToolCallFormat::kGeneric, weather_tools());
  EXPECT_TRUE(matches(g, R"({"tool_call": {"name": "get_weather", "arguments": {"city": "X"}}})"));
  // The $ref inside the tool's parameters still resolves (to the tool's own $defs).
  EXPECT_TRUE(matches(
      g, R"({"tool_call": {"name": "get_weather", "arguments": {"city": "X", "unit": "F"}}})"));
  EXPECT_FALSE(matches(
      g, R"({"tool_call": {"name": "get_weather", "arguments": {"city": "X", "unit": "K"}}})"));
  EXPECT_TRUE(matches(g, R"({"response": "hello"})"));
  EXPECT_FALSE(matches(g, R"({"tool_call": {"name": "launch", "arguments": {}}})"));
  EXPECT_FALSE(matches(g, R"({"tool_call": {"name": "get_time", "arguments": {}}})"));
  EXPECT_FALSE(matches(g, "hello"));

  const std::string required =
      grammar_for(ToolCallFormat::kGeneric, weather_tools(ToolChoice::Mode::kRequired, true));
  EXPECT_FALSE(matches(required, R"({"response": "hello"})"));
  EXPECT_TRUE(matches(required, R"({"tool_calls": [{"name": "get_time", "arguments": )"
                                R"({"zone": "Z"}}, {"name": "get_time", "arguments": )"
                                R"({"zone": "Y"}}]})"));

  ToolSet named = weather_tools(ToolChoice::Mode::kFunction);
  named.choice.function = "get_time";
  const std::string only = grammar_for(ToolCallFormat::kGeneric, named);
  EXPECT_TRUE(matches(only, R"({"tool_call": {"name": "get_time", "arguments": {"zone": "Z"}}})"));
  EXPECT_FALSE(
      matches(only, R"({"tool_call": {"name": "get_weather", "arguments": {"city": "X"}}})"));
}

TEST(ToolCalls, KnownFormatsConstrainRequiredCallsAndAutoOnesOnceTheirCallOpens) {
  // Under auto, Llama 3's bare JSON is held from {"name" on, Mistral's array after its
  // [TOOL_CALLS] token (the grammar stage fires on the control token).
  const std::string llama_lazy =
      grammar_for(ToolCallFormat::kLlama3, weather_tools(), /*trigger=*/R"({"name")");
  EXPECT_TRUE(matches(llama_lazy, R"({"name": "get_weather", "parameters": {"city": "X"}})"));
  EXPECT_FALSE(matches(llama_lazy, R"({"name": "get_weather", "parameters": {}})"));
  const std::string mistral_lazy =
      grammar_for(ToolCallFormat::kMistral, weather_tools(), /*trigger=*/"[TOOL_CALLS]");
  EXPECT_TRUE(matches(mistral_lazy, R"([{"name": "get_time", "arguments": {"zone": "Z"}}])"));
  const ToolSet off = weather_tools(ToolChoice::Mode::kNone);
  EXPECT_FALSE(tool_call_grammar(ToolCallFormat::kGeneric, off)->has_value());
  // Under auto a Hermes reply is free until <tool_call>, then held to the calls.
  const std::string lazy =
      grammar_for(ToolCallFormat::kHermes, weather_tools(), /*trigger=*/"<tool_call>");
  EXPECT_TRUE(matches(lazy, R"(<tool_call>{"name": "get_time", "arguments": {"zone": "Z"}})"
                            R"(</tool_call>)"));
  EXPECT_FALSE(matches(lazy,
                       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                       "</tool_call>"));  // zone is required

  const ToolSet required = weather_tools(ToolChoice::Mode::kRequired);
  const std::string hermes = grammar_for(ToolCallFormat::kHermes, required);
  EXPECT_TRUE(matches(hermes,
                      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": "
                      "\"Z\"}}\n</tool_call>"));
  EXPECT_FALSE(matches(hermes,
                       "Sure. <tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                       "{\"zone\": \"Z\"}}\n</tool_call>"));
  const std::string llama = grammar_for(ToolCallFormat::kLlama3, required);
  EXPECT_TRUE(matches(llama, R"({"name": "get_weather", "parameters": {"city": "X"}})"));
  EXPECT_FALSE(matches(llama, R"({"name": "get_weather", "arguments": {"city": "X"}})"));
  const std::string mistral =
      grammar_for(ToolCallFormat::kMistral, weather_tools(ToolChoice::Mode::kRequired, true));
  EXPECT_TRUE(matches(mistral, R"([{"name": "get_time", "arguments": {"zone": "Z"}},)"
                               R"({"name": "get_time", "arguments": {"zone": "Q"}}])"));
  // And what each grammar writes, the parse reads back as calls.
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kMistral,
                             R"([{"name": "get_time", "arguments": {"zone": "Z"}}])", required)
                .calls.size(),
            1u);

  ToolSet bad = weather_tools(ToolChoice::Mode::kRequired);
  bad.tools[0]["function"]["parameters"] = Json::parse(R"({"not": {"type": "string"}})");
  Result<std::optional<ToolGrammar>> refused = tool_call_grammar(ToolCallFormat::kHermes, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("'not'"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace qrun
