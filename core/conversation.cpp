// Conversation state and turns: render + tokenize the whole conversation, reuse the cached
// prefix, apply the context policy by dropping whole exchanges from the oldest, generate,
// and keep the bookkeeping of which tokens the KV cache holds in step with the cache.
#include "core/conversation.h"

#include <algorithm>
#include <chrono>

#include "core/stop_strings.h"

namespace qrun {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Index of the first message after the oldest exchange: the next user message after
// messages[0]. 0 when there is no such message (only the current exchange is left).
size_t end_of_oldest_exchange(const std::vector<ChatMessage>& messages) {
  for (size_t i = 1; i < messages.size(); ++i) {
    if (messages[i].role == "user") return i;
  }
  return 0;
}

}  // namespace

const char* context_policy_name(ContextPolicy policy) {
  switch (policy) {
    case ContextPolicy::kDropOldest:
      return "drop-oldest";
    case ContextPolicy::kShift:
      return "shift";
    case ContextPolicy::kError:
      return "error";
  }
  return "?";
}

std::optional<ContextPolicy> parse_context_policy(std::string_view name) {
  for (ContextPolicy p :
       {ContextPolicy::kDropOldest, ContextPolicy::kShift, ContextPolicy::kError}) {
    if (name == context_policy_name(p)) return p;
  }
  return std::nullopt;
}

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

Conversation::Conversation(const Tokenizer& tokenizer, ChatTemplate chat_template)
    : tokenizer_(tokenizer), template_(std::move(chat_template)) {}

void Conversation::add_message(std::string role, std::string content) {
  messages_.push_back(ChatMessage{std::move(role), std::move(content)});
}

bool Conversation::drop_last_reply() {
  if (messages_.empty() || messages_.back().role != "assistant") return false;
  messages_.pop_back();
  return true;
}

int Conversation::undo() {
  for (size_t i = messages_.size(); i-- > 0;) {
    if (messages_[i].role == "user") {
      const int n = static_cast<int>(messages_.size() - i);
      messages_.resize(i);
      return n;
    }
  }
  return 0;
}

namespace {

Result<std::string> render_messages(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                    const std::string& system_prompt,
                                    const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt) {
  std::vector<ChatMessage> all;
  all.reserve(messages.size() + 1);
  if (!system_prompt.empty()) all.push_back(ChatMessage{"system", system_prompt});
  all.insert(all.end(), messages.begin(), messages.end());
  if (!tmpl.supports_system_role()) fold_system_message(all);  // Gemma 2's, as llama.cpp
  ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  if (tokenizer.bos() != kNoToken) options.bos_token = tokenizer.token_text(tokenizer.bos());
  if (tokenizer.eos() != kNoToken) options.eos_token = tokenizer.token_text(tokenizer.eos());
  return tmpl.render(all, options);
}

// Templates that write bos_token themselves get it parsed as the BOS token; the others get
// one in front when the vocabulary asks for it. EOS is never added: the turn is not over.
std::vector<int32_t> tokenize_rendered(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/false,
                                                 /*parse_special=*/true);
  const int32_t bos = tokenizer.bos();
  if (tokenizer.add_bos() && bos != kNoToken && (tokens.empty() || tokens.front() != bos))
    tokens.insert(tokens.begin(), bos);
  return tokens;
}

Result<std::vector<int32_t>> tokenize_messages(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                               const std::string& system_prompt,
                                               const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt) {
  Result<std::string> text =
      render_messages(tokenizer, tmpl, system_prompt, messages, add_generation_prompt);
  if (!text.ok()) return text.error();
  return tokenize_rendered(tokenizer, *text);
}

}  // namespace

Result<std::string> Conversation::render(bool add_generation_prompt) const {
  return render_messages(tokenizer_, template_, system_prompt_, messages_, add_generation_prompt);
}

Result<std::vector<int32_t>> Conversation::tokenize(bool add_generation_prompt) const {
  return tokenize_messages(tokenizer_, template_, system_prompt_, messages_, add_generation_prompt);
}

