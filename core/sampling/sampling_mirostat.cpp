// Mirostat v1 and v2 (Basu et al., "Mirostat: a neural text decoding algorithm that directly
// controls perplexity", 2020), as llama.cpp runs them: each truncates the candidates so that
// the expected surprise (-log2 p) of the pick tracks tau, draws the token itself, and moves
// its threshold mu by eta times the observed error. mu starts (and resets) at 2 * tau.
#include <algorithm>
#include <cmath>

#include "core/sampling/sampling.h"
#include "ggml-like/result.h"

namespace qrun {
namespace {

// Sorts as far as needed and keeps items[0, i) where i is the first with surprise above mu
// (at least one).
void keep_below_surprise(CandidateList& c, float mu) {
  const int64_t n = static_cast<int64_t>(c.items.size());
  int64_t i = 0;
  for (int64_t chunk = 64;; chunk *= 2) {
    sort_prefix(c, i + chunk);
    for (; i < c.n_sorted; ++i) {
      if (-std::log2(c.items[static_cast<size_t>(i)].p) > mu) {
        c.items.resize(static_cast<size_t>(std::max<int64_t>(i, 1)));
        return;
      }
    }
    if (i >= n) return;
  }
}

class MirostatStage final : public SamplerStage {
 public:
  MirostatStage(float tau, float eta, int32_t m) : tau_(tau), eta_(eta), m_(m), mu_(2 * tau) {}
  std::string_view name() const override { return "mirostat"; }

  void apply(CandidateList& c, std::mt19937& rng) override {
    QRUN_CHECK(!c.items.empty(), "mirostat: no candidates");
    const float n_vocab = static_cast<float>(c.items.size());
    softmax(c);
    sort_prefix(c, m_);
    // Least-squares estimate of the Zipf exponent s from the top m probabilities:
    // log(p_i / p_{i+1}) ~ s * log((i + 2) / (i + 1)).
    float sum_tb = 0.0f;
    float sum_tt = 0.0f;
    const size_t n_pairs =
        std::min<size_t>(static_cast<size_t>(std::max(m_ - 1, 0)), c.items.size() - 1);
    for (size_t i = 0; i < n_pairs; ++i) {
      const float t = std::log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
      const float b = std::log(c.items[i].p / c.items[i + 1].p);
      sum_tb += t * b;
      sum_tt += t * t;
    }
    const float s_hat = sum_tb / sum_tt;
    // The k whose top-k truncation gives an expected surprise of mu under that Zipf law.
    const float eps = s_hat - 1.0f;
    const float k =
        std::pow(eps * std::pow(2.0f, mu_) / (1.0f - std::pow(n_vocab, -eps)), 1.0f / s_hat);
    // A flat or degenerate distribution gives no finite k: keep everything.
    int64_t keep = static_cast<int64_t>(c.items.size());
    if (std::isfinite(k) && k < n_vocab) keep = std::max<int64_t>(1, static_cast<int64_t>(k));
    if (keep < static_cast<int64_t>(c.items.size())) {
      sort_prefix(c, keep);
      c.items.resize(static_cast<size_t>(keep));
    }
    pick(c, rng);
  }

  void reset() override { mu_ = 2 * tau_; }

 private:
  void pick(CandidateList& c, std::mt19937& rng) {
    softmax(c);
    const size_t i = draw_index(c, rng);
    c.selected = c.items[i].id;
    mu_ -= eta_ * (-std::log2(c.items[i].p) - tau_);
  }

  float tau_;
  float eta_;
  int32_t m_;
  float mu_;
};

class MirostatV2Stage final : public SamplerStage {
 public:
  MirostatV2Stage(float tau, float eta) : tau_(tau), eta_(eta), mu_(2 * tau) {}
  std::string_view name() const override { return "mirostat-v2"; }

  void apply(CandidateList& c, std::mt19937& rng) override {
    QRUN_CHECK(!c.items.empty(), "mirostat-v2: no candidates");
    softmax(c);
    keep_below_surprise(c, mu_);
    softmax(c);
    const size_t i = draw_index(c, rng);
    c.selected = c.items[i].id;
    mu_ -= eta_ * (-std::log2(c.items[i].p) - tau_);
  }

  void reset() override { mu_ = 2 * tau_; }

 private:
  float tau_;
  float eta_;
  float mu_;
};

}  // namespace

std::unique_ptr<SamplerStage> make_mirostat_stage(float tau, float eta, int32_t m) {
  QRUN_CHECK(m >= 1, "mirostat m %d must be positive", m);
  return std::make_unique<MirostatStage>(tau, eta, m);
}
std::unique_ptr<SamplerStage> make_mirostat_v2_stage(float tau, float eta) {
  return std::make_unique<MirostatV2Stage>(tau, eta);
}

}  // namespace qrun
