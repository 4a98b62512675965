// The generation loop. The prompt goes through the model in n_batch chunks (only the last
// chunk's final logits are kept); then each step samples from the latest logits, emits the
// token and feeds it back, or, with a drafter, speculative decoding takes over after the
// first token (speculative.cpp). The logits row is the only allocation of the plain loop,
// made once per call; a context shift (context_shift.h), when the cache is full, makes
// room and the loop goes on.
#include "core/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/generate_emit.h"
#include "core/speculative.h"

namespace qrun {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool interrupted(const GenerateParams& params) {
  return (params.interrupt != nullptr && params.interrupt->load(std::memory_order_relaxed)) ||
         (params.deadline != Clock::time_point::max() && Clock::now() >= params.deadline);
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kLength:
      return "length";
    case StopReason::kContext:
      return "context";
    case StopReason::kStop:
      return "stop";
    case StopReason::kInterrupted:
      return "interrupted";
  }
  return "?";
}

Result<GenerateResult> generate(Model& model, Backend& backend, KvCache& kv,
                                std::span<const int32_t> prompt, const GenerateParams& params,
                                Sampler& sampler, const OnToken& on_token, const IsEog& is_eog) {
  if (prompt.empty()) {
    return make_error(ErrorCode::kUsage,
                      "the prompt is empty and this model adds no beginning-of-text token, so "
                      "there is nothing to start from");
  }
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt > kv.n_free()) {
    return make_error(
        ErrorCode::kContextOverflow,
        format("the prompt has %lld tokens but the context has room for %lld "
               "(%lld of %lld used)",
               static_cast<long long>(n_prompt), static_cast<long long>(kv.n_free()),
               static_cast<long long>(kv.n_tokens()), static_cast<long long>(kv.n_ctx())));
  }
  QRUN_TRY(model.check_backend(backend));
  const ContextShiftParams& shift = params.context_shift;
  if (shift.enabled && params.speculative.drafter != nullptr) {
    return make_error(ErrorCode::kUsage, "context shift does not work with speculative decoding");
  }
  if (shift.enabled && (shift.n_keep < 0 || shift.n_keep > kv.n_ctx())) {
    return make_error(ErrorCode::kUsage, format("context shift: cannot keep %lld positions of %lld",
                                                static_cast<long long>(shift.n_keep),
                                                static_cast<long long>(kv.n_ctx())));
  }

  GenerateResult result;
  result.timings.n_prompt = n_prompt;
  std::vector<float> logits(static_cast<size_t>(model.hparams().n_vocab));
  const auto t_start = Clock::now();

  // Prompt, in chunks.
  const int64_t n_batch = std::max<int64_t>(1, params.n_batch);
  for (int64_t i = 0; i < n_prompt; i += n_batch) {
    if (interrupted(params)) {
      result.stop_reason = StopReason::kInterrupted;
      result.timings.prompt_ms = ms_since(t_start);
      return result;
    }
    const int64_t n = std::min(n_batch, n_prompt - i);
    QRUN_TRY(model.forward(backend, prompt.subspan(static_cast<size_t>(i), static_cast<size_t>(n)),
                           kv.n_tokens(), kv, false, logits.data()));
  }
  Drafter* drafter = params.speculative.drafter;
  if (drafter != nullptr) {  // the draft model reads the prompt with the target
    std::vector<int32_t> seen(params.speculative.history.begin(), params.speculative.history.end());
    seen.insert(seen.end(), prompt.begin(), prompt.end());
    QRUN_TRY(drafter->prefill(seen));
  }
  result.timings.prompt_ms = ms_since(t_start);
  if (params.on_prompt) QRUN_TRY(params.on_prompt());
  for (const int32_t t : prompt) sampler.accept_prompt(t);
  result.timings.n_passes = 1;  // the prompt's last pass gives the first token

  // Generation. At most n_free + 1 tokens can be emitted.
  const int64_t max_gen =
      params.n_predict >= 0 ? std::min(params.n_predict, kv.n_free() + 1) : kv.n_free() + 1;
  result.tokens.reserve(static_cast<size_t>(max_gen));
  const auto t_gen = Clock::now();
  TokenEmitter emitter(params, sampler, on_token, is_eog, result, t_start);
  if (emitter.budget_spent()) {
    result.stop_reason = StopReason::kLength;
  } else if (drafter != nullptr) {
    result.timings.speculative = true;
    Result<StopReason> stop = speculative_decode(model, backend, kv, prompt, params.speculative,
                                                 sampler, emitter, logits, result.timings);
    if (!stop.ok()) return stop.error();
    result.stop_reason = *stop;
  } else {
    // Plain decoding: sample, emit, feed one token per pass. A full cache is shifted before
    // the token is fed, when a shift drops something.
    for (;;) {
      const int32_t token = sampler.sample(logits);
      const int64_t n_discard =
          shift.enabled && kv.n_free() == 0 ? (kv.n_tokens() - shift.n_keep) / 2 : 0;
      if (const std::optional<StopReason> stop =
              emitter.emit(token, std::max(kv.n_free(), n_discard))) {
        result.stop_reason = *stop;
        break;
      }
      if (n_discard > 0) {
        const auto t_shift = Clock::now();
        const int64_t n_past = kv.n_tokens();
        QRUN_TRY(shift_context(model, backend, kv, shift.n_keep, n_discard));
        ++result.n_context_shifts;
        if (shift.on_shift) shift.on_shift({n_past, shift.n_keep, n_discard, ms_since(t_shift)});
      }
      QRUN_TRY(model.forward(backend, std::span<const int32_t>(&token, 1), kv.n_tokens(), kv, false,
                             logits.data()));
      ++result.timings.n_passes;
    }
  }
  result.timings.gen_ms = ms_since(t_gen);
  return result;
}

}  // namespace qrun
