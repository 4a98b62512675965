// The sampler chain, the helpers the stages share, the temperature and picking stages, and
// make_sampler. The random draw uses the raw 32-bit outputs of std::mt19937 (fully
// specified by the standard), not a library distribution, so the same seed picks the same
// tokens with any standard library; sorting breaks ties by token id for the same reason.
#include "core/sampling/sampling.h"

#include <algorithm>
#include <cmath>

#include "ggml-like/result.h"

namespace qrun {
namespace {

// Descending logit, then ascending id: a strict total order, so every sort is deterministic.
bool higher(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

class TemperatureStage final : public SamplerStage {
 public:
  explicit TemperatureStage(float t) : t_(t) {}
  std::string_view name() const override { return "temperature"; }
  Kind kind() const override { return Kind::kFilter; }
  // A positive scale keeps the order, so n_sorted stays valid.
  void apply(CandidateList& c, std::mt19937&) override {
    for (TokenCandidate& tc : c.items) tc.logit /= t_;
  }

 private:
  float t_;
};

class GreedyStage final : public SamplerStage {
 public:
  std::string_view name() const override { return "greedy"; }
  Kind kind() const override { return Kind::kGreedy; }
  int64_t top_only() const override { return 1; }
  void apply(CandidateList& c, std::mt19937&) override {
    QRUN_CHECK(!c.items.empty(), "greedy: no candidates");
    const TokenCandidate* best = &c.items[0];
    for (const TokenCandidate& tc : c.items) {
      if (higher(tc, *best)) best = &tc;
    }
    c.selected = best->id;
  }
};

class DistStage final : public SamplerStage {
 public:
  std::string_view name() const override { return "dist"; }
  Kind kind() const override { return Kind::kDraw; }
  void apply(CandidateList& c, std::mt19937& rng) override {
    QRUN_CHECK(!c.items.empty(), "dist: no candidates");
    softmax(c);
    c.selected = c.items[draw_index(c, rng)].id;
  }
};

}  // namespace

void sort_prefix(CandidateList& c, int64_t k) {
  const int64_t n = static_cast<int64_t>(c.items.size());
  k = std::min(k, n);
  if (k <= c.n_sorted) return;
  const auto first = c.items.begin() + c.n_sorted;
  if (k == n) {
    std::sort(first, c.items.end(), higher);
  } else if (k - c.n_sorted <= std::max<int64_t>(128, n / 64)) {
    // A heap of k rejects most items with one comparison: about 3x faster than
    // nth_element for top-40 of 32k, slower once k is a sizeable part of n.
    std::partial_sort(first, c.items.begin() + k, c.items.end(), higher);
  } else {
    const auto kth = c.items.begin() + k;
    std::nth_element(first, kth, c.items.end(), higher);
    std::sort(first, kth, higher);
  }
  c.n_sorted = k;
}

namespace {

// select_top's pass, with value(i) the logit token i counts with.
template <class Value>
void select_top_of(int64_t n, int64_t k, Value value, std::vector<TokenCandidate>& out) {
  out.clear();
  if (k <= 0) return;
  // Keeps every logit not below the k-th best of those kept so far; whenever the buffer
  // fills, it is cut back to its k best. A tie with that k-th is kept (its id decides).
  const size_t cap = static_cast<size_t>(2 * k + 64);
  out.reserve(cap);
  const auto cut = [&] {
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), higher);
    out.resize(static_cast<size_t>(k));
  };
  // -inf ones are left for last: when fewer than k are finite, the lowest ids among them
  // follow, as a sort would put them (a constraint's mask makes that common). So are NaNs
  // (a broken model's), which order with nothing: k candidates come out whatever the row.
  float floor = -INFINITY;
  const auto visit = [&](int64_t i) {
    const float v = value(i);
    if (!(v >= floor) || v == -INFINITY) return;
    out.push_back(TokenCandidate{static_cast<int32_t>(i), v, 0.0f});
    if (out.size() == cap) {
      cut();
      floor = out.back().logit;  // the k-th best: nth_element put it last
    }
  };
  // Blocks of 16 with nothing at or above the floor (nearly all, once it has risen) are
  // passed over with one count the compiler vectorizes.
  constexpr int64_t kBlock = 16;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    int hits = 0;
    for (int64_t j = 0; j < kBlock; ++j) hits += value(i + j) >= floor ? 1 : 0;
    if (hits == 0) continue;
    for (int64_t j = 0; j < kBlock; ++j) visit(i + j);
  }
  for (; i < n; ++i) visit(i);
  if (out.size() > static_cast<size_t>(k)) cut();
  std::sort(out.begin(), out.end(), higher);
  for (i = 0; i < n && static_cast<int64_t>(out.size()) < k; ++i) {
    const float v = value(i);
    if (!(v > -INFINITY)) out.push_back(TokenCandidate{static_cast<int32_t>(i), v, 0.0f});
  }
}

}  // namespace

