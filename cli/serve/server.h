// `qrun serve`'s HTTP side: the routes of an OpenAI-compatible server on a cpp-httplib
// Server, over a loaded Session. Each completion request renders and tokenizes its prompt,
// makes its sampler and hands both to the engine thread (core/batch_scheduler.h: -np
// sequence slots, a bounded queue, or a 503 when it is full), which generates every running
// sequence together, one batched forward pass per step, within each request's time limit;
// the request's HTTP thread receives its text through a channel and writes it (chunk by
// chunk when streaming). GET /metrics reports what it measures.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/sampling_flags.h"
#include "cli/serve/metrics.h"
#include "cli/session.h"
#include "core/batch_scheduler.h"
#include "core/jinja/chat_template.h"
#include "core/tool_calls.h"

namespace qrun::cli::serve {

struct ServerConfig {
  SamplingFlags sampling;      // the defaults a request's fields override
  std::string api_key;         // empty: no authentication
  int64_t n_batch = 512;       // tokens per engine step (decode tokens and prompt chunks)
  bool prefix_caching = true;  // with paged slots: share cached prompt blocks
  std::string model_id;        // "model" in responses and /v1/models
  bool log_requests = true;    // one stderr line per request
  // Wall-clock seconds a completion may run once it holds a slot (prompt and generation);
  // past it, it ends with finish_reason "length" and what it generated. 0: no limit.
  double timeout_s = 600;
};

class Server {
 public:
  // `session` must outlive the server. `slots` holds one KV cache per sequence. The chat
  // template is either given or the error that chat requests get (a model without one).
  // Starts the engine thread; the destructor stops it, ending what still runs.
  Server(Session& session, std::vector<KvCache> slots, int64_t max_queued,
         Result<ChatTemplate> chat_template, ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The routes, error formatting, authentication and limits on `http`.
  void install(httplib::Server& http, size_t max_body_bytes);
  // Interrupts running generations and makes waiting requests give up (for shutdown).
  void shut_down() {
    shutting_down_.store(true);
    scheduler_.wake();
  }
  int n_slots() const { return scheduler_.n_slots(); }
  int64_t slot_ctx() const { return slot_ctx_; }

 private:
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  // Makes `grammar` the constraint of `sampler`, with the end-of-generation tokens of the
  // endpoint (a chat's end-of-turn tokens); lazy from `trigger` when there is one.
  // kRuntime if the grammar cannot start.
  Result<void> attach(std::shared_ptr<const Grammar> grammar, std::string trigger, bool chat,
                      Sampler& sampler);

  Session& s_;
  int64_t slot_ctx_ = 0;
  std::atomic<bool> shutting_down_{false};
  BatchScheduler scheduler_;
  std::optional<ChatTemplate> template_;
  std::string template_error_;
  std::vector<bool> end_of_turn_;
  ToolCallFormat tool_format_ = ToolCallFormat::kGeneric;  // the template's, for tools
  bool system_role_ = true;  // whether the template renders system messages
  std::once_flag vocab_once_;
  std::shared_ptr<const GrammarVocab> vocab_;  // each token's text for grammars, made at first use
  ServerConfig config_;
  Metrics metrics_;
  std::atomic<uint64_t> next_id_{0};
  std::thread engine_;  // runs scheduler_ (last: started once everything else is built)
};

}  // namespace qrun::cli::serve
