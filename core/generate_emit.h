// What happens to each sampled token, shared by the plain generation loop (generate.cpp)
// and speculative decoding (speculative.cpp), so that both stop for the same reasons at
// the same tokens: count it, tell the sampler, end at an end-of-generation token, stream
// it, then stop for a stop string, a complete grammar, the token budget, a full context or
// an interruption. Internal to core/.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/generate.h"

namespace qrun {

class TokenEmitter {
 public:
  using Clock = std::chrono::steady_clock;

  TokenEmitter(const GenerateParams& params, Sampler& sampler, const OnToken& on_token,
               const IsEog& is_eog, GenerateResult& result, Clock::time_point t_start)
      : params_(params),
        sampler_(sampler),
        on_token_(on_token),
        is_eog_(is_eog),
        result_(result),
        t_start_(t_start) {}

  // Whether the token budget is spent before anything is sampled (n_predict 0).
  bool budget_spent() const {
    return params_.n_predict >= 0 && result_.timings.n_gen >= params_.n_predict;
  }
  // Tokens the budget still allows, or -1 when there is no budget.
  int64_t budget_left() const {
    return params_.n_predict >= 0 ? params_.n_predict - result_.timings.n_gen : -1;
  }
  bool interrupted() const {
    return (params_.interrupt != nullptr && params_.interrupt->load(std::memory_order_relaxed)) ||
           (params_.deadline != Clock::time_point::max() && Clock::now() >= params_.deadline);
  }

  // Emits `token`, sampled when the cache holds every token before it and has n_free
  // positions left. Returns why generation stops here, or nullopt when the token is to be
  // fed and generation goes on.
  std::optional<StopReason> emit(int32_t token, int64_t n_free) {
    GenerateTimings& t = result_.timings;
    if (t.n_gen == 0) {
      t.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start_).count();
    }
    ++t.n_gen;
    sampler_.accept(token);
    if (is_eog_ && is_eog_(token)) return StopReason::kEos;
    result_.tokens.push_back(token);
    const TokenAction action = on_token_ ? on_token_(token) : TokenAction::kContinue;
    if (action == TokenAction::kStop) return StopReason::kStop;
    if (action == TokenAction::kInterrupt) return StopReason::kInterrupted;
    if (sampler_.constraint_complete()) return StopReason::kEos;  // as at an EOS
    if (budget_spent()) return StopReason::kLength;
    if (n_free == 0) return StopReason::kContext;
    if (interrupted()) return StopReason::kInterrupted;
    return std::nullopt;
  }

 private:
  const GenerateParams& params_;
  Sampler& sampler_;
  const OnToken& on_token_;
  const IsEog& is_eog_;
  GenerateResult& result_;
  Clock::time_point t_start_;
};

}  // namespace qrun
