// The generation loop shared by one-shot runs and the chat REPL: feed a prompt after what
// the KV cache already holds, then sample, stream and feed one token at a time until an
// end-of-generation token, the token budget, the context end (or, with a context shift,
// past it), a stop string (the caller's on_token says so) or an interruption. No
// allocation per token beyond result.tokens (a context shift allocates its own scratch).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/context_shift.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

class Drafter;  // core/speculative.h

// Speculative decoding (core/speculative.h): each round the drafter proposes up to n_max
// tokens, the target scores them in one forward pass and keeps the longest accepted prefix
// plus one token of its own. The output follows the target alone: token for token under a
// greedy chain, in distribution otherwise.
struct SpeculativeParams {
  Drafter* drafter = nullptr;  // null: plain decoding
  int64_t n_max = 16;          // most tokens drafted per round (also capped by n_batch - 1)
  int64_t n_min = 0;           // shorter drafts are dropped (that round decodes one token)
  uint32_t seed = 0;           // the acceptance draws of speculative sampling
  // The tokens the cache holds before the prompt (a chat's earlier turns): the drafter
  // reads them before the prompt. Empty for a fresh cache.
  std::span<const int32_t> history;
};

// Context shift (core/context_shift.h): when the cache is full and a token is to be fed,
// keep positions 0 .. n_keep - 1, drop half of the rest, and go on; on_shift hears of each
// shift. Off, generation stops at the context end (StopReason::kContext), as it does when a
// shift would drop nothing.
struct ContextShiftParams {
  bool enabled = false;
  int64_t n_keep = 0;  // 0 .. kv.n_ctx() (resolve_keep gives llama.cpp's --keep)
  std::function<void(const ContextShift&)> on_shift;
};

struct GenerateParams {
  int64_t n_predict = -1;  // tokens to generate; < 0: until EOG or the context is full
  int64_t n_batch = 512;   // prompt tokens per forward call (interruptions are seen between)
  const std::atomic<bool>* interrupt = nullptr;  // set (e.g. by SIGINT) to stop early
  // Past it, generation stops as if interrupted (checked where `interrupt` is: between
  // prompt chunks and after each token). max(): no limit.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  SpeculativeParams speculative;
  ContextShiftParams context_shift;  // not with a drafter (kUsage)
  // Called once the whole prompt is in the KV cache, before the first token is sampled (a
  // prompt cache file is written there); an error it returns ends generation with it.
  std::function<Result<void>()> on_prompt;
};

enum class StopReason {
  kEos,          // an end-of-generation token (not emitted, not fed), or a complete grammar
  kLength,       // n_predict tokens were generated
  kContext,      // the KV cache is full (and no context shift makes room)
  kStop,         // on_token returned TokenAction::kStop (a stop string was completed)
  kInterrupted,  // on_token returned TokenAction::kInterrupt, *interrupt was set or the
                 // deadline passed
};
// "eos", "length", "context", "stop", "interrupted"
const char* stop_reason_name(StopReason reason);

struct GenerateTimings {
  double load_ms = 0.0;    // filled in by the caller, who loaded the model
  double prompt_ms = 0.0;  // prompt processing
  double gen_ms = 0.0;     // sampling and decoding after the first token
  double ttft_ms = 0.0;    // start of generate() to the first sampled token
  int64_t n_prompt = 0;
  int64_t n_prompt_cached = 0;  // of them, those whose K/V came from a prefix cache (serve)
  int64_t n_gen = 0;            // tokens sampled (emitted ones and a final EOG)
  // Target forward passes that produced sampled tokens (the prompt's last one included):
  // n_gen / n_passes is the tokens per target pass, 1 for plain decoding.
  int64_t n_passes = 0;
  int64_t n_drafted = 0;     // tokens a drafter proposed (speculative decoding)
  int64_t n_accepted = 0;    // of those, the ones the target kept
  bool speculative = false;  // a drafter ran
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens, as passed to on_token
  StopReason stop_reason = StopReason::kLength;
  GenerateTimings timings;
  int64_t n_context_shifts = 0;
};

// What on_token tells the loop after seeing a token.
enum class TokenAction {
  kContinue,   // go on
  kStop,       // stop with StopReason::kStop (e.g. the text now contains a stop string)
  kInterrupt,  // stop with StopReason::kInterrupted
};

// Called with each generated (non-EOG) token, after it is appended to result.tokens.
// When it returns kStop or kInterrupt, that last token is kept in result.tokens but is not
// fed to the model (as with the last token of a kLength stop): the KV cache then holds
// everything before it.
using OnToken = std::function<TokenAction(int32_t token)>;
// True for tokens that end generation; a null IsEog (or one that is never true, as
// --ignore-eos makes it) lets generation run to the token budget or the context end.
using IsEog = std::function<bool(int32_t token)>;

// Runs `prompt` (non-empty) at positions kv.n_tokens() .. and generates after it. The
// cache keeps every fed token, so a chat can call generate() again with the next turn.
// Every prompt token goes to sampler.accept_prompt() and every sampled token (EOG
// included) to sampler.accept(), as llama.cpp does, so repetition penalties see the prompt
// and a grammar constraint sees only the generated text; reuse one Sampler across
// chat turns to keep that history (Sampler::reset() forgets it).
// Errors: an empty prompt or a bad token (kUsage); a prompt that does not fit in the
// remaining context (kContextOverflow); a context shift with a drafter or n_keep outside
// the context (kUsage), or one the model or a sliding-window ring cannot do (see
// shift_context); an interruption during the prompt is not an error.
Result<GenerateResult> generate(Model& model, Backend& backend, KvCache& kv,
                                std::span<const int32_t> prompt, const GenerateParams& params,
                                Sampler& sampler, const OnToken& on_token, const IsEog& is_eog);

}  // namespace qrun
