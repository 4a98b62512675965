// The routes of `qrun serve` and one completion request from body to last byte. The engine
// thread generates; each request's HTTP thread waits on its Generation's channel for the
// text pieces (already past the stop-string filter) and the end. Streaming writes each
// piece as one chunk from httplib's chunked content provider, and a failed write (the
// client is gone) cancels the sequence, which the engine ends at its next step, freeing
// the slot.
#include "cli/serve/server.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <random>

#include "cli/serve/openai_api.h"
#include "core/conversation.h"
#include "core/generate.h"
#include "core/grammar/grammar_stage.h"
#include "core/stop_strings.h"

namespace qrun::cli::serve {
namespace {

using Json = nlohmann::json;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

ApiError server_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// Content given as an array of parts ({"type": "text", "text": ...}) becomes the joined
// text, which every chat template understands; other parts are refused.
std::optional<nlohmann::ordered_json> flatten_messages(const nlohmann::ordered_json& messages,
                                                       ApiError* error) {
  nlohmann::ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    nlohmann::ordered_json& m = out[i];
    if (!m.contains("content") || m["content"].is_null()) {
      m["content"] = "";
      continue;
    }
    if (!m["content"].is_array()) continue;
    std::string text;
    for (const auto& part : m["content"]) {
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        error->message = "only text content parts are supported";
        error->param = "messages[" + std::to_string(i) + "].content";
        return std::nullopt;
      }
      text += part["text"].get<std::string>();
    }
    m["content"] = text;
  }
  return out;
}

// As Conversation tokenizes a rendered chat: special tokens parsed, a BOS in front when the
// vocabulary asks for one and the template did not write it, never an EOS.
std::vector<int32_t> tokenize_chat(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/false,
                                                 /*parse_special=*/true);
  const int32_t bos = tokenizer.bos();
  if (tokenizer.add_bos() && bos != kNoToken && (tokens.empty() || tokens.front() != bos))
    tokens.insert(tokens.begin(), bos);
  return tokens;
}