void select_top(std::span<const float> logits, int64_t k, std::vector<TokenCandidate>& out,
                std::span<const uint8_t> keep) {
  const auto n = static_cast<int64_t>(logits.size());
  k = std::min(k, n);
  if (keep.empty()) {
    select_top_of(
        n, k, [&](int64_t i) { return logits[static_cast<size_t>(i)]; }, out);
  } else {
    QRUN_CHECK(keep.size() == logits.size(), "select_top: %zu keep flags for %zu logits",
               keep.size(), logits.size());
    select_top_of(
        n, k,
        [&](int64_t i) {
          const auto t = static_cast<size_t>(i);
          return keep[t] != 0 ? logits[t] : -INFINITY;
        },
        out);
  }
}

void softmax(CandidateList& c) {
  if (c.items.empty()) return;
  float max = -INFINITY;
  for (const TokenCandidate& tc : c.items) max = std::max(max, tc.logit);
  if (max == -INFINITY) {
    const float u = 1.0f / static_cast<float>(c.items.size());
    for (TokenCandidate& tc : c.items) tc.p = u;
    return;
  }
  double sum = 0.0;
  for (TokenCandidate& tc : c.items) {
    tc.p = std::exp(tc.logit - max);
    sum += tc.p;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (TokenCandidate& tc : c.items) tc.p *= inv;
}

size_t draw_index(const CandidateList& c, std::mt19937& rng) {
  QRUN_CHECK(!c.items.empty(), "draw from no candidates");
  double total = 0.0;
  for (const TokenCandidate& tc : c.items) total += tc.p;
  // u in [0, 1) from 53 random bits.
  const uint64_t hi = rng() >> 5;
  const uint64_t lo = rng() >> 6;
  const double u =
      (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) / 9007199254740992.0;
  if (!(total > 0.0)) return static_cast<size_t>(u * static_cast<double>(c.items.size()));
  const double target = u * total;
  double acc = 0.0;
  size_t last_possible = 0;
  for (size_t i = 0; i < c.items.size(); ++i) {
    if (c.items[i].p <= 0.0f) continue;
    last_possible = i;
    acc += c.items[i].p;
    if (acc > target) return i;
  }
  return last_possible;  // rounding left target at the very top
}

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

Sampler& Sampler::set_constraint(std::unique_ptr<ConstraintStage> constraint) {
  constraint_ = std::move(constraint);
  return *this;
}

void Sampler::fill(std::span<const float> logits) {
  candidates_.items.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_.items[i] = TokenCandidate{static_cast<int32_t>(i), logits[i], 0.0f};
  }
  candidates_.n_sorted = 0;
  candidates_.selected = -1;
}

void Sampler::run_chain() {
  for (const std::unique_ptr<SamplerStage>& s : stages_) {
    s->apply(candidates_, rng_);
    if (candidates_.selected >= 0) break;
  }
  QRUN_CHECK(candidates_.selected >= 0, "sampler chain of %zu stages picked no token",
             stages_.size());
}

int64_t Sampler::leading_top_k(size_t n_vocab) const {
  if (stages_.empty()) return 0;
  const int64_t k = stages_.front()->top_only();
  return k > 0 && k < static_cast<int64_t>(n_vocab) ? k : 0;
}

bool Sampler::probe_top_allowed(std::span<const float> logits, int64_t k) {
  const int64_t m = std::max<int64_t>(256, 8 * k);
  if (m > static_cast<int64_t>(logits.size()) / 8) return false;  // the full mask is cheap
  select_top(logits, m, probe_);
  probe_ids_.clear();
  for (const TokenCandidate& tc : probe_) {
    if (tc.logit == -INFINITY) return false;  // past the finite ones: let the mask decide
    probe_ids_.push_back(tc.id);
  }
  probe_ok_.resize(probe_ids_.size());
  constraint_->allows_each(probe_ids_, probe_ok_);
  candidates_.items.clear();
  for (size_t i = 0; i < probe_.size(); ++i) {
    if (probe_ok_[i] == 0) continue;
    candidates_.items.push_back(probe_[i]);
    if (static_cast<int64_t>(candidates_.items.size()) == k) return true;
  }
  return false;
}

