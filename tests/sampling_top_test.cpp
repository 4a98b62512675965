// The sampler's shortcuts for a chain that starts with top-k or greedy: select_top gives
// exactly the prefix a sort of the whole row gives (ties, -inf, a keep mask, k at and past
// the ends), and Sampler::sample picks the same tokens as the same chain run over every
// candidate, without a constraint and with one that allows everything, many, a few, fewer
// than k, or nothing (then the constraint's apply() decides).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/sampling/sampling.h"

namespace qrun {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Logits from a handful of values (many ties), a share of them -inf.
std::vector<float> tied_logits(size_t n, uint32_t seed, int neg_inf_per_16) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    x = static_cast<int>(rng() % 16) < neg_inf_per_16 ? kNegInf
                                                      : static_cast<float>(rng() % 7) - 3.0f;
  }
  return v;
}

std::vector<float> normal_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void expect_prefix(const std::vector<TokenCandidate>& top, const CandidateList& sorted, int64_t k) {
  ASSERT_EQ(static_cast<int64_t>(top.size()),
            std::min(k, static_cast<int64_t>(sorted.items.size())));
  for (size_t i = 0; i < top.size(); ++i) {
    ASSERT_EQ(top[i].id, sorted.items[i].id) << "at " << i;
    ASSERT_EQ(top[i].logit, sorted.items[i].logit) << "at " << i;
  }
}

TEST(SelectTop, IsThePrefixOfASortOfTheWholeRow) {
  for (const size_t n : {size_t{1}, size_t{5}, size_t{100}, size_t{3001}}) {
    for (const int neg_inf : {0, 5, 16}) {
      const std::vector<float> logits = tied_logits(n, static_cast<uint32_t>(n + neg_inf), neg_inf);
      const auto ni = static_cast<int64_t>(n);
      for (const int64_t k :
           {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{40}, ni - 1, ni, ni + 3}) {
        if (k < 0) continue;
        SCOPED_TRACE(testing::Message() << "n " << n << " -inf/16 " << neg_inf << " k " << k);
        CandidateList whole;
        for (size_t i = 0; i < n; ++i) {
          whole.items.push_back(TokenCandidate{static_cast<int32_t>(i), logits[i], 0.0f});
        }
        sort_prefix(whole, k);
        std::vector<TokenCandidate> top;
        select_top(logits, k, top);
        expect_prefix(top, whole, k);
        // A keep mask: the same as those tokens at -inf.
        std::vector<uint8_t> keep(n);
        for (size_t i = 0; i < n; ++i) keep[i] = (i * 7919) % 5 != 0 ? 1 : 0;
        CandidateList masked;
        for (size_t i = 0; i < n; ++i) {
          masked.items.push_back(
              TokenCandidate{static_cast<int32_t>(i), keep[i] != 0 ? logits[i] : kNegInf, 0.0f});
        }
        sort_prefix(masked, k);
        select_top(logits, k, top, keep);
        expect_prefix(top, masked, k);
      }
    }
  }
}

// A row with NaNs (a broken model's): select_top still gives k candidates, the finite ones
// first, and greedy picks a token in range (as over the whole row) rather than stopping.
TEST(SelectTop, NaNsNeverLeaveFewerThanK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits(3000, nan);
  std::vector<TokenCandidate> top;
  select_top(logits, 40, top);
  ASSERT_EQ(top.size(), 40u);
  EXPECT_EQ(top.front().id, 0);
  logits[2500] = 1.0f;
  logits[7] = kNegInf;
  select_top(logits, 40, top);
  ASSERT_EQ(top.size(), 40u);
  EXPECT_EQ(top.front().id, 2500);
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s = make_sampler(p);
  EXPECT_EQ(s.sample(logits), 2500);
  std::fill(logits.begin(), logits.end(), nan);
  EXPECT_EQ(s.sample(logits), 0);
}

// A broken model's row of NaN logits (all of them, or all but -inf ones) still gives a
// token through every chain make_sampler builds, never an empty candidate list: min-p
// compared NaN against a max that ignores NaN and dropped every candidate.
TEST(SamplerChains, ARowOfNaNsStillGivesAToken) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<SamplingParams> chains(6);
  chains[1].typical_p = 0.9f;
  chains[2].top_k = 0;
  chains[2].top_p = 1.0f;
  chains[3].mirostat = 1;
  chains[4].mirostat = 2;
  chains[5].repeat_penalty = 1.3f;
  chains[5].logit_bias = {LogitBias{3, 2.0f}};
  for (size_t i = 0; i < chains.size(); ++i) {
    for (const bool some_neg_inf : {false, true}) {
      std::vector<float> logits(1000, nan);
      if (some_neg_inf) std::fill(logits.begin(), logits.begin() + 500, kNegInf);
      Sampler s = make_sampler(chains[i]);
      for (int step = 0; step < 3; ++step) {
        const int32_t token = s.sample(logits);
        EXPECT_GE(token, 0) << "chain " << i;
        EXPECT_LT(token, 1000) << "chain " << i;
        s.accept(token);
      }
    }
  }
}