std::string sse(const Json& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace

Server::Server(Session& session, std::vector<KvCache> slots, int64_t max_queued,
               Result<ChatTemplate> chat_template, ServerConfig config)
    : s_(session),
      slot_ctx_(slots.front().n_ctx()),
      scheduler_(*session.model, *session.backend, std::move(slots), config.n_batch, max_queued,
                 &shutting_down_, config.prefix_caching),
      config_(std::move(config)) {
  if (chat_template.ok()) {
    template_.emplace(std::move(*chat_template));
    end_of_turn_ = end_of_turn_tokens(*s_.tokenizer, *template_);
    tool_format_ = detect_tool_call_format(*template_);
    system_role_ = template_->supports_system_role();
  } else {
    template_error_ = chat_template.error().message;
  }
  engine_ = std::thread([this] { scheduler_.run(); });
}

Server::~Server() {
  shut_down();
  engine_.join();
}

void Server::install(httplib::Server& http, size_t max_body_bytes) {
  http.set_payload_max_length(max_body_bytes);
  // Statuses that httplib sets itself (404, 413, 400 for a bad request line) and any error
  // without a body get OpenAI's error object.
  http.set_error_handler([max_body_bytes](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = "no route for " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = "the request body is over the limit of " + std::to_string(max_body_bytes) +
                  " bytes (--max-body-size)";
      e.code = "request_too_large";
    } else {
      e.message = "HTTP status " + std::to_string(res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    send_error(res, e);
  });
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string expected = "Bearer " + config_.api_key;
    if (req.get_header_value("Authorization") == expected)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, server_error(401,
                                 req.has_header("Authorization")
                                     ? "invalid API key"
                                     : "missing API key: send 'Authorization: Bearer KEY'",
                                 "authentication_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Called once per response written (errors, refusals and streams included).
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_response(req.path, res.status);
    if (config_.log_requests)
      std::fprintf(stderr, "qrun: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    MetricsGauges g;
    g.slots = scheduler_.n_slots();
    g.running = scheduler_.n_running();
    g.queued = scheduler_.n_queued();
    g.kv_tokens_used = scheduler_.kv_tokens_used();
    g.kv_tokens_total = scheduler_.kv_tokens_capacity();
    g.kv_blocks_total = scheduler_.kv_blocks_total();
    g.kv_blocks_used = scheduler_.kv_blocks_used();
    g.kv_blocks_cached = scheduler_.kv_blocks_cached();
    g.preemptions = scheduler_.n_preemptions();
    g.steps = scheduler_.n_steps();
    g.mixed_steps = scheduler_.n_mixed_steps();
    res.set_content(metrics_.render(g), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const Json model = {{"id", config_.model_id},
                        {"object", "model"},
                        {"created", static_cast<int64_t>(std::time(nullptr))},
                        {"owned_by", "qrun"}};
    res.set_content(dump({{"object", "list"}, {"data", Json::array({model})}}), "application/json");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, /*chat=*/false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, /*chat=*/true);
  });
}

Result<void> Server::attach(std::shared_ptr<const Grammar> grammar, std::string trigger, bool chat,
                            Sampler& sampler) {
  if (grammar == nullptr) return {};
  const Tokenizer& tokenizer = *s_.tokenizer;
  const int32_t n_vocab = tokenizer.n_vocab();
  std::call_once(vocab_once_, [&] { vocab_ = make_tokenizer_grammar_vocab(tokenizer); });
  std::vector<uint8_t> is_eog(static_cast<size_t>(n_vocab), 0);
  for (int32_t id = 0; id < n_vocab; ++id) {
    const auto i = static_cast<size_t>(id);
    is_eog[i] = chat ? (i < end_of_turn_.size() && end_of_turn_[i]) : tokenizer.is_eog(id);
  }
  Result<std::unique_ptr<ConstraintStage>> stage =
      make_grammar_stage(std::move(grammar), vocab_, std::move(is_eog), std::move(trigger));
  if (!stage.ok()) return stage.error();
  sampler.set_constraint(std::move(*stage));
  return {};
}

// One request in flight, shared by its HTTP thread and the engine's callbacks. The engine
// side (filter, clocks) is touched only on the engine thread; the channel under its mutex.
struct Generation {
  CompletionRequest request;
  std::vector<int32_t> prompt;
  ResponseIds ids;
  std::chrono::steady_clock::time_point arrival;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);

  // Engine thread only.
  std::optional<StopStringFilter> filter;
  std::chrono::steady_clock::time_point last_token;
  bool first_token = true;

  // The channel: text pieces not yet taken, then the end.
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> pieces;
  std::optional<Result<GenerateResult>> result;

  void push(std::string piece) {
    if (piece.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      pieces.push_back(std::move(piece));
    }
    changed.notify_all();
  }
  void end(Result<GenerateResult> r) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      result.emplace(std::move(r));
    }
    changed.notify_all();
  }
  // Waits for pieces or the end; moves the pieces into *out. True once the end is there
  // and every piece was taken.
  bool take(std::deque<std::string>* out) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return !pieces.empty() || result.has_value(); });
    out->swap(pieces);
    pieces.clear();
    return result.has_value();
  }
};

