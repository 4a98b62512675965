// The sampler chain and its first stages. The random draw uses the raw 32-bit outputs of
// std::mt19937 (fully specified by the standard), not a library distribution, so the same
// seed picks the same tokens with any standard library.
#include "core/sampling.h"

#include <algorithm>
#include <cmath>

#include "ggml-like/result.h"

namespace qrun {
namespace {

class TemperatureStage final : public SamplerStage {
 public:
  explicit TemperatureStage(float t) : inv_t_(1.0f / t) {}
  std::string_view name() const override { return "temperature"; }
  void apply(CandidateList& c, std::mt19937&) override {
    for (TokenCandidate& tc : c.items) tc.logit *= inv_t_;
  }

 private:
  float inv_t_;
};

class GreedyStage final : public SamplerStage {
 public:
  std::string_view name() const override { return "greedy"; }
  void apply(CandidateList& c, std::mt19937&) override {
    QRUN_CHECK(!c.items.empty(), "greedy: no candidates");
    const TokenCandidate* best = &c.items[0];
    for (const TokenCandidate& tc : c.items) {
      if (tc.logit > best->logit || (tc.logit == best->logit && tc.id < best->id)) best = &tc;
    }
    c.selected = best->id;
  }
};

class DistStage final : public SamplerStage {
 public:
  std::string_view name() const override { return "dist"; }
  void apply(CandidateList& c, std::mt19937& rng) override {
    QRUN_CHECK(!c.items.empty(), "dist: no candidates");
    float max = c.items[0].logit;
    for (const TokenCandidate& tc : c.items) max = std::max(max, tc.logit);
    double sum = 0.0;
    for (const TokenCandidate& tc : c.items) sum += std::exp(static_cast<double>(tc.logit - max));
    // u in [0, 1) from 53 random bits.
    const uint64_t hi = rng() >> 5;
    const uint64_t lo = rng() >> 6;
    const double u =
        (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) / 9007199254740992.0;
    const double target = u * sum;
    double acc = 0.0;
    for (const TokenCandidate& tc : c.items) {
      acc += std::exp(static_cast<double>(tc.logit - max));
      if (acc > target) {
        c.selected = tc.id;
        return;
      }
    }
    c.selected = c.items.back().id;  // rounding left target at the very top
  }
};

}  // namespace

std::unique_ptr<SamplerStage> make_temperature_stage(float t) {
  QRUN_CHECK(t > 0.0f, "temperature %g must be positive", static_cast<double>(t));
  return std::make_unique<TemperatureStage>(t);
}
std::unique_ptr<SamplerStage> make_greedy_stage() {
  return std::make_unique<GreedyStage>();
}
std::unique_ptr<SamplerStage> make_dist_stage() {
  return std::make_unique<DistStage>();
}

Sampler& Sampler::add(std::unique_ptr<SamplerStage> stage) {
  stages_.push_back(std::move(stage));
  return *this;
}

int32_t Sampler::sample(std::span<const float> logits) {
  candidates_.items.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_.items[i] = TokenCandidate{static_cast<int32_t>(i), logits[i]};
  }
  candidates_.selected = -1;
  for (const std::unique_ptr<SamplerStage>& s : stages_) {
    s->apply(candidates_, rng_);
    if (candidates_.selected >= 0) break;
  }
  QRUN_CHECK(candidates_.selected >= 0, "sampler chain of %zu stages picked no token",
             stages_.size());
  return candidates_.selected;
}

void Sampler::accept(int32_t token) {
  for (const std::unique_ptr<SamplerStage>& s : stages_) s->accept(token);
}

void Sampler::reset() {
  for (const std::unique_ptr<SamplerStage>& s : stages_) s->reset();
}

Sampler make_sampler(const SamplingParams& params) {
  Sampler s(params.seed);
  if (params.temperature <= 0.0f) {
    s.add(make_greedy_stage());
  } else {
    s.add(make_temperature_stage(params.temperature));
    s.add(make_dist_stage());
  }
  return s;
}

}  // namespace qrun