Result<TurnPlan> Conversation::plan_turn(int64_t n_ctx, ContextPolicy policy, int64_t n_reserve) {
  Result<std::vector<int32_t>> first = tokenize(true);
  if (!first.ok()) return first.error();
  TurnPlan plan;
  plan.tokens = std::move(*first);
  auto needed = [&](const std::vector<int32_t>& t) {
    return static_cast<int64_t>(t.size()) + n_reserve;
  };

  if (needed(plan.tokens) > n_ctx) {
    if (policy == ContextPolicy::kError) {
      return make_error(
          ErrorCode::kContextOverflow,
          format("context full: the conversation is %zu tokens, plus %lld kept for the reply, "
                 "but the context holds %lld (--context-policy error); nothing was sent: "
                 "/undo or /clear make room, or restart with a larger -c",
                 plan.tokens.size(), static_cast<long long>(n_reserve),
                 static_cast<long long>(n_ctx)));
    }
    // Drop whole exchanges from the oldest, on a copy, until it fits in the target.
    const int64_t target = policy == ContextPolicy::kShift ? n_ctx / 2 : n_ctx;
    std::vector<ChatMessage> kept = messages_;
    while (needed(plan.tokens) > target) {
      const size_t end = end_of_oldest_exchange(kept);
      if (end == 0) break;
      kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(end));
      plan.n_dropped += static_cast<int>(end);
      Result<std::vector<int32_t>> t =
          tokenize_messages(tokenizer_, template_, system_prompt_, kept, true);
      if (!t.ok()) return t.error();
      plan.tokens = std::move(*t);
    }
    if (static_cast<int64_t>(plan.tokens.size()) >= n_ctx) {
      return make_error(
          ErrorCode::kContextOverflow,
          format("the message does not fit in the context even alone: with the system prompt "
                 "and the template it is %zu tokens, and the context holds %lld; nothing was "
                 "sent: shorten it, shorten the system prompt, or restart with a larger -c",
                 plan.tokens.size(), static_cast<long long>(n_ctx)));
    }
    messages_ = std::move(kept);
  }
  // Feed at least one token: generation needs the logits of the last one.
  plan.n_reused = std::min(common_prefix(kv_tokens_, plan.tokens),
                           static_cast<int64_t>(plan.tokens.size()) - 1);
  return plan;
}

Result<TurnResult> Conversation::respond(Model& model, Backend& backend, KvCache& kv,
                                         Sampler& sampler, const TurnOptions& options) {
  QRUN_CHECK(static_cast<int64_t>(kv_tokens_.size()) == kv.n_tokens(),
             "the conversation tracks %zu cached tokens but the cache holds %lld",
             kv_tokens_.size(), static_cast<long long>(kv.n_tokens()));
  const auto t0 = Clock::now();
  Result<TurnPlan> planned = plan_turn(kv.n_ctx(), options.policy, options.n_reserve);
  if (!planned.ok()) return planned.error();
  TurnPlan& plan = *planned;
  // A sliding-window layer may no longer hold what the reused prefix needs: start over.
  plan.n_reused = kv.keepable(plan.n_reused);

  TurnResult turn;
  turn.n_prompt = static_cast<int64_t>(plan.tokens.size());
  turn.n_reused = plan.n_reused;
  turn.n_fed = turn.n_prompt - plan.n_reused;
  turn.n_dropped = plan.n_dropped;

  kv.truncate(plan.n_reused);
  kv_tokens_.resize(static_cast<size_t>(plan.n_reused));
  sampler.reset();
  for (int64_t i = 0; i < plan.n_reused; ++i)
    sampler.accept_prompt(plan.tokens[static_cast<size_t>(i)]);
  turn.prepare_ms = ms_since(t0);

  StopStringFilter filter(tokenizer_, options.stops);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    turn.reply += text;
    if (options.on_text) options.on_text(text);
  };
  auto on_token = [&](int32_t token) {
    StopChunk chunk = filter.push(token);
    emit(chunk.text);
    return chunk.stopped ? TokenAction::kStop : TokenAction::kContinue;
  };
  GenerateParams params = options.generate;
  params.speculative.history = kv_tokens_;  // what the cache holds before plan.feed()
  Result<GenerateResult> generated =
      generate(model, backend, kv, plan.feed(), params, sampler, on_token, options.is_eog);

  // The cache holds a prefix of the prompt followed by the generated tokens: every one but
  // the last, which is not fed when generation stops on it.
  std::vector<int32_t> held = plan.tokens;
  if (generated.ok()) held.insert(held.end(), generated->tokens.begin(), generated->tokens.end());
  QRUN_CHECK(kv.n_tokens() <= static_cast<int64_t>(held.size()),
             "the cache holds %lld tokens, more than the %zu fed",
             static_cast<long long>(kv.n_tokens()), held.size());
  held.resize(static_cast<size_t>(kv.n_tokens()));
  kv_tokens_ = std::move(held);
  if (!generated.ok()) return generated.error();

  emit(filter.flush());
  turn.generation = std::move(*generated);
  if (turn.generation.timings.n_gen > 0)
    turn.ttft_ms = turn.prepare_ms + turn.generation.timings.ttft_ms;
  messages_.push_back(ChatMessage{"assistant", turn.reply});
  return turn;
}