bool Sampler::fill_top_allowed(std::span<const float> logits, int64_t k) {
  candidates_.selected = -1;
  candidates_.n_sorted = k;
  if (probe_top_allowed(logits, k)) return true;
  allowed_.resize(logits.size());
  constraint_->allows_all(logits, allowed_);
  select_top(logits, k, candidates_.items, allowed_);
  // The best is -inf only when nothing is allowed.
  return candidates_.items.front().logit != -INFINITY;
}

int32_t Sampler::sample(std::span<const float> logits) {
  const int64_t k = leading_top_k(logits.size());
  if (k > 0) {
    select_top(logits, k, candidates_.items);
    candidates_.n_sorted = k;
    candidates_.selected = -1;
  } else {
    fill(logits);
  }
  run_chain();
  if (constraint_ != nullptr && !constraint_->allows(candidates_.selected)) {
    // Slow path: the pick breaks the constraint; mask every candidate and sample again.
    // (A top-only first stage needs only the k best of the masked ones.)
    if (k == 0 || !fill_top_allowed(logits, k)) {
      fill(logits);
      constraint_->apply(candidates_, rng_);
    }
    run_chain();
  }
  return candidates_.selected;
}

void Sampler::accept(int32_t token) {
  for (const std::unique_ptr<SamplerStage>& s : stages_) s->accept(token);
  if (constraint_ != nullptr) constraint_->accept(token);
}

void Sampler::accept_prompt(int32_t token) {
  for (const std::unique_ptr<SamplerStage>& s : stages_) s->accept(token);
}

void Sampler::reset() {
  for (const std::unique_ptr<SamplerStage>& s : stages_) s->reset();
  if (constraint_ != nullptr) constraint_->reset();
}

bool Sampler::has_distribution() const {
  if (constraint_ != nullptr || stages_.empty()) return false;
  for (size_t i = 0; i + 1 < stages_.size(); ++i) {
    if (stages_[i]->kind() != SamplerStage::Kind::kFilter) return false;
  }
  return stages_.back()->kind() == SamplerStage::Kind::kDraw;
}

void Sampler::distribution(std::span<const float> logits, std::span<float> probs) {
  QRUN_CHECK(has_distribution(), "sampler chain %s has no fixed distribution", describe().c_str());
  QRUN_CHECK(probs.size() == logits.size(), "distribution: %zu probabilities for %zu logits",
             probs.size(), logits.size());
  fill(logits);
  for (size_t i = 0; i + 1 < stages_.size(); ++i) stages_[i]->apply(candidates_, rng_);
  softmax(candidates_);  // as the dist stage does before its draw
  std::fill(probs.begin(), probs.end(), 0.0f);
  for (const TokenCandidate& tc : candidates_.items) probs[static_cast<size_t>(tc.id)] = tc.p;
}

bool Sampler::is_greedy() const {
  return !stages_.empty() && stages_.back()->kind() == SamplerStage::Kind::kGreedy;
}

std::string Sampler::describe() const {
  std::string out = constraint_ != nullptr ? std::string(constraint_->name()) : std::string();
  for (const std::unique_ptr<SamplerStage>& s : stages_) {
    if (!out.empty()) out += " -> ";
    out += s->name();
  }
  return out;
}

Sampler make_sampler(const SamplingParams& p) {
  QRUN_CHECK(p.mirostat >= 0 && p.mirostat <= 2, "mirostat %d is not 0, 1 or 2", p.mirostat);
  Sampler s(p.seed);
  if (!p.logit_bias.empty()) s.add(make_logit_bias_stage(p.logit_bias));
  const bool penalize =
      p.repeat_last_n != 0 &&
      (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
  if (penalize) {
    s.add(make_penalties_stage(p.repeat_last_n, p.repeat_penalty, p.frequency_penalty,
                               p.presence_penalty));
  }
  if (p.temperature <= 0.0f) {
    s.add(make_greedy_stage());
    return s;
  }
  if (p.mirostat != 0) {
    s.add(make_temperature_stage(p.temperature));
    if (p.mirostat == 1) {
      s.add(make_mirostat_stage(p.mirostat_ent, p.mirostat_lr));
    } else {
      s.add(make_mirostat_v2_stage(p.mirostat_ent, p.mirostat_lr));
    }
    return s;
  }
  if (p.top_k > 0) s.add(make_top_k_stage(p.top_k));
  if (p.typical_p < 1.0f) s.add(make_typical_stage(p.typical_p));
  if (p.top_p < 1.0f) s.add(make_top_p_stage(p.top_p));
  if (p.min_p > 0.0f) s.add(make_min_p_stage(p.min_p));
  s.add(make_temperature_stage(p.temperature));
  s.add(make_dist_stage());
  return s;
}

}  // namespace qrun
