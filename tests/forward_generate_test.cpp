// The generation loop, the KV cache and the sampler chain, on stories260K: greedy
// generate() reproduces llama.cpp's golden tokens; every stop reason (eos, length,
// context, interrupted) is reached and reported; a prompt fed in two calls (a chat turn)
// or replayed after truncate() gives the same tokens; seeded sampling is reproducible and
// draws from the softmax.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/generate.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

class Generate : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> f = gguf::File::open(test::data_path("models/stories260K.gguf").string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::make_unique<gguf::File>(std::move(f.value()));
    Result<std::unique_ptr<Model>> m = models::load_model(*file_, ModelOptions{16});
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(m.value());
    const nlohmann::json j =
        nlohmann::json::parse(test::read_text(test::data_path("golden/stories260K.park.json")));
    prompt_ = j.at("prompt_tokens").get<std::vector<int32_t>>();
    golden_ = j.at("greedy_tokens").get<std::vector<int32_t>>();
  }

  KvCache cache(int64_t n_ctx = 256) {
    Result<KvCache> kv = make_kv_cache(*model_, n_ctx, DType::kF16);
    EXPECT_TRUE(kv.ok());
    return std::move(kv.value());
  }

  GenerateResult run(KvCache& kv, std::span<const int32_t> prompt, GenerateParams params,
                     Sampler& sampler, const OnToken& on_token = nullptr,
                     const IsEog& is_eog = nullptr) {
    Result<GenerateResult> r =
        generate(*model_, backend_, kv, prompt, params, sampler, on_token, is_eog);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? std::move(r.value()) : GenerateResult{};
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Model> model_;
  kernels::CpuBackend backend_{2};
  std::vector<int32_t> prompt_;
  std::vector<int32_t> golden_;
};

TEST_F(Generate, GreedyReproducesLlamaCpp) {
  KvCache kv = cache();
  Sampler greedy = make_sampler(SamplingParams{0.0f, 0});
  std::vector<int32_t> streamed;
  GenerateParams p;
  p.n_predict = 48;
  p.n_batch = 5;  // the prompt in three pieces
  const GenerateResult r = run(kv, prompt_, p, greedy, [&](int32_t t) {
    streamed.push_back(t);
    return TokenAction::kContinue;
  });
  EXPECT_EQ(r.tokens, golden_);
  EXPECT_EQ(streamed, golden_);
  EXPECT_EQ(r.stop_reason, StopReason::kLength);
  EXPECT_STREQ(stop_reason_name(r.stop_reason), "length");
  EXPECT_EQ(r.timings.n_prompt, static_cast<int64_t>(prompt_.size()));
  EXPECT_EQ(r.timings.n_gen, 48);
  EXPECT_GT(r.timings.prompt_ms, 0.0);
  EXPECT_GT(r.timings.ttft_ms, 0.0);
  // The last sampled token is not fed.
  EXPECT_EQ(kv.n_tokens(), static_cast<int64_t>(prompt_.size()) + 47);
}

