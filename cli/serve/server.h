// `qrun serve`'s HTTP side: the routes of an OpenAI-compatible server on a cpp-httplib
// Server, over a loaded Session. Each completion request renders and tokenizes its prompt,
// takes one of the -np sequence slots (core/slot_pool.h; waiting in the bounded queue, or a
// 503 when it is full), and generates into that slot's own KV cache on the calling HTTP
// thread, within the per-request time limit. Sequences share the model through
// SerializedModel: one forward pass at a time. GET /metrics reports what it measures.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cli/sampling_flags.h"
#include "cli/serve/metrics.h"
#include "cli/session.h"
#include "core/jinja/chat_template.h"
#include "core/serialized_model.h"
#include "core/slot_pool.h"

namespace qrun::cli::serve {

struct ServerConfig {
  SamplingFlags sampling;    // the defaults a request's fields override
  std::string api_key;       // empty: no authentication
  int64_t n_batch = 512;     // prompt tokens per forward call
  std::string model_id;      // "model" in responses and /v1/models
  bool log_requests = true;  // one stderr line per request
  // Wall-clock seconds a completion may run once it holds a slot (prompt and generation);
  // past it, it ends with finish_reason "length" and what it generated. 0: no limit.
  double timeout_s = 600;
};

class Server {
 public:
  // `session` must outlive the server. `slots` holds one KV cache per sequence. The chat
  // template is either given or the error that chat requests get (a model without one).
  Server(Session& session, std::vector<KvCache> slots, int64_t max_queued,
         Result<ChatTemplate> chat_template, ServerConfig config);

  // The routes, error formatting, authentication and limits on `http`.
  void install(httplib::Server& http, size_t max_body_bytes);
  // Interrupts running generations and makes waiting requests give up (for shutdown).
  void shut_down() { shutting_down_.store(true); }
  int n_slots() const { return pool_.n_slots(); }
  int64_t slot_ctx() const { return slot_ctx_; }

 private:
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  // Makes `grammar` the constraint of `sampler`, with the end-of-generation tokens of the
  // endpoint (a chat's end-of-turn tokens). kRuntime if the grammar cannot start.
  Result<void> attach(std::shared_ptr<const Grammar> grammar, bool chat, Sampler& sampler);

  Session& s_;
  SerializedModel model_;
  int64_t slot_ctx_ = 0;
  SlotPool pool_;
  std::optional<ChatTemplate> template_;
  std::string template_error_;
  std::vector<bool> end_of_turn_;
  std::once_flag vocab_once_;
  std::shared_ptr<const GrammarVocab> vocab_;  // each token's text for grammars, made at first use
  ServerConfig config_;
  Metrics metrics_;
  // Per slot: the tokens its running request had in the KV cache at its last generated
  // token (0 before the first one and when the slot is free).
  std::unique_ptr<std::atomic<int64_t>[]> kv_used_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace qrun::cli::serve
