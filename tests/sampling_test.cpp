// Each sampler stage on a fixed six-token logit vector, with survivors and values worked out
// by hand (softmax of {1, 3, 2, 0, -1, 2.5} is {.0621, .4592, .1689, .0229, .0084, .2785});
// edge cases (k > n, p = 1, min_p = 0, all-equal and -inf logits, penalties over a sliding
// window); the chain make_sampler builds, and seeded reproducibility.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/sampling/sampling.h"

namespace qrun {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.0f, -1.0f, 2.5f};

CandidateList list_of(const std::vector<float>& logits) {
  CandidateList c;
  for (size_t i = 0; i < logits.size(); ++i) {
    c.items.push_back(TokenCandidate{static_cast<int32_t>(i), logits[i], 0.0f});
  }
  return c;
}

std::vector<int32_t> ids(const CandidateList& c) {
  std::vector<int32_t> out;
  for (const TokenCandidate& tc : c.items) out.push_back(tc.id);
  return out;
}

// Runs one stage on `logits` and returns what survives, in order.
CandidateList run_stage(SamplerStage& stage, const std::vector<float>& logits = kLogits) {
  CandidateList c = list_of(logits);
  std::mt19937 rng(0);
  stage.apply(c, rng);
  return c;
}

using Ids = std::vector<int32_t>;

TEST(SamplingHelpers, SortPrefixAndSoftmax) {
  CandidateList c = list_of(kLogits);
  sort_prefix(c, 2);
  EXPECT_EQ(c.n_sorted, 2);
  EXPECT_EQ(c.items[0].id, 1);
  EXPECT_EQ(c.items[1].id, 5);
  sort_prefix(c, 100);  // clamps to n, keeps the prefix
  EXPECT_EQ(ids(c), (Ids{1, 5, 2, 0, 3, 4}));
  EXPECT_EQ(c.n_sorted, 6);

  softmax(c);
  const double z =
      std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0 + std::exp(-1.0) + std::exp(2.5);
  EXPECT_NEAR(c.items[0].p, std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(c.items[5].p, std::exp(-1.0) / z, 1e-6);

  CandidateList ties = list_of({0.5f, 0.5f, 0.5f, 0.5f});
  sort_prefix(ties, 4);
  EXPECT_EQ(ids(ties), (Ids{0, 1, 2, 3}));  // ties: lower id first

  CandidateList dead = list_of({-INFINITY, -INFINITY});
  softmax(dead);
  EXPECT_FLOAT_EQ(dead.items[0].p, 0.5f);
  CandidateList one_alive = list_of({-INFINITY, 4.0f, -INFINITY});
  softmax(one_alive);
  EXPECT_FLOAT_EQ(one_alive.items[0].p, 0.0f);
  EXPECT_FLOAT_EQ(one_alive.items[1].p, 1.0f);
}

TEST(SamplingStages, TopK) {
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(3))), (Ids{1, 5, 2}));
  EXPECT_EQ(run_stage(*make_top_k_stage(3)).n_sorted, 3);
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(1))), (Ids{1}));
  // k > n and k <= 0 keep everything, untouched.
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(10))), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(0))), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(2), {7.0f, 7.0f, 7.0f, 7.0f})), (Ids{0, 1}));
  EXPECT_EQ(ids(run_stage(*make_top_k_stage(2), {-INFINITY, 1.0f, -INFINITY, 0.0f})), (Ids{1, 3}));
}

TEST(SamplingStages, TopP) {
  // Cumulative mass in order 1, 5, 2, 0, 3, 4: .4592 .7377 .9066 .9687 .9916 1.
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.4f))), (Ids{1}));
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.5f))), (Ids{1, 5}));
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.9f))), (Ids{1, 5, 2}));
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.95f))), (Ids{1, 5, 2, 0}));
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.995f))), (Ids{1, 5, 2, 0, 3, 4}));
  const CandidateList c = run_stage(*make_top_p_stage(0.9f));
  EXPECT_NEAR(c.items[0].p, 0.45917, 1e-5);  // probabilities over all six, as llama.cpp
  EXPECT_NEAR(c.items[2].p, 0.16892, 1e-5);
  // p = 1 is off: nothing moves.
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(1.0f))), (Ids{0, 1, 2, 3, 4, 5}));
  // Equal logits: each holds 1/4; 0.5 needs two, the lowest ids.
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.5f), {2.0f, 2.0f, 2.0f, 2.0f})), (Ids{0, 1}));
  // -inf tokens carry no mass and are never needed.
  EXPECT_EQ(ids(run_stage(*make_top_p_stage(0.99f), {-INFINITY, 1.0f, 1.0f})), (Ids{1, 2}));
}