TEST_F(Generate, StopReasons) {
  GenerateParams p;
  p.n_predict = 48;
  {  // End of generation: the EOG token is neither emitted nor returned.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    const int32_t eog = golden_[5];
    const GenerateResult r = run(kv, prompt_, p, s, nullptr, [&](int32_t t) { return t == eog; });
    EXPECT_EQ(r.stop_reason, StopReason::kEos);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(golden_.begin(), golden_.begin() + 5));
    EXPECT_EQ(r.timings.n_gen, 6);
  }
  {  // The callback interrupts it.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    int n = 0;
    const GenerateResult r = run(kv, prompt_, p, s, [&](int32_t) {
      return ++n < 3 ? TokenAction::kContinue : TokenAction::kInterrupt;
    });
    EXPECT_EQ(r.stop_reason, StopReason::kInterrupted);
    EXPECT_EQ(r.tokens.size(), 3u);
  }
  {  // The callback reports a stop string: the last token is returned but not fed.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    int n = 0;
    const GenerateResult r = run(kv, prompt_, p, s, [&](int32_t) {
      return ++n < 4 ? TokenAction::kContinue : TokenAction::kStop;
    });
    EXPECT_EQ(r.stop_reason, StopReason::kStop);
    EXPECT_STREQ(stop_reason_name(r.stop_reason), "stop");
    EXPECT_EQ(r.tokens, std::vector<int32_t>(golden_.begin(), golden_.begin() + 4));
    EXPECT_EQ(kv.n_tokens(), static_cast<int64_t>(prompt_.size()) + 3);
  }
  {  // The interrupt flag, set before the prompt.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    std::atomic<bool> flag{true};
    GenerateParams q = p;
    q.interrupt = &flag;
    const GenerateResult r = run(kv, prompt_, q, s);
    EXPECT_EQ(r.stop_reason, StopReason::kInterrupted);
    EXPECT_TRUE(r.tokens.empty());
  }
  {  // A deadline already past stops it before the prompt; one passing during the
     // generation (the callback sleeps past it at the third token) stops it after that token.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    GenerateParams q = p;
    q.deadline = std::chrono::steady_clock::now();
    const GenerateResult r = run(kv, prompt_, q, s);
    EXPECT_EQ(r.stop_reason, StopReason::kInterrupted);
    EXPECT_TRUE(r.tokens.empty());
    EXPECT_EQ(kv.n_tokens(), 0);
    KvCache kv2 = cache();
    Sampler s2 = make_sampler(SamplingParams{0.0f, 0});
    q.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    int n = 0;
    const GenerateResult r2 = run(kv2, prompt_, q, s2, [&](int32_t) {
      if (++n == 3) std::this_thread::sleep_until(q.deadline);
      return TokenAction::kContinue;
    });
    EXPECT_EQ(r2.stop_reason, StopReason::kInterrupted);
    EXPECT_EQ(r2.tokens, std::vector<int32_t>(golden_.begin(), golden_.begin() + 3));
  }
  {  // A full context: 10 free positions after the prompt feed 10 tokens, and the 11th
     // sampled token is emitted but has nowhere to go.
    KvCache kv = cache(static_cast<int64_t>(prompt_.size()) + 10);
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    const GenerateResult r = run(kv, prompt_, p, s);
    EXPECT_EQ(r.stop_reason, StopReason::kContext);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(golden_.begin(), golden_.begin() + 11));
    EXPECT_EQ(kv.n_free(), 0);
  }
  {  // n_predict 0: the prompt is processed, nothing is sampled.
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{0.0f, 0});
    GenerateParams q;
    q.n_predict = 0;
    const GenerateResult r = run(kv, prompt_, q, s);
    EXPECT_EQ(r.stop_reason, StopReason::kLength);
    EXPECT_TRUE(r.tokens.empty());
    EXPECT_EQ(kv.n_tokens(), static_cast<int64_t>(prompt_.size()));
  }
}