namespace {

// Streams a chat reply that may call tools. Content streams as it comes, until the format's
// opener (held back while the text could be one); the calls follow once the reply is
// complete, each whole in one chunk, and finish_reason is "tool_calls". Formats without an
// opener (Llama 3's bare JSON, the generic JSON), and replies that must be calls, can only
// be told apart at the end, so they are sent then.
void stream_tool_calls(const std::shared_ptr<Generation>& g, httplib::Response& res,
                       int64_t n_prompt, ToolCallFormat format) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [g, n_prompt, format](size_t, httplib::DataSink& sink) {
        const bool usage = g->request.include_usage;
        // A required call leaves no content to stream (and Mistral's is then a bare array).
        const std::string_view opener = g->request.tools.choice.mode == ToolChoice::Mode::kAuto
                                            ? tool_call_opener(format)
                                            : std::string_view();
        auto send = [&](const std::string& s) {
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        bool alive = send(sse(chunk_json(Endpoint::kChat, g->ids, "", true, std::nullopt, usage)));
        std::string text;
        size_t sent = 0;
        auto send_content = [&](std::string_view content) {
          if (content.size() <= sent) return;
          const std::string piece(content.substr(sent));
          alive = alive &&
                  send(sse(chunk_json(Endpoint::kChat, g->ids, piece, false, std::nullopt, usage)));
          sent = content.size();
        };
        std::deque<std::string> pieces;
        for (bool ended = false; alive && !ended;) {
          ended = g->take(&pieces);
          for (const std::string& p : pieces) text += p;
          if (!opener.empty())
            send_content(std::string_view(text).substr(0, content_before_calls(text, opener)));
        }
        if (!alive) {
          g->cancel->store(true);
          return false;
        }
        const Result<GenerateResult>& result = *g->result;
        if (!result.ok()) {
          send(sse(error_json(server_error(500, result.error().message, "server_error"))));
        } else {
          const ParsedReply reply = parse_tool_calls(format, text, g->request.tools);
          // What was streamed is a prefix of the content: the text before the opener.
          send_content(reply.content);
          for (size_t i = 0; alive && i < reply.calls.size(); ++i)
            alive = send(sse(tool_call_chunk_json(g->ids, reply.calls[i], i, usage)));
          if (!reply.calls.empty()) {
            send(sse(tool_calls_finish_chunk_json(g->ids, usage)));
          } else {
            send(sse(chunk_json(Endpoint::kChat, g->ids, "", false, result->stop_reason, usage)));
          }
          if (usage) {
            send(sse(usage_chunk_json(Endpoint::kChat, g->ids, n_prompt,
                                      static_cast<int64_t>(result->tokens.size()),
                                      result->timings.n_prompt_cached)));
          }
        }
        send("data: [DONE]\n\n");
        sink.done();
        return true;
      });
}

}  // namespace