TEST(SamplingStages, TopPOnALargeVocabularySortsOnlyWhatItNeeds) {
  // 5000 tokens with one dominant: the answer is the dominant token alone.
  std::vector<float> logits(5000, 0.0f);
  logits[4321] = 20.0f;
  const CandidateList c = run_stage(*make_top_p_stage(0.9f), logits);
  EXPECT_EQ(ids(c), (Ids{4321}));
  // A flat vocabulary needs 90% of it, in id order (ties).
  std::vector<float> flat(1000, 1.0f);
  const CandidateList f = run_stage(*make_top_p_stage(0.9f), flat);
  ASSERT_GE(f.items.size(), 899u);
  ASSERT_LE(f.items.size(), 901u);
  for (size_t i = 0; i < f.items.size(); ++i) EXPECT_EQ(f.items[i].id, static_cast<int32_t>(i));
}

TEST(SamplingStages, MinP) {
  // Thresholds: 3 + ln 0.1 = 0.697 keeps logits 3, 2.5, 2, 1; 3 + ln 0.5 = 2.307 keeps 3, 2.5.
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(0.1f))), (Ids{0, 1, 2, 5}));  // order kept
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(0.5f))), (Ids{1, 5}));
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(1.0f))), (Ids{1}));
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(0.0f))), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(0.9f), {1.0f, 1.0f, 1.0f})), (Ids{0, 1, 2}));
  EXPECT_EQ(ids(run_stage(*make_min_p_stage(0.05f), {-INFINITY, 0.0f, -INFINITY})), (Ids{1}));
  // After top-k the survivors of the sorted prefix stay sorted.
  CandidateList c = list_of(kLogits);
  std::mt19937 rng(0);
  make_top_k_stage(4)->apply(c, rng);
  make_min_p_stage(0.5f)->apply(c, rng);
  EXPECT_EQ(ids(c), (Ids{1, 5}));
  EXPECT_EQ(c.n_sorted, 2);
}

