// `qrun serve`'s request fields beyond plain sampling, over real HTTP on the loopback (see
// tests/support/serve_process.h): logit_bias (held to `qrun run --logit-bias`, which runs
// the same stage), response_format (the output parses as JSON and follows the schema),
// GET /metrics (counters move with requests; gauges see running and queued requests), a long
// prompt joining a running stream in chunks (chunked prefill), the per-request time limit,
// and the API key from the environment or a file.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

const char* kPrompt = "Once upon a time";

// A bias of -100 bans the token greedy decoding picks first, +100 forces a token at every
// step; the text equals `qrun run` with the same --logit-bias and differs from the unbiased
// text, so a server that drops the field fails.
TEST(CliServeApi, LogitBiasBansAndForcesTokens) {
  const std::string path = shared_model("TinyLLama-v0-5M-Q4_0.gguf");
  const Json plain = greedy_run(path, kPrompt, 6);
  ASSERT_EQ(plain["n_tokens"], 6) << plain.dump();
  const std::string first = std::to_string(plain["tokens"][0].get<int>());
  const std::string forced = std::to_string(plain["tokens"][3].get<int>());
  const Json banned_run = greedy_run(path, kPrompt, 6, {"--logit-bias", first + "-100"});
  const Json forced_run = greedy_run(path, kPrompt, 6, {"--logit-bias", forced + "+100"});
  for (const Json& t : forced_run["tokens"]) EXPECT_EQ(t.dump(), forced) << forced_run.dump();
  EXPECT_NE(banned_run["tokens"][0], plain["tokens"][0]);

  ServeProcess s({"-m", path});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto text = [&](const Json& bias) {
    const Json body = {
        {"prompt", kPrompt}, {"max_tokens", 6}, {"temperature", 0}, {"logit_bias", bias}};
    return post(c, "/v1/completions", body, 200)["choices"][0]["text"].get<std::string>();
  };
  EXPECT_EQ(text(Json::object()), plain["text"]);
  EXPECT_EQ(text({{first, -100}}), banned_run["text"]);
  EXPECT_EQ(text({{forced, 100}}), forced_run["text"]);
  EXPECT_NE(banned_run["text"], plain["text"]);
  EXPECT_NE(forced_run["text"], plain["text"]);
  // Streamed and chat requests take it too.
  const Json stream_body = {{"prompt", kPrompt},
                            {"max_tokens", 6},
                            {"temperature", 0},
                            {"stream", true},
                            {"logit_bias", {{forced, 100}}}};
  const httplib::Result st = c.Post("/v1/completions", stream_body.dump(), "application/json");
  ASSERT_TRUE(st);
  EXPECT_EQ(streamed_text(st->body), forced_run["text"]);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServeApi, LogitBiasErrors) {
  ServeProcess s({"-m", shared_model("stories260K.gguf")});  // 512 tokens
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto bad = [&](const Json& bias) {
    return c.Post("/v1/completions", Json{{"prompt", "a"}, {"logit_bias", bias}}.dump(),
                  "application/json");
  };
  expect_error(bad({{"5", 101}}), 400, "logit_bias", "outside [-100, 100]");
  expect_error(bad({{"5", -100.5}}), 400, "logit_bias", "outside [-100, 100]");
  expect_error(bad({{"5", "high"}}), 400, "logit_bias", "must be a number");
  expect_error(bad({{"5", nullptr}}), 400, "logit_bias", "must be a number");
  expect_error(bad({{"cat", 1}}), 400, "logit_bias", "not a token id");
  expect_error(bad({{"-3", 1}}), 400, "logit_bias", "not a token id");
  expect_error(bad({{"512", 1}}), 400, "logit_bias", "vocabulary of 512");
  expect_error(bad(Json::array({1, 2})), 400, "logit_bias", "must be an object");
  post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}, {"logit_bias", {{"511", 100}}}},
       200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// The reply's text as JSON (discarded when it does not parse).
Json parsed_reply(const Json& r, bool chat) {
  const Json& choice = r["choices"][0];
  const std::string text = chat ? choice["message"]["content"] : choice["text"];
  return Json::parse(text, nullptr, false);
}

