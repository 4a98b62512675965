// `qrun serve` over real HTTP: each test starts `qrun serve --port 0` on a shared tiny model
// (tests/support/serve_process.h) and talks to it with cpp-httplib's client. Covers the
// routes, greedy output equal to `qrun run`, streaming, stop strings, usage, every error
// status, concurrency, a disconnect mid-stream, and a clean exit on SIGTERM. Every wait has a
// deadline, so a hung server fails the test instead of stalling CI.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

const char* kPrompt = "Once upon a time";

TEST(CliServe, HealthModelsAndUnknownRoutes) {
  ServeProcess s({"-m", shared_model("stories260K.gguf")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const httplib::Result health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");
  const httplib::Result models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const Json m = Json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "stories260K.gguf");
  const httplib::Result missing = c.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["code"], "not_found");
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A port already in use is exit code 3 with one line naming the address; bad flags are 2.
TEST(CliServe, BusyPortAndBadFlags) {
  ServeProcess s({"-m", shared_model("stories260K.gguf")});
  ASSERT_SERVING(s);
  const ProcessResult busy =
      run_process({qrun_binary().string(), "serve", "-m", shared_model("stories260K.gguf"),
                   "--port", std::to_string(s.port()), "-q"},
                  StdinKind::kDevNull, "", 30s);
  EXPECT_EQ(busy.exit_code, 3) << busy.err;
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:" + std::to_string(s.port())),
            std::string::npos)
      << busy.err;
  const ProcessResult bad = run_process(
      {qrun_binary().string(), "serve", "-m", shared_model("stories260K.gguf"), "-np", "0"},
      StdinKind::kDevNull, "", 30s);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  const ProcessResult block = run_process({qrun_binary().string(), "serve", "-m",
                                           shared_model("stories260K.gguf"), "--block-size", "48"},
                                          StdinKind::kDevNull, "", 30s);
  EXPECT_EQ(block.exit_code, 2) << block.err;
  EXPECT_NE(block.err.find("--block-size 48: not a power of two"), std::string::npos) << block.err;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// The raw prompt through /v1/completions is tokenized and generated exactly as `qrun run`
// does: same text, same token counts, finish_reason "length" at max_tokens.
TEST(CliServe, GreedyCompletionEqualsQrunRun) {
  const std::string path = shared_model("TinyLLama-v0-5M-Q4_0.gguf");
  const Json expected = greedy_run(path, kPrompt, 12);
  ASSERT_EQ(expected["n_tokens"], 12) << expected.dump();
  ServeProcess s({"-m", path});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json r = post(c, "/v1/completions",
                      {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}}, 200);
  EXPECT_EQ(r["object"], "text_completion");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"], expected["text"]);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], expected["n_prompt_tokens"]);
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["usage"]["total_tokens"], expected["n_prompt_tokens"].get<int>() + 12);

  // The same, streamed: the pieces concatenate to the same text, the last chunk carries
  // finish_reason, the usage chunk has empty choices, and [DONE] ends the stream.
  const httplib::Result st = c.Post("/v1/completions",
                                    Json{{"prompt", kPrompt},
                                         {"max_tokens", 12},
                                         {"temperature", 0},
                                         {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}}
                                        .dump(),
                                    "application/json");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->status, 200);
  EXPECT_EQ(st->get_header_value("Content-Type"), "text/event-stream");
  const Events e = parse_sse(st->body);
  EXPECT_TRUE(e.done) << st->body;
  ASSERT_GE(e.chunks.size(), 3u) << st->body;
  std::string text;
  for (size_t i = 0; i + 1 < e.chunks.size(); ++i) {
    EXPECT_EQ(e.chunks[i]["object"], "text_completion");
    EXPECT_TRUE(e.chunks[i]["usage"].is_null());
    text += e.chunks[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, expected["text"]);
  EXPECT_EQ(e.chunks[e.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  const Json& usage_chunk = e.chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], r["usage"]);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// Chat messages go through the chat template: the reply equals a completion of the rendered
// conversation. Streamed, the first chunk carries the role and the pieces add up.
TEST(CliServe, ChatRendersThroughTheTemplate) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "--chat-template-file",
                  roles_template().string()});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json chat_body = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", kPrompt}}}}}}},
      {"max_tokens", 8},
      {"temperature", 0}};
  const Json chat = post(c, "/v1/chat/completions", chat_body, 200);
  const Json plain =
      post(c, "/v1/completions",
           {{"prompt", std::string("system: Be brief.\nuser: ") + kPrompt + "\nassistant:"},
            {"max_tokens", 8},
            {"temperature", 0}},
           200);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], plain["choices"][0]["text"]);
  EXPECT_EQ(chat["usage"], plain["usage"]);
  EXPECT_FALSE(chat["choices"][0]["message"]["content"].get<std::string>().empty());

  Json stream_body = chat_body;
  stream_body["stream"] = true;
  const httplib::Result st = c.Post("/v1/chat/completions", stream_body.dump(), "application/json");
  ASSERT_TRUE(st);
  const Events e = parse_sse(st->body);
  EXPECT_TRUE(e.done);
  ASSERT_GE(e.chunks.size(), 2u);
  EXPECT_EQ(e.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(e.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(e.chunks[0].contains("usage"));  // no include_usage
  EXPECT_EQ(streamed_text(st->body), chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "length");

  // A content part that is not text, or whose "type" is not even a string, is refused by name.
  for (const Json& type : {Json("image_url"), Json{{"name", "text"}}}) {
    Json bad = chat_body;
    bad["messages"][1]["content"][0]["type"] = type;
    expect_error(c.Post("/v1/chat/completions", bad.dump(), "application/json"), 400,
                 "messages[1].content", "text content parts");
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A stop string cuts the text before it and finishes with "stop"; a list works too, and a
// string that never appears changes nothing.
TEST(CliServe, StopStrings) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json body = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string full = post(c, "/v1/completions", body, 200)["choices"][0]["text"];
  const size_t cut = full.find(' ', full.size() / 2);
  ASSERT_NE(cut, std::string::npos) << full;
  const std::string stop = full.substr(cut, 4);
  const std::string expected = full.substr(0, full.find(stop));
  for (const Json& stops : {Json(stop), Json::array({"never-there", stop})}) {
    Json b = body;
    b["stop"] = stops;
    const Json r = post(c, "/v1/completions", b, 200);
    EXPECT_EQ(r["choices"][0]["text"], expected) << stops.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 24);
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A seed makes a sampled reply reproducible; penalties reach the sampler (a strong
// frequency penalty changes a greedy reply that repeats words).
TEST(CliServe, SeedAndPenaltiesReachTheSampler) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto text = [&](const Json& extra) {
    Json body = {{"prompt", kPrompt}, {"max_tokens", 24}};
    body.update(extra);
    return post(c, "/v1/completions", body, 200)["choices"][0]["text"].get<std::string>();
  };
  const Json sampled = {{"temperature", 1.5}, {"top_k", 0}, {"top_p", 1}, {"min_p", 0}};
  Json seeded = sampled;
  seeded["seed"] = 1234;
  EXPECT_EQ(text(seeded), text(seeded));
  std::set<std::string> distinct;
  for (int seed = 0; seed < 4; ++seed) {
    Json b = sampled;
    b["seed"] = seed;
    distinct.insert(text(b));
  }
  EXPECT_GT(distinct.size(), 1u);
  const Json greedy = {{"temperature", 0}, {"max_tokens", 40}};
  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    Json b = greedy;
    b[penalty] = 2;
    EXPECT_NE(text(b), text(greedy)) << penalty;
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServe, ErrorsAreOpenAiErrorObjects) {
  ServeProcess s({"-m", shared_model("stories260K.gguf"), "-c", "64", "--max-body-size", "4096"});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto post_raw = [&](const std::string& path, const std::string& body) {
    return c.Post(path.c_str(), body, "application/json");
  };
  expect_error(post_raw("/v1/completions", "{\"prompt\": "), 400, "", "not valid JSON");
  expect_error(post_raw("/v1/completions", "[1]"), 400, "", "JSON object");
  expect_error(post_raw("/v1/completions", R"({"max_tokens": 3})"), 400, "prompt", "required");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "temperature": "hot"})"), 400,
               "temperature", "must be a number");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "max_tokens": 1.5})"), 400,
               "max_tokens", "integer");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "top_p": 3})"), 400, "top_p",
               "outside");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "stop": 7})"), 400, "stop", "string");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "stream": "yes"})"), 400, "stream",
               "boolean");
  expect_error(post_raw("/v1/completions", R"({"prompt": "a", "n": 2})"), 400, "n", "must be 1");
  expect_error(post_raw("/v1/chat/completions", R"({"messages": "hi"})"), 400, "messages", "array");
  expect_error(post_raw("/v1/chat/completions", R"({"messages": [{"content": "hi"}]})"), 400,
               "messages[0]", "role");
  // stories260K has no chat template and none was given.
  expect_error(post_raw("/v1/chat/completions", R"({"messages": [{"role": "user", "content":
               "hi"}]})"),
               400, "", "--chat-template-file");
  // -c 64: a prompt of more tokens is refused with both numbers.
  std::string long_prompt;
  for (int i = 0; i < 80; ++i) long_prompt += "the cat ";
  const httplib::Result too_long =
      post_raw("/v1/completions", Json{{"prompt", long_prompt}}.dump());
  expect_error(too_long, 400, "prompt", "holds 64");
  EXPECT_EQ(Json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
  // --max-body-size 4096.
  const std::string big = Json{{"prompt", std::string(5000, 'a')}}.dump();
  expect_error(post_raw("/v1/completions", big), 413, "", "4096 bytes");
  // After all that the server still answers.
  post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServe, ApiKey) {
  ServeProcess s({"-m", shared_model("stories260K.gguf"), "--api-key", "sekrit"});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json body = {{"prompt", "a"}, {"max_tokens", 2}};
  expect_error(c.Post("/v1/completions", body.dump(), "application/json"), 401, "",
               "missing API key");
  expect_error(c.Get("/v1/models"), 401, "", "missing API key");
  c.set_bearer_token_auth("wrong");
  expect_error(c.Post("/v1/completions", body.dump(), "application/json"), 401, "",
               "invalid API key");
  c.set_bearer_token_auth("sekrit");
  post(c, "/v1/completions", body, 200);
  httplib::Client anonymous = s.client();
  const httplib::Result health = anonymous.Get("/health");  // open, for load balancers
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// -np 4 and n_clients clients at once (prompts of different lengths, half of them
// streamed, different lengths asked): all finish with 200, and each gets exactly what it
// gets alone.
void expect_concurrent_requests_as_alone(size_t n_clients) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "4", "-c", "1024"});
  ASSERT_SERVING(s);
  const std::vector<std::string> starts = {"Once upon a time",  "The dog",     "Lily and Tom",
                                           "One day, a little", "The sun was", "Mom said",
                                           "There was a big",   "A bird"};
  std::vector<std::string> prompts;
  for (size_t i = 0; i < n_clients; ++i) {
    prompts.push_back(starts[i % starts.size()] + std::string(i / starts.size(), ' ') +
                      (i < starts.size() ? "" : " and then"));
  }
  auto body = [&](size_t i) {
    return Json{{"prompt", prompts[i]},
                {"max_tokens", 10 + static_cast<int>(i % 12)},
                {"temperature", 0},
                {"stream", i % 2 == 1}};
  };
  auto text_of = [](const httplib::Result& r, bool stream) {
    if (!stream) return Json::parse(r->body)["choices"][0]["text"].get<std::string>();
    return streamed_text(r->body);
  };
  std::vector<std::string> alone;
  httplib::Client c = s.client();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const httplib::Result r = c.Post("/v1/completions", body(i).dump(), "application/json");
    ASSERT_TRUE(r);
    alone.push_back(text_of(r, i % 2 == 1));
  }
  std::vector<std::future<std::pair<int, std::string>>> futures;
  for (size_t i = 0; i < prompts.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      httplib::Client ci = s.client();
      const httplib::Result r = ci.Post("/v1/completions", body(i).dump(), "application/json");
      if (!r) return std::make_pair(-1, "no response: " + httplib::to_string(r.error()));
      return std::make_pair(r->status, text_of(r, i % 2 == 1));
    }));
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    ASSERT_EQ(futures[i].wait_for(120s), std::future_status::ready);
    const auto [status, text] = futures[i].get();
    EXPECT_EQ(status, 200) << i;
    EXPECT_EQ(text, alone[i]) << prompts[i];
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServe, EightConcurrentRequests) {
  expect_concurrent_requests_as_alone(8);
}

