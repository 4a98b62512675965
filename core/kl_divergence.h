// KL divergence of a model's next-token distributions from a base run's (a base file, see
// core/kld_base_file.h), with the statistics llama.cpp's perplexity tool prints for it:
// per token, KLD(base || model) = sum_i p_base(i) * (log p_base(i) - log p(i)) over the
// tokens the base gives a log-probability above -16 (the others were clipped when the base
// was written); the change in the probability of the actual next token, Δp = p - p_base;
// and whether both put the same token on top. Means carry the standard error of the mean.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrun {

// One scored token.
struct KldTokenScore {
  double kld = 0;       // natural log
  double nll = 0;       // -log p(next token), the model
  double nll_base = 0;  // -log p_base(next token), the base
  float p_diff = 0;     // p - p_base of the next token
  bool same_top = false;
};

// logits: the model's n_vocab logits; base_row: the base file's row for the same position
// (kld_row_words(n_vocab) words); target: the next token.
KldTokenScore score_token(std::span<const float> logits, std::span<const uint16_t> base_row,
                          int32_t target);

struct ValueError {
  double value = 0;
  double error = 0;  // one standard error
};

// Order statistics of a sample, linearly interpolated between the sorted values.
struct Quantiles {
  double min = 0, p0_1 = 0, p1 = 0, p5 = 0, p10 = 0, p25 = 0, median = 0, p75 = 0, p90 = 0, p95 = 0,
         p99 = 0, p99_9 = 0, max = 0;
};

struct KldSummary {
  int64_t count = 0;
  // Perplexity of the model (Q) and of the base, from the same tokens.
  ValueError ppl, ppl_base;
  double log_ppl_correlation = 0;  // of the two per-token NLL means, in [-1, 1]
  ValueError log_ppl_ratio;        // ln(PPL(Q) / PPL(base)), correlation accounted for
  ValueError ppl_ratio, ppl_diff;  // PPL(Q) / PPL(base), PPL(Q) - PPL(base)
  ValueError kld;                  // mean over tokens
  Quantiles kld_quantiles;
  ValueError p_diff;  // mean Δp (a fraction, not a percentage)
  Quantiles p_diff_quantiles;
  ValueError p_diff_rms;  // sqrt(mean Δp²)
  ValueError same_top;    // fraction of tokens, binomial error
};

// Sums as tokens are added; summary() at any point (it sorts a copy of the values).
class KldAccumulator {
 public:
  void add(const KldTokenScore& s);
  int64_t count() const { return count_; }
  KldSummary summary() const;

 private:
  int64_t count_ = 0;
  int64_t n_same_top_ = 0;
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0;
  double sum_p_diff_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  std::vector<float> kld_values_, p_diff_values_;
};

// The mean of n values from their sum and sum of squares, with the standard error of the
// mean (0 for n <= 10, where it would mean little).
ValueError mean_with_error(double sum, double sum2, int64_t n);
// The value at `fraction` of sorted values, interpolated linearly.
double quantile(std::span<const float> sorted, double fraction);

}  // namespace qrun