// Allows one token in `period` (a hash of the id and of the tokens accepted so far), and
// token 0 too when `zero`. apply() masks as allows() says, with its own rule for a dead end.
class EveryNth final : public ConstraintStage {
 public:
  EveryNth(uint32_t period, bool zero) : period_(period), zero_(zero) {}
  std::string_view name() const override { return "every-nth"; }
  bool allows(int32_t token) override {
    return (zero_ && token == 0) ||
           (static_cast<uint32_t>(token) * 2654435761u + salt_) % period_ == 0;
  }
  void apply(CandidateList& c, std::mt19937&) override {
    bool any = false;
    for (TokenCandidate& tc : c.items) {
      if (!allows(tc.id)) tc.logit = kNegInf;
      any |= tc.logit != kNegInf;
    }
    // A dead end: let the last token through, as a grammar lets the end tokens through.
    if (!any) c.items.back().logit = 0.0f;
    c.n_sorted = 0;
  }
  void accept(int32_t token) override { salt_ = salt_ * 31u + static_cast<uint32_t>(token); }
  void reset() override { salt_ = 0; }

 private:
  uint32_t period_;
  bool zero_;
  uint32_t salt_ = 0;
};

// The chain of `p`, and the same chain behind a logit bias that changes nothing but makes
// the first stage something other than top-k or greedy, so that it runs over every token.
// period 0: no constraint.
std::pair<Sampler, Sampler> shortcut_and_whole(const SamplingParams& p, uint32_t period,
                                               bool zero) {
  Sampler shortcut = make_sampler(p);
  SamplingParams q = p;
  q.logit_bias = {{0, 0.0f}};
  Sampler whole = make_sampler(q);
  EXPECT_EQ("logit-bias -> " + shortcut.describe(), whole.describe());
  if (period > 0) {
    shortcut.set_constraint(std::make_unique<EveryNth>(period, zero));
    whole.set_constraint(std::make_unique<EveryNth>(period, zero));
  }
  return {std::move(shortcut), std::move(whole)};
}

void expect_same_picks(const SamplingParams& p, uint32_t period, bool zero, size_t n_vocab) {
  auto [shortcut, whole] = shortcut_and_whole(p, period, zero);
  for (int step = 0; step < 60; ++step) {
    const std::vector<float> logits = step % 4 == 3
                                          ? tied_logits(n_vocab, static_cast<uint32_t>(step), 2)
                                          : normal_logits(n_vocab, static_cast<uint32_t>(step));
    const int32_t a = shortcut.sample(logits);
    const int32_t b = whole.sample(logits);
    ASSERT_EQ(a, b) << "step " << step;
    shortcut.accept(a);
    whole.accept(b);
  }
}

TEST(SamplerShortcut, TopKFirstPicksWhatTheWholeRowPicks) {
  SamplingParams p;  // top-k 40 -> top-p -> min-p -> temperature -> dist
  p.seed = 5;
  p.temperature = 1.3f;
  for (const size_t n : {size_t{30}, size_t{5000}, size_t{40000}}) {
    // 0: no constraint. 1: everything allowed. 2000: fewer than 40 of 5000. 10^6: token 0
    // only, then (almost always) nothing.
    for (const uint32_t period : {0u, 1u, 3u, 50u, 2000u, 1000000u}) {
      for (const bool zero : {true, false}) {
        SCOPED_TRACE(testing::Message() << "n " << n << " period " << period << " zero " << zero);
        expect_same_picks(p, period, zero, n);
      }
    }
  }
}

TEST(SamplerShortcut, GreedyPicksWhatTheWholeRowPicks) {
  SamplingParams p;
  p.temperature = 0.0f;  // greedy
  for (const size_t n : {size_t{30}, size_t{5000}, size_t{40000}}) {
    for (const uint32_t period : {0u, 1u, 7u, 700u, 1000000u}) {
      for (const bool zero : {true, false}) {
        SCOPED_TRACE(testing::Message() << "n " << n << " period " << period << " zero " << zero);
        expect_same_picks(p, period, zero, n);
      }
    }
  }
}

}  // namespace
}  // namespace qrun