// The issue's 32 clients at once: 28 of them wait in the queue while 4 run.
TEST(CliServe, ThirtyTwoConcurrentRequests) {
  expect_concurrent_requests_as_alone(32);
}

// A burst of connections at once (clients that open theirs together, as a load balancer
// or a batch script does) is queued by the kernel, not reset: with the listen backlog of 5
// that the HTTP library passes, 29 to 94 of these 128 clients got no response.
TEST(CliServe, ABurstOfConnectionsIsAnsweredInFull) {
  ServeProcess s({"-m", shared_model("stories260K.gguf"), "-np", "2", "--max-queue", "128"});
  ASSERT_SERVING(s);
  constexpr int kClients = 128;
  std::vector<std::future<std::string>> futures;
  std::atomic<int> ready{0};
  for (int i = 0; i < kClients; ++i) {
    futures.push_back(std::async(std::launch::async, [&] {
      httplib::Client c = s.client();
      ready.fetch_add(1);
      while (ready.load() < kClients) std::this_thread::yield();  // connect together
      const httplib::Result r =
          c.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 1})", "application/json");
      if (!r) return "no response: " + httplib::to_string(r.error());
      return std::to_string(r->status);
    }));
  }
  int answered = 0;
  for (std::future<std::string>& f : futures) {
    ASSERT_EQ(f.wait_for(120s), std::future_status::ready);
    const std::string got = f.get();
    EXPECT_EQ(got, "200");
    answered += got == "200";
  }
  EXPECT_EQ(answered, kClients);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// -c is one paged KV cache that the sequences share (--kv-unified, the default on the
