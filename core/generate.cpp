// The generation loop. The prompt goes through the model in n_batch chunks (only the last
// chunk's final logits are kept); then each step samples from the latest logits, emits the
// token and feeds it back. The logits row is the only allocation, made once per call.
#include "core/generate.h"

#include <algorithm>
#include <chrono>

namespace qrun {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool interrupted(const GenerateParams& params) {
  return params.interrupt != nullptr && params.interrupt->load(std::memory_order_relaxed);
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
  result.timings.prompt_ms = ms_since(t_start);
  for (const int32_t t : prompt) sampler.accept_prompt(t);

  // Generation: sample, emit, feed. At most n_free + 1 tokens can be emitted.
  const int64_t max_gen =
      params.n_predict >= 0 ? std::min(params.n_predict, kv.n_free() + 1) : kv.n_free() + 1;
  result.tokens.reserve(static_cast<size_t>(max_gen));
  const auto t_gen = Clock::now();
  for (;;) {
    if (params.n_predict >= 0 && result.timings.n_gen >= params.n_predict) {
      result.stop_reason = StopReason::kLength;
      break;
    }
    const int32_t token = sampler.sample(logits);
    if (result.timings.n_gen == 0) result.timings.ttft_ms = ms_since(t_start);
    ++result.timings.n_gen;
    sampler.accept(token);
    if (is_eog && is_eog(token)) {
      result.stop_reason = StopReason::kEos;
      break;
    }
    result.tokens.push_back(token);
    const TokenAction action = on_token ? on_token(token) : TokenAction::kContinue;
    if (action == TokenAction::kStop) {
      result.stop_reason = StopReason::kStop;
      break;
    }
    if (action == TokenAction::kInterrupt) {
      result.stop_reason = StopReason::kInterrupted;
      break;
    }
    if (sampler.constraint_complete()) {  // a grammar allows nothing more: as at an EOS
      result.stop_reason = StopReason::kEos;
      break;
    }
    if (params.n_predict >= 0 && result.timings.n_gen >= params.n_predict) {
      result.stop_reason = StopReason::kLength;
      break;
    }
    if (kv.n_free() == 0) {
      result.stop_reason = StopReason::kContext;
      break;
    }
    if (interrupted(params)) {
      result.stop_reason = StopReason::kInterrupted;
      break;
    }
    QRUN_TRY(model.forward(backend, std::span<const int32_t>(&token, 1), kv.n_tokens(), kv, false,
                           logits.data()));
  }
  result.timings.gen_ms = ms_since(t_gen);
  return result;
}

}  // namespace qrun
