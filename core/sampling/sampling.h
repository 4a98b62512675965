// Token sampling as a chain of small stages over a candidate list, with a seeded
// std::mt19937 owned by the Sampler, so that a run is reproducible bit for bit. Stages
// filter or reshape the candidates (logit bias, penalties, top-k, typical, top-p, min-p,
// temperature) and the last stage picks a token (greedy, a draw, or mirostat). make_sampler
// builds llama.cpp's default chain, in llama.cpp's order, from SamplingParams.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-like/result.h"

namespace qrun {

struct TokenCandidate {
  int32_t id;
  float logit;
  float p = 0.0f;  // probability; valid only right after softmax() (stages say when)
};

// The candidates a stage sees. Sampler::sample fills `items` in token-id order.
struct CandidateList {
  std::vector<TokenCandidate> items;
  // items[0, n_sorted) are the n_sorted highest logits in descending order (ties: lower id
  // first), and no later item beats them. Stages that change logits other than by a
  // positive scale set it to 0; stages that drop items keep it true.
  int64_t n_sorted = 0;
  int32_t selected = -1;  // set (a token id) by the picking stage
};

// Helpers for stages.
// Makes items[0, min(k, size)) the top k in descending order: a heap for small k,
// nth_element then a sort of the k otherwise.
void sort_prefix(CandidateList& c, int64_t k);
// Sets `out` to the min(k, size) highest of `logits` as candidates in descending order
// (ties: lower id first), exactly the prefix sort_prefix would give on the whole row, in
// one pass that keeps a few times k of them: far less than filling every token's candidate.
// With `keep` (one byte per logit), a token it marks 0 counts as -inf.
void select_top(std::span<const float> logits, int64_t k, std::vector<TokenCandidate>& out,
                std::span<const uint8_t> keep = {});
// Sets every item's p to the softmax of the logits (order unchanged). All -inf: uniform.
void softmax(CandidateList& c);
// Draws an index into items from their p values with 53 bits of the rng (never an item
// with p == 0 unless all are 0).
size_t draw_index(const CandidateList& c, std::mt19937& rng);

class SamplerStage {
 public:
  // What a stage is to speculative sampling, which needs the chain's law as a distribution.
  enum class Kind {
    kFilter,  // a function of the candidates alone (bias, top-k, typical, top-p, min-p, temp)
    kDraw,    // picks by a draw from the softmax of the candidates
    kGreedy,  // picks the highest logit
    kOther,   // depends on history or adaptive state (penalties, mirostat): no fixed law
  };
  virtual ~SamplerStage() = default;
  virtual std::string_view name() const = 0;
  // kOther unless a stage says otherwise, so a new stage is never assumed history-free.
  virtual Kind kind() const { return Kind::kOther; }
  // k > 0 when the stage keeps at most the k highest candidates (ties: lower id first) and
  // what it does depends on them alone (top-k: k, greedy: 1). The Sampler then gives a
  // first such stage just those k, in order, instead of every token's candidate. 0: not so.
  virtual int64_t top_only() const { return 0; }
  virtual void apply(CandidateList& candidates, std::mt19937& rng) = 0;
  // Sees every token that joins the sequence (for repetition penalties).
  virtual void accept(int32_t token) {}
  // Forgets the history and any adaptive state (mirostat's mu).
  virtual void reset() {}
};

// A stage that decides which tokens may come next (a grammar). The Sampler runs it apart
// from the chain, with llama.cpp's fast path: the chain samples from the raw logits, and
// only when allows() rejects its pick does apply() mask the disallowed candidates (to -inf)
// before the chain runs again. accept() sees only sampled tokens, never the prompt.
class ConstraintStage : public SamplerStage {
 public:
  // Whether `token` may come next. Must agree with apply().
  virtual bool allows(int32_t token) = 0;
  // allowed[i] = allows(ids[i]) for every i: one call for a few hundred tokens, which a
  // grammar answers with shared work.
  virtual void allows_each(std::span<const int32_t> ids, std::span<uint8_t> allowed) {
    for (size_t i = 0; i < ids.size(); ++i) allowed[i] = allows(ids[i]) ? 1 : 0;
  }
  // mask[id] = allows(id) for every token id whose logit is not -inf (for the others,
  // anything): one call for the whole vocabulary, which a grammar answers with one walk.
  virtual void allows_all(std::span<const float> logits, std::span<uint8_t> mask) {
    for (size_t i = 0; i < logits.size(); ++i) {
      mask[i] = logits[i] != -INFINITY && allows(static_cast<int32_t>(i)) ? 1 : 0;
    }
  }
  // Whether the text is complete and nothing but the end may follow (generation stops).
  virtual bool complete() const { return false; }
  // The first failure the stage met (e.g. a grammar too ambiguous to follow); generation
  // callers report it after the run. None by default.
  virtual std::optional<Error> error() const { return std::nullopt; }
};

struct LogitBias {
  int32_t token;
  float bias;  // added to the logit; -inf bans the token
};

// Adds each bias to its token's logit (tokens not among the candidates are ignored).
std::unique_ptr<SamplerStage> make_logit_bias_stage(std::vector<LogitBias> biases);
// llama.cpp's penalties over the last `last_n` accepted tokens (< 0: all of them; 0: off):
// a token seen c > 0 times gets its logit divided by `repeat` if positive or multiplied by
// it if not, then minus c * frequency + presence.
std::unique_ptr<SamplerStage> make_penalties_stage(int32_t last_n, float repeat, float frequency,
                                                   float presence);
// Keeps the k highest logits (k <= 0 or k >= n: all), sorted.
std::unique_ptr<SamplerStage> make_top_k_stage(int32_t k);
// Locally typical sampling: keeps the tokens whose surprise is closest to the entropy until
// their probability mass exceeds p (at least one); p >= 1: off.
std::unique_ptr<SamplerStage> make_typical_stage(float p);
// Keeps the smallest set of highest-probability tokens whose mass reaches p; p >= 1: off.
std::unique_ptr<SamplerStage> make_top_p_stage(float p);
// Keeps tokens with probability >= p times the highest; p <= 0: off.
std::unique_ptr<SamplerStage> make_min_p_stage(float p);
// Divides logits by t (t > 0).
std::unique_ptr<SamplerStage> make_temperature_stage(float t);
// Picks the highest logit; ties go to the lowest token id.
std::unique_ptr<SamplerStage> make_greedy_stage();
// Picks at random from the softmax of the logits.
std::unique_ptr<SamplerStage> make_dist_stage();
// Mirostat (v1, Basu et al. 2020) with target surprise tau and learning rate eta,
// estimating the Zipf exponent from the top m tokens; n_vocab is the candidate count. Picks.
std::unique_ptr<SamplerStage> make_mirostat_stage(float tau, float eta, int32_t m = 100);
// Mirostat 2.0: drops tokens with surprise above mu, draws, and adapts mu. Picks.
std::unique_ptr<SamplerStage> make_mirostat_v2_stage(float tau, float eta);

class Sampler {
 public:
  explicit Sampler(uint32_t seed = 0) : rng_(seed) {}
  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;

