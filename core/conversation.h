// A chat conversation, independent of any model: the system prompt and messages, the chat
// template that renders them, the tokenizer, and the tokens the KV cache holds. Each turn
// renders and tokenizes the whole conversation, keeps the longest common prefix of those
// tokens and the cached ones (KvCache::truncate drops the rest) and feeds only what follows.
// Invariant: kv_tokens() has exactly kv.n_tokens() entries for the cache it was used with.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/generate.h"
#include "core/jinja/chat_template.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "core/tokenizer/tokenizer.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

// What a turn does when the conversation (plus room for the reply) does not fit.
enum class ContextPolicy {
  kDropOldest,  // drop the oldest user/assistant exchanges until it fits (system prompt kept)
  kShift,       // the same, but until it fits in half the context, so drops come rarely
  kError,       // refuse the turn with kContextOverflow; nothing is changed
};
// "drop-oldest", "shift", "error"
const char* context_policy_name(ContextPolicy policy);
std::optional<ContextPolicy> parse_context_policy(std::string_view name);

// The longest common prefix of two token lists.
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

// The tokens of the next turn and what it takes to feed them.
struct TurnPlan {
  std::vector<int32_t> tokens;  // the whole conversation, rendered with the generation prompt
  int64_t n_reused = 0;         // leading tokens already in the KV cache (< tokens.size())
  int n_dropped = 0;            // messages the context policy dropped
  std::span<const int32_t> feed() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(n_reused));
  }
};

struct TurnOptions {
  ContextPolicy policy = ContextPolicy::kDropOldest;
  int64_t n_reserve = 0;  // context kept free for the reply when deciding what fits
  GenerateParams generate;
  std::vector<std::string> stops;                 // stop strings, cut from the reply
  IsEog is_eog;                                   // null: only the token budget or context ends
  std::function<void(std::string_view)> on_text;  // streamed reply text (may be null)
};

struct TurnResult {
  std::string reply;  // the text streamed, as stored in the assistant message
  GenerateResult generation;
  int64_t n_prompt = 0;   // tokens of the rendered conversation
  int64_t n_reused = 0;   // of those, already in the KV cache
  int64_t n_fed = 0;      // of those, fed this turn
  int n_dropped = 0;      // messages dropped to make room
  double prepare_ms = 0;  // render, tokenize and plan
  double ttft_ms = 0;     // start of the turn to the first sampled token
};

class Conversation {
 public:
  // `tokenizer` must outlive the conversation.
  Conversation(const Tokenizer& tokenizer, ChatTemplate chat_template);

  const ChatTemplate& chat_template() const { return template_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }

  // The system prompt ("" for none) is rendered first and never dropped.
  const std::string& system_prompt() const { return system_prompt_; }
  void set_system_prompt(std::string text) { system_prompt_ = std::move(text); }
  // The messages after the system prompt, oldest first.
  const std::vector<ChatMessage>& messages() const { return messages_; }
  void add_message(std::string role, std::string content);
  // Forgets the messages (keeps the system prompt).
  void clear() { messages_.clear(); }
  // Drops the last message when it is the assistant's (for /regen); false otherwise.
  bool drop_last_reply();
  // Drops the last exchange: the last user message and everything after it (for /undo).
  // Returns the number of messages dropped (0 when there is no user message).
  int undo();

  // The conversation through the template (bos/eos texts from the vocabulary).
  Result<std::string> render(bool add_generation_prompt) const;
  // render() tokenized with special tokens parsed, BOS first when the vocabulary asks for one.
  Result<std::vector<int32_t>> tokenize(bool add_generation_prompt) const;

  // The tokens at positions 0 .. kv.n_tokens() - 1 of the cache this conversation fills.
  const std::vector<int32_t>& kv_tokens() const { return kv_tokens_; }
  // Call after the cache was cleared or replaced behind the conversation's back.
  void forget_cache() { kv_tokens_.clear(); }
  // Call after the cache was restored (core/prompt_cache.h) to hold exactly `tokens`.
  void adopt_cache(std::span<const int32_t> tokens) {
    kv_tokens_.assign(tokens.begin(), tokens.end());
  }

  // Tokenizes the conversation with the generation prompt and applies `policy` so that it
  // fits in `n_ctx` with `n_reserve` tokens to spare (dropped messages are gone when this
  // succeeds). Errors leave everything unchanged: kContextOverflow when the policy is kError
  // and it does not fit, or when even the system prompt and the last message alone do not.
  Result<TurnPlan> plan_turn(int64_t n_ctx, ContextPolicy policy, int64_t n_reserve);

  // One assistant turn after the last message: plans it, truncates `kv` to the reused prefix,
  // replays that prefix into `sampler` (reset first) so penalties see the whole context,
  // feeds the rest and generates. The reply streams through options.on_text (stop strings
  // cut, end-of-turn tokens never shown) and is added as an assistant message, also when
  // generation was interrupted (a non-empty partial reply is kept).
  Result<TurnResult> respond(Model& model, Backend& backend, KvCache& kv, Sampler& sampler,
                             const TurnOptions& options);

  // Rebuilds the cache for the conversation as it stands (after loading one): feeds the
  // rendered conversation without a generation prompt, reusing any common prefix. Returns the
  // tokens fed. kContextOverflow when it does not fit in the cache.
  Result<int64_t> prefill(Model& model, Backend& backend, KvCache& kv, int64_t n_batch);

  // {"system_prompt": "...", "messages": [{"role": ..., "content": ...}, ...]}
  nlohmann::ordered_json to_json() const;
  // Replaces the system prompt and messages from to_json()'s format; a leading "system"
  // message in "messages" is taken as the system prompt. kFormat errors name `origin`.
  Result<void> load_json(const nlohmann::ordered_json& j, const std::string& origin);

 private:
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  std::string system_prompt_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> kv_tokens_;
};

// The tokens that end an assistant turn for this vocabulary and template: every token the
// tokenizer calls end-of-generation, and every token whose text is one of the template's
// end-of-turn markers. Indexed by token id.
std::vector<bool> end_of_turn_tokens(const Tokenizer& tokenizer, const ChatTemplate& tmpl);

}  // namespace qrun
