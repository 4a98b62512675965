// `qrun serve`'s request fields beyond plain sampling, over real HTTP on the loopback (see
// tests/support/serve_process.h): logit_bias (held to `qrun run --logit-bias`, which runs
// the same stage).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
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

std::string model(const std::string& name) {
  return data_path("models/" + name).string();
}

// A bias of -100 bans the token greedy decoding picks first, +100 forces a token at every
// step; the text equals `qrun run` with the same --logit-bias and differs from the unbiased
// text, so a server that drops the field fails.
TEST(CliServeApi, LogitBiasBansAndForcesTokens) {
  const std::string path = model("TinyLLama-v0-5M-Q4_0.gguf");
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
  std::string streamed;
  for (const Json& ch : parse_sse(st->body).chunks)
    streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, forced_run["text"]);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(CliServeApi, LogitBiasErrors) {
  ServeProcess s({"-m", model("stories260K.gguf")});  // 512 tokens
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

}  // namespace
}  // namespace qrun::test