// CPU): with -np 4 -c 256 a prompt of more than 256 / 4 tokens is answered, as `qrun run`
// answers it; --no-kv-unified splits -c into four slots of 64 and refuses it.
TEST(CliServe, SequencesShareOnePagedKvCache) {
  const std::string path = shared_model("TinyLLama-v0-5M-Q4_0.gguf");
  std::string prompt = kPrompt;
  for (int i = 0; i < 10; ++i) prompt += " The little dog ran to the park.";
  const Json expected = greedy_run(path, prompt, 16);
  ASSERT_GT(expected["n_prompt_tokens"].get<int>(), 64) << expected.dump();
  const Json body = {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}};
  {
    ServeProcess s({"-m", path, "-np", "4", "-c", "256"});
    ASSERT_SERVING(s);
    EXPECT_NE(s.log().find("4 sequences of up to 256 tokens sharing a paged KV cache of 8 "
                           "blocks of 32 tokens"),
              std::string::npos)
        << s.log();
    httplib::Client c = s.client();
    const Json r = post(c, "/v1/completions", body, 200);
    EXPECT_EQ(r["choices"][0]["text"], expected["text"]);
    EXPECT_EQ(r["usage"]["prompt_tokens"], expected["n_prompt_tokens"]);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  ServeProcess split({"-m", path, "-np", "4", "-c", "256", "--no-kv-unified"});
  ASSERT_SERVING(split);
  httplib::Client c = split.client();
  expect_error(c.Post("/v1/completions", body.dump(), "application/json"), 400, "prompt",
               "holds 64");
  EXPECT_EQ(split.stop(), 0) << split.log();
}

