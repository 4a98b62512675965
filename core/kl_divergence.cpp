// score_token and KldAccumulator. The model's log-softmax is taken in double around its
// maximum logit; the base's log-probabilities are decoded in float as they were encoded.
#include "core/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include "core/kld_base_file.h"
#include "ggml-like/result.h"

namespace qrun {

KldTokenScore score_token(std::span<const float> logits, std::span<const uint16_t> base_row,
                          int32_t target) {
  const auto n_vocab = static_cast<int64_t>(logits.size());
  QRUN_CHECK(n_vocab > 0 && static_cast<int64_t>(base_row.size()) == kld_row_words(n_vocab) &&
                 target >= 0 && target < n_vocab,
             "%lld logits, a row of %zu words, target %d", static_cast<long long>(n_vocab),
             base_row.size(), target);
  // The model: log p(i) = logits[i] - log_norm. Ties for the top go to the lowest id.
  const auto top = std::max_element(logits.begin(), logits.end());
  const double max_logit = *top;
  double sum_exp = 0.0;
  for (float l : logits) sum_exp += std::exp(static_cast<double>(l) - max_logit);
  const double log_norm = max_logit + std::log(sum_exp);

  const float scale = kld_row_scale(base_row);
  const float min_log_prob = kld_row_min_log_prob(base_row);
  const uint16_t* q = base_row.data() + 4;
  KldTokenScore s;
  double kld = 0.0;
  int64_t top_base = 0;
  float top_base_log_prob = decode_log_prob(scale, min_log_prob, q[0]);
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float log_p_base = decode_log_prob(scale, min_log_prob, q[i]);
    if (log_p_base > top_base_log_prob) {
      top_base_log_prob = log_p_base;
      top_base = i;
    }
    if (log_p_base > -16.0f) {  // clipped entries carry no information
      const double log_p = static_cast<double>(logits[static_cast<size_t>(i)]) - log_norm;
      kld += std::exp(static_cast<double>(log_p_base)) * (log_p_base - log_p);
    }
  }
  s.kld = kld;
  s.nll = log_norm - logits[static_cast<size_t>(target)];
  s.nll_base = -static_cast<double>(decode_log_prob(scale, min_log_prob, q[target]));
  s.p_diff = static_cast<float>(std::exp(-s.nll) - std::exp(-s.nll_base));
  s.same_top = top - logits.begin() == top_base;
  return s;
}

void KldAccumulator::add(const KldTokenScore& s) {
  ++count_;
  n_same_top_ += s.same_top ? 1 : 0;
  sum_nll_ += s.nll;
  sum_nll2_ += s.nll * s.nll;
  sum_nll_base_ += s.nll_base;
  sum_nll_base2_ += s.nll_base * s.nll_base;
  sum_nll_nll_base_ += s.nll * s.nll_base;
  sum_kld_ += s.kld;
  sum_kld2_ += s.kld * s.kld;
  const double d = s.p_diff;
  sum_p_diff_ += d;
  sum_p_diff2_ += d * d;
  sum_p_diff4_ += d * d * d * d;
  kld_values_.push_back(static_cast<float>(s.kld));
  p_diff_values_.push_back(s.p_diff);
}

ValueError mean_with_error(double sum, double sum2, int64_t n) {
  if (n < 1) return {};
  const auto count = static_cast<double>(n);
  const double mean = sum / count;
  const double var = sum2 / count - mean * mean;
  return {mean, var > 0 && n > 10 ? std::sqrt(var / (count - 1)) : 0.0};
}

double quantile(std::span<const float> sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double pos = fraction * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(pos);
  const double t = pos - static_cast<double>(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1 - t) * sorted[i] + t * sorted[j];
}

namespace {

Quantiles quantiles_of(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  Quantiles q;
  q.min = quantile(values, 0.0);
  q.p0_1 = quantile(values, 0.001);
  q.p1 = quantile(values, 0.01);
  q.p5 = quantile(values, 0.05);
  q.p10 = quantile(values, 0.10);
  q.p25 = quantile(values, 0.25);
  q.median = quantile(values, 0.5);
  q.p75 = quantile(values, 0.75);
  q.p90 = quantile(values, 0.90);
  q.p95 = quantile(values, 0.95);
  q.p99 = quantile(values, 0.99);
  q.p99_9 = quantile(values, 0.999);
  q.max = quantile(values, 1.0);
  return q;
}

}  // namespace

KldSummary KldAccumulator::summary() const {
  KldSummary r;
  r.count = count_;
  if (count_ == 0) return r;
  const auto n = static_cast<double>(count_);

  // Perplexities: errors of the mean NLLs carried through exp; the two means are
  // correlated (same tokens), which their covariance accounts for in the ratio and
  // difference.
  const ValueError log_ppl = mean_with_error(sum_nll_, sum_nll2_, count_);
  const ValueError log_ppl_base = mean_with_error(sum_nll_base_, sum_nll_base2_, count_);
  const double cov =
      count_ < 10 ? 0.0 : (sum_nll_nll_base_ / n - log_ppl.value * log_ppl_base.value) / (n - 1);
  r.ppl = {std::exp(log_ppl.value), std::exp(log_ppl.value) * log_ppl.error};
  r.ppl_base = {std::exp(log_ppl_base.value), std::exp(log_ppl_base.value) * log_ppl_base.error};
  const double error_product = log_ppl.error * log_ppl_base.error;
  r.log_ppl_correlation = error_product > 0 ? cov / error_product : 0.0;
  r.log_ppl_ratio.value = log_ppl.value - log_ppl_base.value;
  r.log_ppl_ratio.error = std::sqrt(std::max(
      0.0, log_ppl.error * log_ppl.error + log_ppl_base.error * log_ppl_base.error - 2 * cov));
  r.ppl_ratio.value = std::exp(r.log_ppl_ratio.value);
  r.ppl_ratio.error = r.ppl_ratio.value * r.log_ppl_ratio.error;
  r.ppl_diff.value = r.ppl.value - r.ppl_base.value;
  r.ppl_diff.error =
      std::sqrt(std::max(0.0, r.ppl.error * r.ppl.error + r.ppl_base.error * r.ppl_base.error -
                                  2 * r.ppl.value * r.ppl_base.value * cov));

  r.kld = mean_with_error(sum_kld_, sum_kld2_, count_);
  r.kld_quantiles = quantiles_of(kld_values_);
  r.p_diff = mean_with_error(sum_p_diff_, sum_p_diff2_, count_);
  r.p_diff_quantiles = quantiles_of(p_diff_values_);
  const ValueError mse = mean_with_error(sum_p_diff2_, sum_p_diff4_, count_);
  const double rms = std::sqrt(mse.value);
  r.p_diff_rms = {rms, rms > 0 ? 0.5 / rms * mse.error : 0.0};
  const double same = static_cast<double>(n_same_top_) / n;
  r.same_top = {same, count_ > 1 ? std::sqrt(same * (1 - same) / (n - 1)) : 0.0};
  return r;
}

}  // namespace qrun