  Sampler& add(std::unique_ptr<SamplerStage> stage);
  // Sets the constraint that runs before the chain (see ConstraintStage); null: none.
  Sampler& set_constraint(std::unique_ptr<ConstraintStage> constraint);
  const ConstraintStage* constraint() const { return constraint_.get(); }
  bool constraint_complete() const { return constraint_ != nullptr && constraint_->complete(); }
  // Runs the chain over one row of logits (n_vocab floats) and returns the chosen id.
  // With a constraint: when it rejects the pick, the candidates are refilled, masked by
  // the constraint and the chain runs once more. QRUN_CHECKs that the chain picked a token.
  // When the chain starts with a top-only stage (top-k, greedy), only the top k are filled,
  // also after a rejection (the k best of what the constraint allows): the same pick as
  // over every candidate, without building one per token.
  int32_t sample(std::span<const float> logits);
  // Tells every stage and the constraint that the sampled `token` joined the sequence.
  void accept(int32_t token);
  // Tells the chain (not the constraint) that a prompt or history token is in the sequence.
  void accept_prompt(int32_t token);
  // Resets every stage; the random generator keeps its state.
  void reset();
  // Whether sample() draws from a law that depends on the logits alone: no constraint,
  // filters only, then a draw (dist). Speculative sampling needs it.
  bool has_distribution() const;
  // That law for one row of logits: probs (n_vocab floats) gets the probability sample()
  // would pick each token with, 0 outside the kept candidates. Needs has_distribution().
  void distribution(std::span<const float> logits, std::span<float> probs);
  // Whether the chain ends in a greedy pick (temperature 0).
  bool is_greedy() const;
  size_t n_stages() const { return stages_.size(); }
  // The stage names in order, "logit-bias -> penalties -> ... -> dist".
  std::string describe() const;

 private:
  void fill(std::span<const float> logits);
  // The k of the chain's first stage when it is top-only and k < n_vocab, else 0.
  int64_t leading_top_k(size_t n_vocab) const;
  // Fills the candidates with what top-k keeps of the candidates the constraint masked:
  // the k highest it allows, in order (then -inf ones). First it asks about the 8k highest
  // alone, which is enough when it allows much of what the model wants (inside a string,
  // where a walk of every token costs the most); then about every token. False when it
  // allows none, for the constraint's apply() to decide.
  bool fill_top_allowed(std::span<const float> logits, int64_t k);
  // The first step: true when the k are among the 8k highest.
  bool probe_top_allowed(std::span<const float> logits, int64_t k);
  void run_chain();

  std::vector<std::unique_ptr<SamplerStage>> stages_;
  std::unique_ptr<ConstraintStage> constraint_;
  CandidateList candidates_;
  std::vector<uint8_t> allowed_;  // fill_top_allowed's scratch, by token id
  std::vector<TokenCandidate> probe_;
  std::vector<int32_t> probe_ids_;
  std::vector<uint8_t> probe_ok_;
  std::mt19937 rng_;
};

// Every parameter of llama.cpp's default sampler, with its defaults.
struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (after logit bias and penalties)
  uint32_t seed = 0;
  int32_t top_k = 40;             // <= 0: off
  float top_p = 0.95f;            // 1: off
  float min_p = 0.05f;            // 0: off
  float typical_p = 1.0f;         // 1: off
  float repeat_penalty = 1.0f;    // 1: off
  int32_t repeat_last_n = 64;     // 0: off; < 0: every accepted token (the context)
  float presence_penalty = 0.0f;  // 0: off
  float frequency_penalty = 0.0f;
  int32_t mirostat = 0;       // 0: off, 1: mirostat, 2: mirostat 2.0
  float mirostat_lr = 0.1f;   // eta
  float mirostat_ent = 5.0f;  // tau, the target surprise (entropy)
  std::vector<LogitBias> logit_bias{};
};

// The chain, in llama.cpp's order:
//   logit-bias -> penalties -> top-k -> typical -> top-p -> min-p -> temperature -> dist,
// temperature <= 0: logit-bias -> penalties -> greedy,
// mirostat 1/2:     logit-bias -> penalties -> temperature -> mirostat(-v2).
// Stages that would do nothing (e.g. top-p 1) are left out. QRUN_CHECKs mirostat in {0,1,2}.
Sampler make_sampler(const SamplingParams& params);

}  // namespace qrun