void Server::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point arrival = Clock::now();
  ApiError error;
  std::optional<CompletionRequest> parsed = parse_request(
      req.body, chat ? Endpoint::kChat : Endpoint::kCompletions, s_.tokenizer->n_vocab(), &error);
  if (!parsed) return send_error(res, error);
  auto g = std::make_shared<Generation>();
  g->request = std::move(*parsed);
  g->arrival = arrival;
  const Tokenizer& tokenizer = *s_.tokenizer;

  // The prompt tokens: a chat rendered through the template, or the raw prompt as
  // `qrun run` tokenizes it (BOS as the vocabulary says, special tokens parsed).
  if (chat) {
    if (!template_)
      return send_error(
          res, server_error(400, template_error_, "invalid_request_error", "no_chat_template"));
    std::optional<nlohmann::ordered_json> messages = flatten_messages(g->request.messages, &error);
    if (!messages) return send_error(res, error);
    ChatRenderOptions options;
    const ToolSet& tools = g->request.tools;
    if (tools.active()) {
      Result<nlohmann::ordered_json> with_tools =
          tool_messages(tool_format_, tools, *messages, system_role_);
      if (!with_tools.ok()) {
        error.message = with_tools.error().message;
        error.param = "messages";
        return send_error(res, error);
      }
      *messages = std::move(*with_tools);
      if (tool_format_ != ToolCallFormat::kGeneric) options.tools = tools.tools;
      Result<std::optional<ToolGrammar>> gbnf = tool_call_grammar(tool_format_, tools);
      if (!gbnf.ok()) {
        error.message = gbnf.error().message;
        error.param = "tools";
        return send_error(res, error);
      }
      if (*gbnf) {
        Result<Grammar> grammar = parse_grammar((*gbnf)->gbnf);
        if (!grammar.ok()) {
          return send_error(
              res,
              server_error(500, "the tool-call grammar does not parse: " + grammar.error().message,
                           "server_error"));
        }
        g->request.grammar = std::make_shared<const Grammar>(std::move(*grammar));
        g->request.grammar_trigger = (*gbnf)->trigger;
      }
    }
    if (tokenizer.bos() != kNoToken) options.bos_token = tokenizer.token_text(tokenizer.bos());
    if (tokenizer.eos() != kNoToken) options.eos_token = tokenizer.token_text(tokenizer.eos());
    if (!system_role_) fold_system_message(*messages);  // as llama-server (Gemma 2)
    Result<std::string> text = template_->render_json(*messages, options);
    if (!text.ok()) {
      return send_error(res, server_error(400, text.error().message, "invalid_request_error"));
    }
    g->prompt = tokenize_chat(tokenizer, *text);
  } else {
    g->prompt = tokenizer.encode(g->request.prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  if (g->prompt.empty()) {
    return send_error(
        res, server_error(400, "the prompt is empty (no tokens)", "invalid_request_error"));
  }
  if (static_cast<int64_t>(g->prompt.size()) >= slot_ctx_) {
    ApiError e = server_error(
        400,
        format("the prompt is %zu tokens but a sequence's context holds %lld (the prompt "
               "must leave room for at least one generated token; raise -c%s)",
               g->prompt.size(), static_cast<long long>(slot_ctx_),
               scheduler_.paged() ? "" : " or lower -np"),
        "invalid_request_error", "context_length_exceeded");
    e.param = chat ? "messages" : "prompt";
    return send_error(res, e);
  }

  // The sampler: the server's defaults, the request's fields, its response_format (else the
  // server's grammar flag).
  const CompletionRequest& r = g->request;
  Result<SamplingParams> defaults = resolve_sampling_params(config_.sampling, tokenizer);
  if (!defaults.ok())
    return send_error(res, server_error(500, defaults.error().message, "server_error"));
  SamplingParams sp = request_sampling(r, *defaults);
  if (!r.seed && config_.sampling.seed < 0) sp.seed = std::random_device{}();
  SeqRequest seq;
  seq.sampler = make_sampler(sp);
  if (Result<void> a = attach(r.grammar ? r.grammar : config_.sampling.grammar,
                              r.grammar ? r.grammar_trigger : "", chat, seq.sampler);
      !a.ok()) {
    return send_error(res, server_error(500, a.error().message, "server_error"));
  }
  const bool calls = chat && r.tools.active();
  g->filter.emplace(tokenizer, r.stop ? *r.stop : config_.sampling.stops,
                    calls && tool_calls_need_special_tokens(tool_format_));
  seq.prompt = g->prompt;
  seq.n_predict = r.max_tokens;
  seq.timeout_s = config_.timeout_s;
  seq.cancel = g->cancel;
  if (!config_.sampling.ignore_eos) {
    if (chat) {
      seq.is_eog = [this](int32_t t) {
        return t >= 0 && static_cast<size_t>(t) < end_of_turn_.size() &&
               end_of_turn_[static_cast<size_t>(t)];
      };
    } else {
      seq.is_eog = [this](int32_t t) { return s_.tokenizer->is_eog(t); };
    }
  }
  // The engine's callbacks hold the generation (never the response), so whatever the HTTP
  // thread does, they write to live memory.
  seq.on_start = [this, gen = g] {
    metrics_.add_prompt_tokens(static_cast<int64_t>(gen->prompt.size()));
    gen->last_token = gen->arrival;
  };
  seq.on_token = [this, gen = g](int32_t token) {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - gen->last_token).count();
    if (gen->first_token)
      metrics_.observe_ttft(seconds);
    else
      metrics_.observe_inter_token(seconds);
    gen->first_token = false;
    gen->last_token = now;
    const StopChunk chunk = gen->filter->push(token);
    gen->push(chunk.text);
    if (gen->cancel->load()) return TokenAction::kInterrupt;
    return chunk.stopped ? TokenAction::kStop : TokenAction::kContinue;
  };
  seq.on_done = [this, g](Result<GenerateResult> result, bool timed_out) {
    if (result.ok()) {
      metrics_.add_generated_tokens(static_cast<int64_t>(result->tokens.size()));
      metrics_.add_cached_prompt_tokens(result->timings.n_prompt_cached);
      // The time limit ends a request as "length" with the text so far (as llama-server's
      // t_max_predict_ms).
      if (timed_out) {
        metrics_.count_timeout();
        result->stop_reason = StopReason::kLength;
      }
      if (result->stop_reason != StopReason::kStop &&
          result->stop_reason != StopReason::kInterrupted && g->filter) {
        g->push(g->filter->flush());
      }
    }
    g->end(std::move(result));
  };

  g->ids.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
  g->ids.created = static_cast<int64_t>(std::time(nullptr));
  g->ids.model = config_.model_id;
  switch (scheduler_.submit(std::move(seq))) {
    case BatchScheduler::Submitted::kQueued:
      break;
    case BatchScheduler::Submitted::kQueueFull:
      res.set_header("Retry-After", "1");
      return send_error(res, server_error(503,
                                          format("all %d sequence slots are busy and the queue "
                                                 "is full; retry later",
                                                 scheduler_.n_slots()),
                                          "server_error", "overloaded"));
    case BatchScheduler::Submitted::kShuttingDown:
      return send_error(res, server_error(503, "the server is shutting down", "server_error"));
  }

  const int64_t n_prompt = static_cast<int64_t>(g->prompt.size());
  if (!g->request.stream) {
    std::string text;
    std::deque<std::string> pieces;
    for (bool ended = false; !ended;) {
      ended = g->take(&pieces);
      for (const std::string& p : pieces) text += p;
    }
    const Result<GenerateResult>& result = *g->result;
    if (!result.ok()) {
      return send_error(res, server_error(500, result.error().message, "server_error"));
    }
    if (result->stop_reason == StopReason::kInterrupted) {
      return send_error(res, server_error(503, "the server is shutting down", "server_error"));
    }
    const int64_t n_gen = static_cast<int64_t>(result->tokens.size());
    const int64_t n_cached = result->timings.n_prompt_cached;
    if (calls) {
      const ParsedReply reply = parse_tool_calls(tool_format_, text, r.tools);
      if (!reply.calls.empty()) {
        res.set_content(dump(tool_calls_response_json(g->ids, reply, n_prompt, n_gen, n_cached)),
                        "application/json");
        return;
      }
      text = reply.content;
    }
    const Json j = response_json(g->request.endpoint, g->ids, text, result->stop_reason, n_prompt,
                                 n_gen, n_cached);
    res.set_content(dump(j), "application/json");
    return;
  }
  if (calls) return stream_tool_calls(g, res, n_prompt, tool_format_);

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [g, n_prompt](size_t, httplib::DataSink& sink) {
        const Endpoint endpoint = g->request.endpoint;
        const bool usage = g->request.include_usage;
        auto send = [&](const std::string& s) {
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        // The opening chunk (for chat, the one with the role), then one per piece of text.
        bool alive = send(sse(chunk_json(endpoint, g->ids, "", true, std::nullopt, usage)));
        std::deque<std::string> pieces;
        for (bool ended = false; alive && !ended;) {
          ended = g->take(&pieces);
          for (const std::string& p : pieces) {
            alive = alive && send(sse(chunk_json(endpoint, g->ids, p, false, std::nullopt, usage)));
          }
        }
        if (!alive) {
          g->cancel->store(true);  // the engine ends it at its next step
          return false;
        }
        const Result<GenerateResult>& result = *g->result;
        if (!result.ok()) {
          ApiError e = server_error(500, result.error().message, "server_error");
          send(sse(error_json(e)));
        } else {
          const int64_t n_gen = static_cast<int64_t>(result->tokens.size());
          send(sse(chunk_json(endpoint, g->ids, "", false, result->stop_reason, usage)));
          if (usage) {
            send(sse(usage_chunk_json(endpoint, g->ids, n_prompt, n_gen,
                                      result->timings.n_prompt_cached)));
          }
        }
        send("data: [DONE]\n\n");
        sink.done();
        return true;
      });
}

}  // namespace qrun::cli::serve
