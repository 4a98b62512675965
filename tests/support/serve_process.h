// Talking to a real `qrun serve` from tests: a child started with `--port 0` on the
// loopback, its port read from its stderr, SIGTERM and a bounded wait when it goes; a POST
// helper, the events of a server-sent-events body, and a check of OpenAI's error object.
// Every wait has a deadline, so a hung server fails the test instead of stalling CI.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qrun::test {

// A `qrun serve --port 0 -t 1 ARGS...` child with stderr in a file. `env` entries
// ("NAME=VALUE") are set in the child only.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args, const std::vector<std::string>& env = {});
  ~ServeProcess() { stop(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }  // -1 when it exited (or never listened) in 60 s
  pid_t pid() const { return pid_; }
  std::string log() const;
  httplib::Client client() const;
  // SIGTERM, then the exit code (killed at the deadline: -1).
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

#define ASSERT_SERVING(server) ASSERT_GT((server).port(), 0) << (server).log()

// A model of the shared test data (models/NAME).
std::string shared_model(const std::string& name);

// What `qrun run -q --json --temp 0 -t 1 EXTRA...` generates for `prompt` (the oracle the
// server's greedy output is held to): text, tokens, n_tokens, n_prompt_tokens, ...
nlohmann::json greedy_run(const std::string& model_path, const std::string& prompt, int n,
                          const std::vector<std::string>& extra = {});

// POSTs `body` and expects `expect_status`; the reply's JSON (discarded if not JSON).
nlohmann::json post(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                    int expect_status);

// The events of an SSE body: the JSON of each "data: " line, and whether [DONE] ended it.
struct Events {
  std::vector<nlohmann::json> chunks;
  bool done = false;
};
Events parse_sse(const std::string& body);
// The text of a streamed reply: the chunks' choices[0].text (completions) or
// choices[0].delta.content (chat) joined; chunks without choices are skipped.
std::string streamed_text(const std::string& body);

// A chat template file ("ROLE: CONTENT" lines, then "assistant:") in the test's temp dir,
// for models that carry none.
std::filesystem::path roles_template();

// Expects OpenAI's error object with `status`, `param` (empty: null) and a message that
// contains `needle`.
void expect_error(const httplib::Result& r, int status, const std::string& param,
                  const std::string& needle);

}  // namespace qrun::test