Result<int64_t> Conversation::prefill(Model& model, Backend& backend, KvCache& kv,
                                      int64_t n_batch) {
  QRUN_CHECK(static_cast<int64_t>(kv_tokens_.size()) == kv.n_tokens(),
             "the conversation tracks %zu cached tokens but the cache holds %lld",
             kv_tokens_.size(), static_cast<long long>(kv.n_tokens()));
  std::vector<int32_t> tokens;
  if (!messages_.empty() || !system_prompt_.empty()) {
    Result<std::vector<int32_t>> t = tokenize(false);
    if (!t.ok()) return t.error();
    tokens = std::move(*t);
  }
  if (static_cast<int64_t>(tokens.size()) >= kv.n_ctx()) {
    return make_error(ErrorCode::kContextOverflow,
                      format("the conversation is %zu tokens but the context holds %lld; "
                             "restart with a larger -c",
                             tokens.size(), static_cast<long long>(kv.n_ctx())));
  }
  const int64_t n_keep = kv.keepable(common_prefix(kv_tokens_, tokens));
  kv.truncate(n_keep);
  kv_tokens_.resize(static_cast<size_t>(n_keep));
  std::vector<float> logits(static_cast<size_t>(model.hparams().n_vocab));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t step = std::max<int64_t>(1, n_batch);
  for (int64_t i = n_keep; i < n; i += step) {
    const int64_t len = std::min(step, n - i);
    Result<void> r = model.forward(
        backend,
        std::span<const int32_t>(tokens).subspan(static_cast<size_t>(i), static_cast<size_t>(len)),
        i, kv, false, logits.data());
    if (!r.ok()) {
      kv_tokens_.assign(tokens.begin(), tokens.begin() + kv.n_tokens());
      return r.error();
    }
  }
  kv_tokens_ = std::move(tokens);
  return n - n_keep;
}

nlohmann::ordered_json Conversation::to_json() const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages_)
    messages.push_back({{"role", m.role}, {"content", m.content}});
  return {{"system_prompt", system_prompt_}, {"messages", std::move(messages)}};
}

Result<void> Conversation::load_json(const nlohmann::ordered_json& j, const std::string& origin) {
  auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kFormat, origin + ": " + what);
  };
  if (!j.is_object()) return bad("expected a JSON object with \"messages\"");
  std::string system;
  if (j.contains("system_prompt")) {
    if (!j["system_prompt"].is_string()) return bad("\"system_prompt\" is not a string");
    system = j["system_prompt"].get<std::string>();
  }
  if (!j.contains("messages") || !j["messages"].is_array()) return bad("no \"messages\" array");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const nlohmann::ordered_json& m = j["messages"][i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return bad(format("message %zu needs string \"role\" and \"content\"", i));
    }
    std::string role = m["role"].get<std::string>();
    std::string content = m["content"].get<std::string>();
    if (role == "system" && messages.empty()) {
      system = std::move(content);
      continue;
    }
    messages.push_back(ChatMessage{std::move(role), std::move(content)});
  }
  system_prompt_ = std::move(system);
  messages_ = std::move(messages);
  return {};
}

std::vector<bool> end_of_turn_tokens(const Tokenizer& tokenizer, const ChatTemplate& tmpl) {
  const std::vector<std::string> markers = tmpl.end_of_turn_markers();
  std::vector<bool> eot(static_cast<size_t>(tokenizer.n_vocab()), false);
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    eot[static_cast<size_t>(id)] =
        tokenizer.is_eog(id) ||
        std::find(markers.begin(), markers.end(), tokenizer.token_text(id)) != markers.end();
  }
  return eot;
}

}  // namespace qrun