TEST_F(Generate, PromptErrors) {
  Sampler s = make_sampler(SamplingParams{0.0f, 0});
  KvCache small = cache(static_cast<int64_t>(prompt_.size()) - 1);
  Result<GenerateResult> r =
      generate(*model_, backend_, small, prompt_, GenerateParams{}, s, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kContextOverflow);
  EXPECT_EQ(small.n_tokens(), 0);
  KvCache kv = cache();
  r = generate(*model_, backend_, kv, {}, GenerateParams{}, s, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
  const std::vector<int32_t> bad = {1, 100000};
  r = generate(*model_, backend_, kv, bad, GenerateParams{}, s, nullptr, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
}

TEST_F(Generate, ChatTurnsAndTruncateReplay) {
  GenerateParams p;
  p.n_predict = 20;
  // The prompt in two turns: the first only fills the cache.
  KvCache kv = cache();
  Sampler s = make_sampler(SamplingParams{0.0f, 0});
  GenerateParams first;
  first.n_predict = 0;
  const std::span<const int32_t> all(prompt_);
  run(kv, all.first(4), first, s);
  const GenerateResult second = run(kv, all.subspan(4), p, s);
  EXPECT_EQ(second.tokens, std::vector<int32_t>(golden_.begin(), golden_.begin() + 20));
  // Rewind to the prompt and generate again: the same continuation.
  kv.truncate(static_cast<int64_t>(prompt_.size()) - 1);
  const GenerateResult again = run(kv, all.last(1), p, s);
  EXPECT_EQ(again.tokens, second.tokens);
}

TEST_F(Generate, SeededSamplingIsReproducible) {
  GenerateParams p;
  p.n_predict = 32;
  std::vector<std::vector<int32_t>> outs;
  for (uint32_t seed : {42u, 42u, 7u}) {
    KvCache kv = cache();
    Sampler s = make_sampler(SamplingParams{1.0f, seed});
    outs.push_back(run(kv, prompt_, p, s).tokens);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_NE(outs[0], outs[2]);
  EXPECT_EQ(outs[0].size(), 32u);
}

TEST(Sampling, GreedyPicksTheLowestIdOnTies) {
  Sampler s = make_sampler(SamplingParams{0.0f, 0});
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.sample(logits), 1);
  const std::vector<float> one = {-3.0f};
  EXPECT_EQ(s.sample(one), 0);
}

TEST(Sampling, DistDrawsFromTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, 3.0f};
  for (float temp : {1.0f, 0.5f}) {
    SamplingParams params{temp, 1234};
    params.top_k = 0;  // temperature and the draw only
    params.top_p = 1.0f;
    params.min_p = 0.0f;
    Sampler s = make_sampler(params);
    std::vector<int> counts(logits.size(), 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits))];
    double z = 0.0;
    for (float l : logits) z += std::exp(l / temp);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double p = std::exp(logits[i] / temp) / z;
      const double sigma = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(counts[i], n * p, 5 * sigma + 1) << "temp " << temp << " token " << i;
    }
  }
}

TEST(Sampling, StagesCompose) {
  // Temperature then greedy: scaling never changes the argmax.
  Sampler s(0);
  s.add(make_temperature_stage(0.25f)).add(make_greedy_stage());
  EXPECT_EQ(s.n_stages(), 2u);
  const std::vector<float> logits = {0.1f, -2.0f, 0.3f};
  EXPECT_EQ(s.sample(logits), 2);
}

TEST(KvCacheTest, CreateTruncateClear) {
  Result<KvCache> bad = KvCache::create(2, 16, 2, 4, DType::kQ4_K);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kUnsupported);
  // Q8_0 is a cache type, but its 32-element blocks do not fit a head of 4.
  Result<KvCache> narrow = KvCache::create(2, 16, 2, 4, DType::kQ8_0);
  ASSERT_FALSE(narrow.ok());
  EXPECT_EQ(narrow.error().code, ErrorCode::kUsage);
  Result<KvCache> empty = KvCache::create(2, 0, 2, 4, DType::kF16);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, ErrorCode::kUsage);

  Result<KvCache> kv = KvCache::create(3, 16, 2, 4, DType::kF32);
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->n_bytes(), 2u * 3 * 16 * 8 * 4);
  EXPECT_EQ(kv->n_free(), 16);
  kv->set_n_tokens(10);
  kv->truncate(4);
  EXPECT_EQ(kv->n_tokens(), 4);
  EXPECT_EQ(kv->n_free(), 12);
  const KvLayerView l0 = kv->layer(0);
  const KvLayerView l2 = kv->layer(2);
  EXPECT_EQ(l0.n_rows, 16);
  EXPECT_EQ(l0.row_elems(), 8);
  EXPECT_EQ(static_cast<uint8_t*>(l2.k) - static_cast<uint8_t*>(l0.k), 2 * 16 * 8 * 4);
  kv->clear();
  EXPECT_EQ(kv->n_tokens(), 0);
}

}  // namespace
}  // namespace qrun