TEST(SamplingStages, Typical) {
  // Entropy 1.3130 nats; |surprise - entropy| orders the tokens 5, 2, 1, 0, 3, 4 with running
  // mass .2785 .4474 .9066 .9687 .9916 1; kept until the mass exceeds p.
  EXPECT_EQ(ids(run_stage(*make_typical_stage(0.1f))), (Ids{5}));
  EXPECT_EQ(ids(run_stage(*make_typical_stage(0.3f))), (Ids{5, 2}));
  EXPECT_EQ(ids(run_stage(*make_typical_stage(0.9f))), (Ids{5, 2, 1}));
  EXPECT_EQ(ids(run_stage(*make_typical_stage(0.95f))), (Ids{5, 2, 1, 0}));
  EXPECT_EQ(ids(run_stage(*make_typical_stage(1.0f))), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(run_stage(*make_typical_stage(0.9f)).n_sorted, 0);
  // Equal logits are all equally typical: ties by id.
  EXPECT_EQ(ids(run_stage(*make_typical_stage(0.6f), {1.0f, 1.0f, 1.0f, 1.0f})), (Ids{0, 1, 2}));
}

TEST(SamplingStages, Temperature) {
  const CandidateList c = run_stage(*make_temperature_stage(2.0f));
  for (size_t i = 0; i < kLogits.size(); ++i) EXPECT_FLOAT_EQ(c.items[i].logit, kLogits[i] / 2);
  EXPECT_EQ(run_stage(*make_temperature_stage(0.5f), {-INFINITY}).items[0].logit, -INFINITY);
}

TEST(SamplingStages, LogitBias) {
  auto stage = make_logit_bias_stage({{2, 1.5f}, {4, -INFINITY}, {99, 5.0f}, {-3, 1.0f}});
  const CandidateList c = run_stage(*stage);
  EXPECT_FLOAT_EQ(c.items[2].logit, 3.5f);
  EXPECT_EQ(c.items[4].logit, -INFINITY);
  EXPECT_FLOAT_EQ(c.items[1].logit, 3.0f);
  // Found by search when the list is no longer in id order.
  CandidateList shuffled = list_of(kLogits);
  std::reverse(shuffled.items.begin(), shuffled.items.end());
  std::mt19937 rng(0);
  stage->apply(shuffled, rng);
  EXPECT_FLOAT_EQ(shuffled.items[3].logit, 3.5f);  // id 2
  EXPECT_EQ(shuffled.items[1].logit, -INFINITY);   // id 4
}

TEST(SamplingStages, PenaltiesDivideOrMultiplyAndSubtract) {
  // repeat 2, frequency 0.5, presence 0.25 over the last 4 of [3, 1, 1, 4, 0]: window
  // [1, 1, 4, 0] (3 slid out). id 1 (logit 3, twice): 3/2 - 2*.5 - .25 = .25;
  // id 4 (-1): -1*2 - .5 - .25 = -2.75; id 0 (1): .5 - .75 = -.25; id 3 (0) untouched.
  auto stage = make_penalties_stage(4, 2.0f, 0.5f, 0.25f);
  for (int32_t t : {3, 1, 1, 4, 0}) stage->accept(t);
  CandidateList c = run_stage(*stage);
  EXPECT_FLOAT_EQ(c.items[1].logit, 0.25f);
  EXPECT_FLOAT_EQ(c.items[4].logit, -2.75f);
  EXPECT_FLOAT_EQ(c.items[0].logit, -0.25f);
  EXPECT_FLOAT_EQ(c.items[3].logit, 0.0f);
  EXPECT_FLOAT_EQ(c.items[2].logit, 2.0f);
  EXPECT_FLOAT_EQ(c.items[5].logit, 2.5f);

  // The window slides further: [4, 0, 5, 5]; a zero logit is "not positive": multiplied.
  stage->accept(5);
  stage->accept(5);
  c = run_stage(*stage, {0.0f, 3.0f, 0.0f, 0.0f, 1.0f, 4.0f});
  EXPECT_FLOAT_EQ(c.items[1].logit, 3.0f);                 // slid out
  EXPECT_FLOAT_EQ(c.items[0].logit, 0.0f - 0.5f - 0.25f);  // 0 * 2 - 0.75
  EXPECT_FLOAT_EQ(c.items[4].logit, 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(c.items[5].logit, 2.0f - 1.0f - 0.25f);

  stage->reset();
  c = run_stage(*stage);
  for (size_t i = 0; i < kLogits.size(); ++i) EXPECT_FLOAT_EQ(c.items[i].logit, kLogits[i]);

  // last_n < 0 remembers everything; last_n 0 nothing.
  auto all = make_penalties_stage(-1, 1.0f, 1.0f, 0.0f);
  auto none = make_penalties_stage(0, 1.0f, 1.0f, 0.0f);
  for (int i = 0; i < 300; ++i) {
    all->accept(2);
    none->accept(2);
  }
  EXPECT_FLOAT_EQ(run_stage(*all).items[2].logit, 2.0f - 300.0f);
  EXPECT_FLOAT_EQ(run_stage(*none).items[2].logit, 2.0f);
}

TEST(SamplingStages, GreedyAndDistWithInfinities) {
  std::mt19937 rng(5);
  CandidateList c = list_of({-INFINITY, -INFINITY, -INFINITY});
  make_greedy_stage()->apply(c, rng);
  EXPECT_EQ(c.selected, 0);
  auto dist = make_dist_stage();
  for (int i = 0; i < 100; ++i) {
    CandidateList d = list_of({-INFINITY, 0.0f, -INFINITY, -INFINITY});
    dist->apply(d, rng);
    EXPECT_EQ(d.selected, 1);
  }
  std::set<int32_t> seen;  // all impossible: uniform rather than a crash
  for (int i = 0; i < 100; ++i) {
    CandidateList d = list_of({-INFINITY, -INFINITY, -INFINITY});
    dist->apply(d, rng);
    seen.insert(d.selected);
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(SamplingStages, MirostatV2TruncatesBySurprise) {
  // mu starts at 2 tau. Surprises (bits) of 1, 5, 2, 0: 1.12, 1.84, 2.57, 4.01.
  // tau 1.5 (mu 3) keeps {1, 5, 2}; tau 0.5 (mu 1) keeps only the best.
  std::set<int32_t> seen;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    Sampler s(seed);
    s.add(make_mirostat_v2_stage(1.5f, 0.1f));
    const int32_t t = s.sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 5 || t == 2) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 3u);
  Sampler greedy_like(3);
  greedy_like.add(make_mirostat_v2_stage(0.5f, 0.1f));
  EXPECT_EQ(greedy_like.sample(kLogits), 1);
  // The pick had surprise 0 after renormalizing, so mu rose by eta * tau to 1.05: still
  // below 1.12, the best token alone again.
  EXPECT_EQ(greedy_like.sample(kLogits), 1);
  greedy_like.reset();
  EXPECT_EQ(greedy_like.sample(kLogits), 1);
}

TEST(SamplingStages, MirostatV1EstimatesZipfAndTruncates) {
  // Exactly Zipfian probabilities p_i ~ 1/(i+1)^2 over 1000 tokens: s_hat = 2, so
  // k = (2^mu / (1 - 1/1000))^(1/2). tau 0.1 (mu 0.2): k = 1.07, the best token only;
  // tau 5 (mu 10): k = 32, draws spread over (only) the top 32.
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -2.0f * std::log(float(i + 1));
  Sampler low(1);
  low.add(make_mirostat_stage(0.1f, 0.1f));
  EXPECT_EQ(low.sample(logits), 0);
  std::set<int32_t> seen;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    Sampler s(seed);
    s.add(make_mirostat_stage(5.0f, 0.1f));
    const int32_t t = s.sample(logits);
    EXPECT_LT(t, 32);
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 5u);
}

TEST(SamplingChain, MakeSamplerBuildsLlamaCppsOrder) {
  SamplingParams p;  // llama.cpp's defaults
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(make_sampler(p).describe(), "top-k -> top-p -> min-p -> temperature -> dist");
  p.typical_p = 0.5f;
  p.repeat_penalty = 1.1f;
  p.logit_bias = {{1, -1.0f}};
  EXPECT_EQ(make_sampler(p).describe(),
            "logit-bias -> penalties -> top-k -> typical -> top-p -> min-p -> temperature -> "
            "dist");
  p.temperature = 0.0f;
  EXPECT_EQ(make_sampler(p).describe(), "logit-bias -> penalties -> greedy");
  p.temperature = 0.7f;
  p.mirostat = 2;
  EXPECT_EQ(make_sampler(p).describe(), "logit-bias -> penalties -> temperature -> mirostat-v2");
  p.mirostat = 1;
  p.repeat_last_n = 0;  // penalties off
  p.logit_bias.clear();
  EXPECT_EQ(make_sampler(p).describe(), "temperature -> mirostat");
}

TEST(SamplingChain, GreedyAppliesBiasAndPenaltiesFirst) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(make_sampler(p).sample(kLogits), 1);
  p.logit_bias = {{1, -INFINITY}};
  EXPECT_EQ(make_sampler(p).sample(kLogits), 5);
  p.logit_bias.clear();
  p.repeat_penalty = 2.0f;  // 3 / 2 < 2.5
  Sampler s = make_sampler(p);
  s.accept(1);
  EXPECT_EQ(s.sample(kLogits), 5);
  s.reset();
  EXPECT_EQ(s.sample(kLogits), 1);
  // Ties go to the lowest id.
  EXPECT_EQ(make_sampler(p).sample(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);
}

TEST(SamplingChain, SameSeedSameTokens) {
  std::vector<float> logits(8000);
  std::mt19937 gen(99);
  for (float& l : logits) l = static_cast<float>(gen() % 2000) / 200.0f;
  auto draw = [&](uint32_t seed, int32_t mirostat) {
    SamplingParams p;
    p.seed = seed;
    p.mirostat = mirostat;
    p.temperature = 1.5f;
    Sampler s = make_sampler(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) {
      out.push_back(s.sample(logits));
      s.accept(out.back());
    }
    return out;
  };
  for (int32_t mirostat : {0, 1, 2}) {
    SCOPED_TRACE(mirostat);
    EXPECT_EQ(draw(7, mirostat), draw(7, mirostat));
    EXPECT_NE(draw(7, mirostat), draw(8, mirostat));
  }
  // The default chain only ever picks from the top 40.
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  for (int32_t t : draw(3, 0)) EXPECT_GE(logits[static_cast<size_t>(t)], sorted[39]);
}

}  // namespace
}  // namespace qrun
