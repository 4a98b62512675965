// Token sampling as a chain of small stages over a candidate list, with a seeded
// std::mt19937 owned by the Sampler, so that a run is reproducible bit for bit. Stages
// filter or reshape the candidates (temperature now; top-k, top-p, min-p, penalties later)
// and the last stage picks a token (greedy or a draw from the softmax).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace qrun {

struct TokenCandidate {
  int32_t id;
  float logit;
};

// The candidates a stage sees. `selected` is set (>= 0) by the picking stage.
struct CandidateList {
  std::vector<TokenCandidate> items;
  int32_t selected = -1;
};

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual std::string_view name() const = 0;
  virtual void apply(CandidateList& candidates, std::mt19937& rng) = 0;
  // Sees every token that joins the sequence (for repetition penalties).
  virtual void accept(int32_t token) {}
  virtual void reset() {}
};

// Divides logits by t (t > 0).
std::unique_ptr<SamplerStage> make_temperature_stage(float t);
// Picks the highest logit; ties go to the lowest token id.
std::unique_ptr<SamplerStage> make_greedy_stage();
// Picks at random from the softmax of the logits.
std::unique_ptr<SamplerStage> make_dist_stage();

class Sampler {
 public:
  explicit Sampler(uint32_t seed = 0) : rng_(seed) {}
  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;

  Sampler& add(std::unique_ptr<SamplerStage> stage);
  // Runs the chain over one row of logits (n_vocab floats) and returns the chosen id.
  // QRUN_CHECKs that the chain picked a token.
  int32_t sample(std::span<const float> logits);
  // Tells every stage that `token` joined the sequence.
  void accept(int32_t token);
  void reset();
  size_t n_stages() const { return stages_.size(); }

 private:
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  CandidateList candidates_;
  std::mt19937 rng_;
};

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  uint32_t seed = 0;
};

// Greedy when temperature <= 0, else temperature then a draw.
Sampler make_sampler(const SamplingParams& params);

}  // namespace qrun