// Prefix caching over HTTP: the same long prompt twice; the second reply reuses whole blocks
// of the first's prompt (usage.prompt_tokens_details.cached_tokens, a multiple of the block
// size, at least two tokens left to feed), gives the same text, and /metrics counts the
// tokens. --no-enable-prefix-caching reuses nothing.
TEST(CliServe, APromptSharingWholeBlocksReusesThem) {
  const std::string path = shared_model("TinyLLama-v0-5M-Q4_0.gguf");
  std::string prompt = kPrompt;
  for (int i = 0; i < 10; ++i) prompt += " The little dog ran to the park.";
  const Json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  for (const bool caching : {true, false}) {
    std::vector<std::string> args = {"-m", path, "-np", "2", "-c", "512"};
    if (!caching) args.push_back("--no-enable-prefix-caching");
    ServeProcess s(args);
    ASSERT_SERVING(s);
    httplib::Client c = s.client();
    const Json cold = post(c, "/v1/completions", body, 200);
    const Json warm = post(c, "/v1/completions", body, 200);
    const int n_prompt = cold["usage"]["prompt_tokens"];
    ASSERT_GT(n_prompt, 66);
    EXPECT_EQ(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const int cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (caching) {
      EXPECT_EQ(cached % 32, 0);
      EXPECT_GE(cached, 64);
      EXPECT_LE(cached, n_prompt - 2);
    } else {
      EXPECT_EQ(cached, 0);
    }
    EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
    const httplib::Result m = c.Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\nqrun_prompt_tokens_cached_total " + std::to_string(cached) + "\n"),
              std::string::npos)
        << m->body;
    EXPECT_NE(
        m->body.find("\nqrun_prefix_cache_hits_total " + std::to_string(caching ? 1 : 0) + "\n"),
        std::string::npos)
        << m->body;
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
}

// A chat's second turn starts with its first turn (system prompt, user message): it reuses
// the blocks the first turn cached, and the chat usage says so.
TEST(CliServe, AChatsNextTurnReusesTheEarlierTurnsBlocks) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "--chat-template-file",
                  roles_template().string()});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  std::string system = "Tell stories.";
  for (int i = 0; i < 10; ++i) system += " The little dog ran to the park.";
  Json messages = {{{"role", "system"}, {"content", system}},
                   {{"role", "user"}, {"content", kPrompt}}};
  const Json first =
      post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}}, 200);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  messages.push_back(
      {{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "And then?"}});
  const Json second =
      post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}}, 200);
  const int cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(cached, 64) << second.dump();
  EXPECT_EQ(cached % 32, 0);
  EXPECT_LT(cached, first["usage"]["prompt_tokens"].get<int>() + 8);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// -np 1 and no queue: while one long request runs, the others are refused at once with 503,
