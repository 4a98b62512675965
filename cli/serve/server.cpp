// The routes of `qrun serve` and one completion request from body to last byte. Streaming
// runs the whole generation inside httplib's chunked content provider, so each token's chunk
// is written as it is sampled, and a failed write (the client is gone) interrupts generation
// and gives the slot back.
#include "cli/serve/server.h"

#include <chrono>
#include <cstdio>
#include <ctime>
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
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
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
      model_(*session.model),
      slot_ctx_(slots.front().n_ctx()),
      pool_(std::move(slots), max_queued),
      config_(std::move(config)),
      kv_used_(std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(pool_.n_slots()))) {
  if (chat_template.ok()) {
    template_.emplace(std::move(*chat_template));
    end_of_turn_ = end_of_turn_tokens(*s_.tokenizer, *template_);
  } else {
    template_error_ = chat_template.error().message;
  }
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
    g.slots = pool_.n_slots();
    g.running = pool_.n_busy();
    g.queued = pool_.n_queued();
    for (int i = 0; i < pool_.n_slots(); ++i) g.kv_tokens_used += kv_used_[static_cast<size_t>(i)];
    g.kv_tokens_total = slot_ctx_ * pool_.n_slots();
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

Result<void> Server::attach(std::shared_ptr<const Grammar> grammar, bool chat, Sampler& sampler) {
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
      make_grammar_stage(std::move(grammar), vocab_, std::move(is_eog));
  if (!stage.ok()) return stage.error();
  sampler.set_constraint(std::move(*stage));
  return {};
}

// The state of one generation, shared between the handler and the streaming provider.
struct Generation {
  CompletionRequest request;
  std::vector<int32_t> prompt;
  SlotLease lease;
  ResponseIds ids;
  std::chrono::steady_clock::time_point arrival;
};

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
    if (tokenizer.bos() != kNoToken) options.bos_token = tokenizer.token_text(tokenizer.bos());
    if (tokenizer.eos() != kNoToken) options.eos_token = tokenizer.token_text(tokenizer.eos());
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
               "must leave room for at least one generated token; raise -c or lower -np)",
               g->prompt.size(), static_cast<long long>(slot_ctx_)),
        "invalid_request_error", "context_length_exceeded");
    e.param = chat ? "messages" : "prompt";
    return send_error(res, e);
  }

  AcquireResult acquired = pool_.acquire(&shutting_down_);
  if (acquired.status == AcquireStatus::kQueueFull) {
    res.set_header("Retry-After", "1");
    return send_error(res, server_error(503,
                                        format("all %d sequence slots are busy and the queue "
                                               "is full; retry later",
                                               pool_.n_slots()),
                                        "server_error", "overloaded"));
  }
  if (acquired.status == AcquireStatus::kCancelled) {
    return send_error(res, server_error(503, "the server is shutting down", "server_error"));
  }
  g->lease = std::move(acquired.lease);
  g->ids.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1));
  g->ids.created = static_cast<int64_t>(std::time(nullptr));
  g->ids.model = config_.model_id;

  // Runs the generation; `write` gets each piece of text (false: the client is gone).
  auto run = [this, g, chat](const std::function<bool(const std::string&)>& write,
                             std::string* text_out) -> Result<GenerateResult> {
    const CompletionRequest& r = g->request;
    // The time limit starts now that the request holds a slot.
    Clock::time_point deadline = Clock::time_point::max();
    if (config_.timeout_s > 0) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(config_.timeout_s));
    }
    Result<SamplingParams> defaults = resolve_sampling_params(config_.sampling, *s_.tokenizer);
    if (!defaults.ok()) return defaults.error();
    SamplingParams sp = request_sampling(r, *defaults);
    if (!r.seed && config_.sampling.seed < 0) sp.seed = std::random_device{}();
    Sampler sampler = make_sampler(sp);
    // The request's response_format, else the server's grammar flag.
    QRUN_TRY(attach(r.grammar ? r.grammar : config_.sampling.grammar, chat, sampler));

    StopStringFilter filter(*s_.tokenizer, r.stop ? *r.stop : config_.sampling.stops);
    KvCache& kv = g->lease.kv();
    std::atomic<int64_t>& kv_used = kv_used_[static_cast<size_t>(g->lease.slot())];
    kv.clear();
    metrics_.add_prompt_tokens(static_cast<int64_t>(g->prompt.size()));
    Clock::time_point last_token = g->arrival;
    bool first_token = true;
    bool client_gone = false;
    auto emit = [&](const std::string& piece) {
      if (piece.empty() || client_gone) return;
      *text_out += piece;
      client_gone = !write(piece);
    };
    OnToken on_token = [&](int32_t token) {
      const Clock::time_point now = Clock::now();
      const double seconds = std::chrono::duration<double>(now - last_token).count();
      if (first_token)
        metrics_.observe_ttft(seconds);
      else
        metrics_.observe_inter_token(seconds);
      first_token = false;
      last_token = now;
      kv_used = kv.n_tokens();  // the prompt and the tokens fed so far (not yet this one)
      const StopChunk chunk = filter.push(token);
      emit(chunk.text);
      if (client_gone) return TokenAction::kInterrupt;
      return chunk.stopped ? TokenAction::kStop : TokenAction::kContinue;
    };
    IsEog is_eog;
    if (!config_.sampling.ignore_eos) {
      if (chat) {
        is_eog = [this](int32_t t) {
          return t >= 0 && static_cast<size_t>(t) < end_of_turn_.size() &&
                 end_of_turn_[static_cast<size_t>(t)];
        };
      } else {
        is_eog = [this](int32_t t) { return s_.tokenizer->is_eog(t); };
      }
    }
    GenerateParams gp;
    gp.n_predict = r.max_tokens;
    gp.n_batch = config_.n_batch;
    gp.interrupt = &shutting_down_;
    gp.deadline = deadline;
    Result<GenerateResult> result =
        generate(model_, *s_.backend, kv, g->prompt, gp, sampler, on_token, is_eog);
    kv_used = 0;
    if (!result.ok()) return result;
    metrics_.add_generated_tokens(static_cast<int64_t>(result->tokens.size()));
    // Interrupted with the client there and no shutdown: the time limit ended it, which the
    // client sees as "length" with the text so far (as llama-server's t_max_predict_ms).
    if (result->stop_reason == StopReason::kInterrupted && !client_gone && !shutting_down_.load() &&
        Clock::now() >= deadline) {
      metrics_.count_timeout();
      result->stop_reason = StopReason::kLength;
    }
    if (result->stop_reason != StopReason::kStop &&
        result->stop_reason != StopReason::kInterrupted) {
      emit(filter.flush());
    }
    return result;
  };

  const int64_t n_prompt = static_cast<int64_t>(g->prompt.size());
  if (!g->request.stream) {
    std::string text;
    Result<GenerateResult> result = run([](const std::string&) { return true; }, &text);
    g->lease.release();
    if (!result.ok()) {
      return send_error(res, server_error(500, result.error().message, "server_error"));
    }
    if (result->stop_reason == StopReason::kInterrupted) {
      return send_error(res, server_error(503, "the server is shutting down", "server_error"));
    }
    const Json j = response_json(g->request.endpoint, g->ids, text, result->stop_reason, n_prompt,
                                 static_cast<int64_t>(result->tokens.size()));
    res.set_content(dump(j), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [g, run, n_prompt](size_t, httplib::DataSink& sink) {
        const Endpoint endpoint = g->request.endpoint;
        const bool usage = g->request.include_usage;
        auto send = [&](const std::string& s) {
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        std::string text;
        // The opening chunk (for chat, the one with the role), then one per piece of text.
        bool alive = send(sse(chunk_json(endpoint, g->ids, "", true, std::nullopt, usage)));
        Result<GenerateResult> result = run(
            [&](const std::string& piece) {
              alive = alive &&
                      send(sse(chunk_json(endpoint, g->ids, piece, false, std::nullopt, usage)));
              return alive;
            },
            &text);
        g->lease.release();  // the slot is free before the last bytes go out
        if (!alive) return false;
        if (!result.ok()) {
          ApiError e = server_error(500, result.error().message, "server_error");
          send(sse(error_json(e)));
        } else {
          const int64_t n_gen = static_cast<int64_t>(result->tokens.size());
          send(sse(chunk_json(endpoint, g->ids, "", false, result->stop_reason, usage)));
          if (usage) send(sse(usage_chunk_json(endpoint, g->ids, n_prompt, n_gen)));
        }
        send("data: [DONE]\n\n");
        sink.done();
        return true;
      });
}

}  // namespace qrun::cli::serve