// A story model writes prose; with response_format it writes JSON that parses and follows
// the schema, on both endpoints, streamed or not.
TEST(CliServeApi, ResponseFormatConstrainsToJson) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "--chat-template-file",
                  roles_template().string()});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json base = {{"prompt", kPrompt}, {"max_tokens", 200}, {"temperature", 0}};
  EXPECT_TRUE(parsed_reply(post(c, "/v1/completions", base, 200), false).is_discarded());

  // {"type": "text"} changes nothing; json_object makes the story model open an object (it
  // never closes one by itself), and with "}" pushed up by logit_bias it closes it at once:
  // "{}" and the end, where without the grammar "}" would repeat.
  Json text_body = base;
  text_body["response_format"] = {{"type", "text"}};
  EXPECT_EQ(post(c, "/v1/completions", text_body, 200)["choices"][0]["text"],
            post(c, "/v1/completions", base, 200)["choices"][0]["text"]);
  Json object_body = base;
  object_body["response_format"] = {{"type", "json_object"}};
  const Json opened = post(c, "/v1/completions", object_body, 200);
  EXPECT_EQ(opened["choices"][0]["text"].get<std::string>().substr(0, 2), "{\"") << opened.dump();
  const ProcessResult ids =
      run_process({qrun_binary().string(), "tokenize", "-m",
                   shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-p", "a}", "--ids", "--no-bos"},
                  StdinKind::kDevNull, "", 30s);
  const std::string close_brace = std::to_string(Json::parse(ids.out).back().get<int>());
  object_body["logit_bias"] = {{close_brace, 100}};
  const Json closed = post(c, "/v1/completions", object_body, 200);
  EXPECT_EQ(parsed_reply(closed, false), Json::object()) << closed.dump();
  EXPECT_EQ(closed["choices"][0]["finish_reason"], "stop") << closed.dump();
  object_body.erase("response_format");
  const Json unconstrained = post(c, "/v1/completions", object_body, 200);
  EXPECT_TRUE(parsed_reply(unconstrained, false).is_discarded()) << unconstrained.dump();

  const Json schema = {
      {"type", "object"},
      {"properties",
       {{"mood", {{"enum", {"happy", "sad"}}}},
        {"age", {{"type", "integer"}, {"minimum", 1}, {"maximum", 99}}},
        {"friends",
         {{"type", "array"}, {"items", {{"enum", {"Tom", "Lily", "Ben"}}}}, {"maxItems", 2}}}}},
      {"required", {"mood", "age", "friends"}},
      {"additionalProperties", false}};
  const Json format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "kid"}, {"strict", true}, {"schema", schema}}}};
  auto check = [](const Json& j, const std::string& what) {
    ASSERT_TRUE(j.is_object()) << what;
    EXPECT_EQ(j.size(), 3u) << what;
    ASSERT_TRUE(j["mood"].is_string()) << what;
    EXPECT_TRUE(j["mood"] == "happy" || j["mood"] == "sad") << what;
    ASSERT_TRUE(j["age"].is_number_integer()) << what;
    EXPECT_GE(j["age"].get<int>(), 1) << what;
    EXPECT_LE(j["age"].get<int>(), 99) << what;
    ASSERT_TRUE(j["friends"].is_array()) << what;
    EXPECT_LE(j["friends"].size(), 2u) << what;
    for (const Json& f : j["friends"]) EXPECT_TRUE(f == "Tom" || f == "Lily" || f == "Ben") << what;
  };
  Json body = base;
  body["response_format"] = format;
  const Json completion = post(c, "/v1/completions", body, 200);
  check(parsed_reply(completion, false), completion.dump());

  Json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me about a kid."}}}},
               {"max_tokens", 200},
               {"temperature", 0},
               {"response_format", format}};
  const Json reply = post(c, "/v1/chat/completions", chat, 200);
  check(parsed_reply(reply, true), reply.dump());
  chat["stream"] = true;
  const httplib::Result st = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(st);
  EXPECT_EQ(streamed_text(st->body), reply["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A template that refuses system messages (Gemma 2's) gets the system text in the first user
// message, as llama-server does: the request is answered, and its prompt is that of the
// merged message sent alone.
TEST(CliServeApi, SystemMessageJoinsTheNextWhereTheTemplateTakesNone) {
  ServeProcess s({"-m", shared_model("stories260K.gguf"), "--chat-template-file",
                  data_path("templates/google-gemma-2-2b-it.jinja")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json with_system = {{"messages",
                             {{{"role", "system"}, {"content", "Be brief."}},
                              {{"role", "user"}, {"content", "Once upon a time"}}}},
                            {"max_tokens", 4},
                            {"temperature", 0}};
  const Json merged = {
      {"messages", {{{"role", "user"}, {"content", "Be brief.\nOnce upon a time"}}}},
      {"max_tokens", 4},
      {"temperature", 0}};
  const Json a = post(c, "/v1/chat/completions", with_system, 200);
  const Json b = post(c, "/v1/chat/completions", merged, 200);
  EXPECT_EQ(a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]);
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServeApi, ResponseFormatErrors) {
  ServeProcess s({"-m", shared_model("stories260K.gguf")});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  auto bad = [&](const Json& format) {
    return c.Post("/v1/completions", Json{{"prompt", "a"}, {"response_format", format}}.dump(),
                  "application/json");
  };
  expect_error(bad("json"), 400, "response_format", "string 'type'");
  expect_error(bad({{"type", "yaml"}}), 400, "response_format.type", "\"yaml\"");
  expect_error(bad({{"type", "json_schema"}}), 400, "response_format.json_schema.schema",
               "must be an object");
  expect_error(
      bad({{"type", "json_schema"},
           {"json_schema", {{"schema", {{"type", "object"}, {"not", {{"type", "null"}}}}}}}}),
      400, "response_format.json_schema.schema", "'not'");
  post(c, "/v1/completions",
       {{"prompt", "a"}, {"max_tokens", 2}, {"response_format", {{"type", "text"}}}}, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// The value of the sample `series` (name and labels as written) in a /metrics text; -1
// when it is missing.
double metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

std::string scrape(const ServeProcess& s) {
  httplib::Client c = s.client();
  const httplib::Result r = c.Get("/metrics");
  EXPECT_TRUE(r);
  if (!r) return "";
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  return r->body;
}

// Polls /metrics until `ready` holds for it (false after 30 s).
template <typename F>
bool wait_for_metrics(const ServeProcess& s, F ready) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready(scrape(s))) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(CliServeApi, MetricsCountRequestsTokensAndLatencies) {
  ServeProcess s(
      {"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "1", "-c", "1024", "--ignore-eos"});
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const std::string before = scrape(s);
  EXPECT_EQ(metric(before, "qrun_prompt_tokens_total"), 0) << before;
  EXPECT_EQ(metric(before, "qrun_generated_tokens_total"), 0);
  EXPECT_EQ(metric(before, "qrun_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(metric(before, "qrun_slots"), 1);
  EXPECT_EQ(metric(before, "qrun_requests_running"), 0);
  EXPECT_EQ(metric(before, "qrun_kv_tokens_total"), 1024);
  EXPECT_NE(before.find("# TYPE qrun_inter_token_latency_seconds histogram"), std::string::npos);

  const Json r = post(c, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 5}}, 200);
  post(c, "/v1/completions", {{"prompt", kPrompt}, {"top_p", 7}}, 400);
  ASSERT_TRUE(c.Get("/nowhere"));
  // A response is counted just after its last byte is written, on the thread that wrote it,
  // which may run after the client has sent its next request: wait for all three.
  std::string after;
  const auto responses = [&](const char* route, int status) {
    return metric(after, std::string("qrun_http_responses_total{route=\"") + route +
                             "\",status=\"" + std::to_string(status) + "\"}");
  };
  EXPECT_TRUE(wait_for_metrics(s, [&](const std::string& m) {
    after = m;
    return responses("/v1/completions", 200) == 1 && responses("/v1/completions", 400) == 1 &&
           responses("other", 404) == 1;
  })) << after;
  EXPECT_GE(responses("/metrics", 200), 1) << after;  // the first scrape
  EXPECT_EQ(metric(after, "qrun_prompt_tokens_total"), r["usage"]["prompt_tokens"]);
  EXPECT_EQ(metric(after, "qrun_generated_tokens_total"), 5);
  EXPECT_EQ(metric(after, "qrun_time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(metric(after, "qrun_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 1);
  EXPECT_GT(metric(after, "qrun_time_to_first_token_seconds_sum"), 0);
  EXPECT_EQ(metric(after, "qrun_inter_token_latency_seconds_count"), 4);
  EXPECT_EQ(metric(after, "qrun_kv_tokens_used"), 0);
  EXPECT_EQ(metric(after, "qrun_request_timeouts_total"), 0);

  // One long request runs and a second waits for the only slot: the gauges show both, and
  // the running one's KV tokens grow past its prompt.
  const Json long_body = {{"prompt", kPrompt}, {"max_tokens", 1000}};
  std::vector<std::future<httplib::Result>> running;
  for (int i = 0; i < 2; ++i) {
    running.push_back(std::async(std::launch::async, [&] {
      httplib::Client ci = s.client();
      return ci.Post("/v1/completions", long_body.dump(), "application/json");
    }));
  }
  const double n_prompt = r["usage"]["prompt_tokens"];
  std::string busy;
  EXPECT_TRUE(wait_for_metrics(s, [&](const std::string& m) {
    busy = m;
    return metric(m, "qrun_requests_running") == 1 && metric(m, "qrun_requests_queued") == 1 &&
           metric(m, "qrun_kv_tokens_used") > n_prompt + 1;
  })) << busy;
  EXPECT_LE(metric(busy, "qrun_kv_tokens_used"), n_prompt + 1000);
  for (auto& f : running) {
    ASSERT_EQ(f.wait_for(120s), std::future_status::ready);
    EXPECT_EQ(f.get()->status, 200);
  }
  const std::string idle = scrape(s);
  EXPECT_EQ(metric(idle, "qrun_requests_running"), 0);
  EXPECT_EQ(metric(idle, "qrun_requests_queued"), 0);
  EXPECT_EQ(metric(idle, "qrun_kv_tokens_used"), 0);
  EXPECT_EQ(metric(idle, "qrun_generated_tokens_total"), 2005);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// Streams a greedy completion of kPrompt, max_tokens long, on a thread of its own: `started`
// is set once three pieces have arrived, and the client hangs up at the first piece after
// `hang_up` is set. The future holds what the client's send returned.
std::future<httplib::Result> hangable_stream(ServeProcess& s, int max_tokens,
                                             std::promise<void>& started,
                                             const std::atomic<bool>& hang_up) {
  return std::async(std::launch::async, [&s, max_tokens, &started, &hang_up] {
    httplib::Client c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body =
        Json{{"prompt", kPrompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", true}}
            .dump();
    req.set_header("Content-Type", "application/json");
    int pieces = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (++pieces == 3) started.set_value();
      return !hang_up.load();
    };
    return c.send(req);
  });
}

// Chunked prefill over HTTP: a long prompt that arrives while another request streams goes
// in chunks of -b minus the stream's decode token, each beside one of the stream's tokens,
// so qrun_engine_mixed_steps_total grows by exactly its number of chunks (none of the other
// steps here mix: a prompt alone, or a stream alone); the second time, B's prompt reuses the
// blocks its first run cached and only the rest goes in. That count holds as long as the stream
// outlives the prompt, which its 1800 tokens do by far (it is hung up on afterwards). Both
// replies are what they are alone.
TEST(CliServeApi, LongPromptJoinsARunningStreamInChunks) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "2", "-c", "4096", "-b",
                  "16", "--ignore-eos"});
  ASSERT_SERVING(s);
  std::string long_prompt = kPrompt;
  for (int i = 0; i < 40; ++i) long_prompt += " The little dog ran to the park with Lily.";
  const Json b_body = {{"prompt", long_prompt}, {"max_tokens", 4}, {"temperature", 0}};
  httplib::Client c = s.client();
  const Json alone = post(c, "/v1/completions", b_body, 200);
  const int n_prompt = alone["usage"]["prompt_tokens"];
  ASSERT_GT(n_prompt, 200);
  EXPECT_EQ(metric(scrape(s), "qrun_engine_mixed_steps_total"), 0);

  // A streams; B is posted once A's first pieces have arrived.
  std::promise<void> a_streaming;
  std::atomic<bool> hang_up{false};
  auto a = hangable_stream(s, 1800, a_streaming, hang_up);
  ASSERT_EQ(a_streaming.get_future().wait_for(30s), std::future_status::ready);
  const Json together = post(c, "/v1/completions", b_body, 200);
  hang_up = true;
  ASSERT_EQ(a.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(together["choices"][0]["text"], alone["choices"][0]["text"]);
  // 16 tokens a step, one of them A's, for the tokens that the blocks cached from B's first
  // run do not hold.
  const int cached = together["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(alone["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GT(cached, 0);
  const int chunks = (n_prompt - cached + 14) / 15;
  EXPECT_EQ(metric(scrape(s), "qrun_engine_mixed_steps_total"), chunks);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// The paged KV cache's gauges follow a stream, and a client that hangs up mid-stream gives
// its blocks back at the engine's next step: qrun_kv_blocks_used returns to 0, every block
// is free again, and the blocks it filled stay in the prefix cache.
TEST(CliServeApi, DisconnectMidStreamFreesItsBlocks) {
  ServeProcess s(
      {"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "2", "-c", "1024", "--ignore-eos"});
  ASSERT_SERVING(s);
  const std::string idle = scrape(s);
  EXPECT_EQ(metric(idle, "qrun_kv_blocks_total"), 32) << idle;
  EXPECT_EQ(metric(idle, "qrun_kv_blocks_used"), 0);
  EXPECT_EQ(metric(idle, "qrun_kv_blocks_free"), 32);
  EXPECT_EQ(metric(idle, "qrun_kv_blocks_cached"), 0);

  std::promise<void> streaming;
  std::atomic<bool> hang_up{false};
  auto a = hangable_stream(s, 1000, streaming, hang_up);
  ASSERT_EQ(streaming.get_future().wait_for(30s), std::future_status::ready);
  std::string busy;
  EXPECT_TRUE(wait_for_metrics(s, [&](const std::string& m) {
    busy = m;
    return metric(m, "qrun_requests_running") == 1 && metric(m, "qrun_kv_blocks_used") >= 2;
  })) << busy;
  EXPECT_EQ(metric(busy, "qrun_kv_blocks_free"), 32 - metric(busy, "qrun_kv_blocks_used"));
  hang_up = true;
  ASSERT_EQ(a.wait_for(60s), std::future_status::ready);
  EXPECT_FALSE(a.get());  // hung up before the end of the stream
  std::string after;
  EXPECT_TRUE(wait_for_metrics(s, [&](const std::string& m) {
    after = m;
    return metric(m, "qrun_requests_running") == 0 && metric(m, "qrun_kv_blocks_used") == 0;
  })) << after;
  EXPECT_EQ(metric(after, "qrun_kv_blocks_free"), 32);
  EXPECT_GE(metric(after, "qrun_kv_blocks_cached"), 1);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A KV cache too small for its load: -np 4 over -c 128 in blocks of 16, and eight requests
// of about 105 positions each at once. Running sequences that find no free block preempt
// the newest, which recomputes later: every request is answered, with what it gets alone,
// and /metrics counts the preemptions.
TEST(CliServeApi, ATooSmallKvCachePreemptsAndAnswersEveryRequest) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "4", "-c", "128",
                  "--block-size", "16", "--ignore-eos"});
  ASSERT_SERVING(s);
  const std::vector<std::string> prompts = {"Once upon a time",  "The dog",     "Lily and Tom",
                                            "One day, a little", "The sun was", "Mom said",
                                            "There was a big",   "A bird"};
  auto body = [&](size_t i) {
    return Json{{"prompt", prompts[i]}, {"max_tokens", 100}, {"temperature", 0}};
  };
  httplib::Client c = s.client();
  std::vector<std::string> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    alone.push_back(post(c, "/v1/completions", body(i), 200)["choices"][0]["text"]);
  }
  EXPECT_EQ(metric(scrape(s), "qrun_preemptions_total"), 0);
  std::vector<std::future<std::pair<int, std::string>>> futures;
  for (size_t i = 0; i < prompts.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      httplib::Client ci = s.client();
      const httplib::Result r = ci.Post("/v1/completions", body(i).dump(), "application/json");
      if (!r) return std::make_pair(-1, std::string());
      if (r->status != 200) return std::make_pair(r->status, r->body);
      return std::make_pair(200, Json::parse(r->body)["choices"][0]["text"].get<std::string>());
    }));
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    ASSERT_EQ(futures[i].wait_for(120s), std::future_status::ready);
    const auto [status, text] = futures[i].get();
    EXPECT_EQ(status, 200) << text;
    EXPECT_EQ(text, alone[i]) << prompts[i];
  }
  const std::string after = scrape(s);
  EXPECT_GT(metric(after, "qrun_preemptions_total"), 0) << after;
  EXPECT_EQ(metric(after, "qrun_kv_blocks_used"), 0);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// --timeout ends a request that runs past it with finish_reason "length" and the text so
// far, streamed or not, counts it, and frees the slot for the next request.
TEST(CliServeApi, TimeoutEndsALongRequest) {
  ServeProcess s({"-m", shared_model("TinyLLama-v0-5M-Q4_0.gguf"), "-np", "1", "-c", "2048",
                  "--ignore-eos", "-to", "0.3"});  // -to: llama-server's spelling
  ASSERT_SERVING(s);
  httplib::Client c = s.client();
  const Json body = {{"prompt", kPrompt}, {"max_tokens", 2000}, {"temperature", 0}};
  const auto t0 = std::chrono::steady_clock::now();
  const Json r = post(c, "/v1/completions", body, 200);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const int n = r["usage"]["completion_tokens"];
  EXPECT_LT(n, 2000) << "the whole generation finished within the limit: make it longer";
  EXPECT_LT(seconds, 5.0);
  // The text is what greedy decoding gives in n tokens.
  EXPECT_EQ(r["choices"][0]["text"], greedy_run(shared_model("TinyLLama-v0-5M-Q4_0.gguf"), kPrompt,
                                                n, {"--ignore-eos", "-c", "2048"})["text"]);

  Json stream_body = body;
  stream_body["stream"] = true;
  const httplib::Result st = c.Post("/v1/completions", stream_body.dump(), "application/json");
  ASSERT_TRUE(st);
  const Events e = parse_sse(st->body);
  EXPECT_TRUE(e.done);
  ASSERT_FALSE(e.chunks.empty());
  EXPECT_EQ(e.chunks.back()["choices"][0]["finish_reason"], "length");

  const Json short_reply = post(c, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 3}}, 200);
  EXPECT_EQ(short_reply["usage"]["completion_tokens"], 3);
  const std::string m = scrape(s);
  EXPECT_EQ(metric(m, "qrun_request_timeouts_total"), 2) << m;
  EXPECT_EQ(metric(m, "qrun_requests_running"), 0);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// The key from QRUN_API_KEY or --api-key-file guards the routes and is not on the command
// line that `ps` shows.
TEST(CliServeApi, ApiKeyFromEnvironmentOrFile) {
  const std::filesystem::path key_file = temp_dir() / "key.txt";
  std::ofstream(key_file) << "  from-file \nignored\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> setups = {
      {{"-m", shared_model("stories260K.gguf"), "--api-key-file", key_file.string()}, "from-file"},
      {{"-m", shared_model("stories260K.gguf")}, "from-env"}};
  for (const auto& [args, key] : setups) {
    ServeProcess s(args, {"QRUN_API_KEY=from-env"});
    ASSERT_SERVING(s);
    std::ifstream cmdline("/proc/" + std::to_string(s.pid()) + "/cmdline");
    const std::string argv(std::istreambuf_iterator<char>(cmdline), {});
    EXPECT_EQ(argv.find(key), std::string::npos) << argv;
    httplib::Client c = s.client();
    const Json body = {{"prompt", "a"}, {"max_tokens", 2}};
    expect_error(c.Post("/v1/completions", body.dump(), "application/json"), 401, "",
                 "missing API key");
    c.set_bearer_token_auth(key == "from-file" ? "from-env" : "from-file");
    expect_error(c.Get("/v1/models"), 401, "", "invalid API key");
    c.set_bearer_token_auth(key);
    post(c, "/v1/completions", body, 200);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  // A file with no key, and both flags at once, are usage errors.
  const std::filesystem::path blank = temp_dir() / "blank.txt";
  std::ofstream(blank) << "\n\n";
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--api-key-file", blank.string()},
        std::vector<std::string>{"--api-key-file", key_file.string(), "--api-key", "k"}}) {
    std::vector<std::string> argv = {qrun_binary().string(),           "serve",  "-m",
                                     shared_model("stories260K.gguf"), "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const ProcessResult r = run_process(argv, StdinKind::kDevNull, "", 30s);
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
}

}  // namespace
}  // namespace qrun::test