// Retry-After and code "overloaded"; the server serves again afterwards.
TEST(CliServe, OverloadIs503WithRetryAfter) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "1", "--max-queue", "0",
                  "-c", "1024", "--ignore-eos"});
  ASSERT_SERVING(s);
  const Json body = {{"prompt", kPrompt}, {"max_tokens", 600}, {"temperature", 0}};
  std::vector<std::future<httplib::Result>> futures;
  for (int i = 0; i < 8; ++i) {
    futures.push_back(std::async(std::launch::async, [&] {
      httplib::Client c = s.client();
      return c.Post("/v1/completions", body.dump(), "application/json");
    }));
  }
  int ok = 0, refused = 0;
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(120s), std::future_status::ready);
    const httplib::Result r = f.get();
    ASSERT_TRUE(r);
    if (r->status == 200) {
      ++ok;
      EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 600);
    } else {
      expect_error(r, 503, "", "queue is full");
      EXPECT_EQ(r->get_header_value("Retry-After"), "1");
      EXPECT_EQ(Json::parse(r->body)["error"]["code"], "overloaded");
      ++refused;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  httplib::Client c = s.client();
  post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A client that goes away mid-stream stops its generation and frees the only slot: the next
// request is answered long before the abandoned generation would have finished (its full
// length is timed first, on the same server).
TEST(CliServe, DisconnectMidStreamFreesTheSlot) {
  ServeProcess s(
      {"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "1", "-c", "1024", "--ignore-eos"});
  ASSERT_SERVING(s);
  const Json long_body = {{"prompt", kPrompt}, {"max_tokens", 1000}, {"temperature", 0}};
  httplib::Client c = s.client();
  const auto t0 = std::chrono::steady_clock::now();
  post(c, "/v1/completions", long_body, 200);
  const auto full = std::chrono::steady_clock::now() - t0;

  Json stream_body = long_body;
  stream_body["stream"] = true;
  httplib::Client quitter = s.client();
  int pieces = 0;
  const auto t1 = std::chrono::steady_clock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = stream_body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++pieces < 3;  // hang up after a few chunks
  };
  const httplib::Result gone = quitter.send(req);
  EXPECT_FALSE(gone);  // the client cancelled it
  EXPECT_EQ(pieces, 3);
  quitter.stop();

  post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 4}}, 200);
  const auto served = std::chrono::steady_clock::now() - t1;
  EXPECT_LT(served * 3, full) << "served after " << std::chrono::duration<double>(served).count()
                              << " s; the full "
                              << "generation takes " << std::chrono::duration<double>(full).count()
                              << " s";
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// SIGTERM during a long generation ends it and the process exits 0.
TEST(CliServe, SigtermStopsRunningGenerationsAndExitsZero) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-c", "2048", "--ignore-eos"});
  ASSERT_SERVING(s);
  auto running = std::async(std::launch::async, [&] {
    httplib::Client c = s.client();
    return c.Post("/v1/completions", Json{{"prompt", kPrompt}, {"max_tokens", 2000}}.dump(),
                  "application/json");
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(s.stop(10s), 0) << s.log();
  ASSERT_EQ(running.wait_for(10s), std::future_status::ready);
  EXPECT_NE(s.log().find("SIGTERM, shut down"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace qrun::test
