// Statistical tests of the sampler: 20000 seeded draws per configuration, compared with the
// distribution worked out independently from the definitions (double precision, a plain
// sort) by a chi-square goodness-of-fit test at the 0.1% level. Tokens the configuration
// must exclude may never be drawn. Fixed seeds, so the outcome is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/sampling/sampling.h"
#include "ggml-like/result.h"

namespace qrun {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.5f, 3.0f, 0.0f, 2.5f, -0.5f, 1.0f, 0.2f};
constexpr int kDraws = 20000;

// Probabilities proportional to exp(logit / temp) over the tokens in `keep` (0 elsewhere).
std::vector<double> softmax_over(const std::vector<bool>& keep, double temp) {
  std::vector<double> p(kLogits.size(), 0.0);
  double z = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (keep[i]) z += p[i] = std::exp(kLogits[i] / temp);
  }
  for (double& x : p) x /= z;
  return p;
}

std::vector<size_t> by_logit_desc() {
  std::vector<size_t> order(kLogits.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [](size_t a, size_t b) { return kLogits[a] > kLogits[b]; });
  return order;
}

std::vector<bool> all_tokens() {
  return std::vector<bool>(kLogits.size(), true);
}

std::vector<bool> top_k(int k) {
  std::vector<bool> keep(kLogits.size(), false);
  const std::vector<size_t> order = by_logit_desc();
  for (int i = 0; i < k; ++i) keep[order[static_cast<size_t>(i)]] = true;
  return keep;
}

// Of the tokens in `from`, the smallest highest-probability set with mass >= p, the
// probabilities renormalized over `from` (the raw logits: top-p runs before temperature).
std::vector<bool> top_p(double p, const std::vector<bool>& from) {
  const std::vector<double> probs = softmax_over(from, 1.0);
  std::vector<bool> keep(kLogits.size(), false);
  double cum = 0.0;
  for (size_t i : by_logit_desc()) {
    if (!from[i]) continue;
    keep[i] = true;
    cum += probs[i];
    if (cum >= p) break;
  }
  return keep;
}

// Tokens with probability >= p times the best (on the raw logits).
std::vector<bool> min_p(double p) {
  const std::vector<double> probs = softmax_over(all_tokens(), 1.0);
  const double best = *std::max_element(probs.begin(), probs.end());
  std::vector<bool> keep(kLogits.size());
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = probs[i] >= p * best;
  return keep;
}

std::vector<bool> both(const std::vector<bool>& a, const std::vector<bool>& b) {
  std::vector<bool> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] && b[i];
  return out;
}

// The chi-square value with df degrees of freedom exceeded with probability 0.001.
double chi2_critical(int df) {
  static constexpr double kTable[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                                      24.322, 26.124, 27.877, 29.588, 31.264, 32.909};
  QRUN_CHECK(df >= 1 && df <= 12, "no chi-square table entry for df %d", df);
  return kTable[df - 1];
}

void expect_fits(const SamplingParams& params, const std::vector<double>& expected) {
  Sampler s = make_sampler(params);
  std::vector<int> counts(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(s.sample(kLogits))];
  double chi2 = 0.0;
  int df = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " must be excluded";
      continue;
    }
    const double e = expected[i] * kDraws;
    ASSERT_GE(e, 5.0) << "token " << i << ": too few expected draws for chi-square";
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  ASSERT_GE(df, 1);
  EXPECT_LT(chi2, chi2_critical(df)) << "df " << df << ", seed " << params.seed;
}

SamplingParams plain(float temp, uint32_t seed) {
  SamplingParams p;
  p.temperature = temp;
  p.seed = seed;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(SamplingStats, Temperature) {
  for (float temp : {1.0f, 0.7f, 1.6f}) {
    SCOPED_TRACE(temp);
    expect_fits(plain(temp, 11), softmax_over(all_tokens(), temp));
  }
}

TEST(SamplingStats, TopK) {
  for (int k : {1, 3, 6}) {
    SCOPED_TRACE(k);
    SamplingParams p = plain(1.0f, 12);
    p.top_k = k;
    if (k == 1) {  // one survivor: always the best token
      Sampler s = make_sampler(p);
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.sample(kLogits), 4);
      continue;
    }
    expect_fits(p, softmax_over(top_k(k), 1.0));
  }
}

TEST(SamplingStats, TopP) {
  for (float pp : {0.5f, 0.8f, 0.95f}) {
    SCOPED_TRACE(pp);
    SamplingParams p = plain(0.9f, 13);
    p.top_p = pp;
    expect_fits(p, softmax_over(top_p(pp, all_tokens()), 0.9));
  }
}

TEST(SamplingStats, MinP) {
  for (float mp : {0.05f, 0.2f, 0.4f}) {
    SCOPED_TRACE(mp);
    SamplingParams p = plain(1.2f, 14);
    p.min_p = mp;
    expect_fits(p, softmax_over(min_p(mp), 1.2));
  }
}

TEST(SamplingStats, DefaultChain) {
  // top-k 40 keeps all ten; top-p 0.95 then min-p 0.05 on the raw logits; temperature 0.8.
  SamplingParams p;
  p.seed = 15;
  expect_fits(p, softmax_over(both(top_p(0.95, all_tokens()), min_p(0.05)), 0.8));
  // A tighter top-k first: top-p then renormalizes over its five survivors, as llama.cpp.
  p.top_k = 5;
  p.top_p = 0.8f;
  p.seed = 16;
  expect_fits(p, softmax_over(both(top_p(0.8, top_k(5)), min_p(0.05)), 0.8));
}

TEST(SamplingStats, LogitBiasShiftsTheDistribution) {
  // +ln 4 on token 2 makes it four times as likely; -inf on token 4 removes it.
  SamplingParams p = plain(1.0f, 17);
  p.logit_bias = {{2, std::log(4.0f)}, {4, -INFINITY}};
  std::vector<double> w(kLogits.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::exp(kLogits[i]);
  w[2] *= 4.0;
  w[4] = 0.0;
  const double z = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= z;
  expect_fits(p, w);
}

}  // namespace
}  // namespace qrun
