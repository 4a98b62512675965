// BatchScheduler, stepped by the test itself so that every check is about steps, not time:
// requests that run together (more than the slots, so some queue; prompts longer than a
// step's budget, so they go in chunks) give exactly the tokens generate() gives each alone,
// greedy and seeded; a long prompt admitted while another sequence streams takes several
// steps, and the streaming sequence gets one token in every one of them; cancelling,
// the time limit, a full queue and shutdown end or refuse requests as documented.
#include "core/batch_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

struct Fixture {
  explicit Fixture(const std::string& model_file, int64_t n_batch, int64_t n_seq) {
    Result<gguf::File> f = gguf::File::open(test::data_path("models/" + model_file).string());
    EXPECT_TRUE(f.ok()) << f.error().message;
    file.emplace(std::move(*f));
    Result<std::unique_ptr<Model>> m = models::load_model(*file, ModelOptions{n_batch, n_seq});
    EXPECT_TRUE(m.ok()) << m.error().message;
    model = std::move(*m);
  }
  std::vector<KvCache> caches(int n, int64_t n_ctx) {
    std::vector<KvCache> out;
    for (int i = 0; i < n; ++i) {
      Result<KvCache> kv = make_kv_cache(*model, n_ctx);
      EXPECT_TRUE(kv.ok());
      out.push_back(std::move(*kv));
    }
    return out;
  }
  // n paged slots of n_ctx positions over one pool of n_blocks blocks of `rows` rows.
  std::vector<KvCache> paged(int n, int64_t n_ctx, int64_t n_blocks, int64_t rows = 16) {
    Result<std::shared_ptr<KvBlockPool>> p = make_kv_block_pool(*model, n_blocks, rows);
    EXPECT_TRUE(p.ok());
    pool = *p;
    std::vector<KvCache> out;
    for (int i = 0; i < n; ++i) {
      Result<KvCache> kv = make_paged_kv_cache(*model, pool, n_ctx);
      EXPECT_TRUE(kv.ok());
      out.push_back(std::move(*kv));
    }
    return out;
  }
  std::optional<gguf::File> file;
  std::unique_ptr<Model> model;
  std::shared_ptr<KvBlockPool> pool;
  kernels::CpuBackend backend{2};
};

std::vector<int32_t> prompt_of(int64_t n, int salt, int64_t n_vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i)
    p.push_back(static_cast<int32_t>((i * 7919 + salt * 104729 + 3) % (n_vocab - 3) + 3));
  return p;
}

SamplingParams sampling(bool greedy, uint32_t seed) {
  SamplingParams sp;
  if (greedy) sp.temperature = 0.0f;
  sp.seed = seed;
  return sp;
}

// What one request ended with, filled by its callbacks.
struct Outcome {
  std::vector<int32_t> tokens;       // as on_token saw them
  std::vector<int64_t> token_steps;  // the scheduler's n_steps() at each token
  std::optional<Result<GenerateResult>> result;
  bool timed_out = false;
  int64_t start_step = -1;
  int64_t running_at_done = -1;  // the scheduler's gauges when on_done ran
  int64_t kv_used_at_done = -1;
  int64_t done_step = -1;
};

SeqRequest request(BatchScheduler& sched, Outcome& out, std::vector<int32_t> prompt,
                   int64_t n_predict, const SamplingParams& sp) {
  SeqRequest r;
  r.prompt = std::move(prompt);
  r.n_predict = n_predict;
  r.sampler = make_sampler(sp);
  r.on_start = [&sched, &out] { out.start_step = sched.n_steps(); };
  r.on_token = [&sched, &out](int32_t t) {
    out.tokens.push_back(t);
    out.token_steps.push_back(sched.n_steps());
    return TokenAction::kContinue;
  };
  r.on_done = [&sched, &out](Result<GenerateResult> result, bool timed_out) {
    out.running_at_done = sched.n_running();
    out.kv_used_at_done = sched.kv_tokens_used();
    out.done_step = sched.n_steps();
    out.result.emplace(std::move(result));
    out.timed_out = timed_out;
  };
  return r;
}

// The tokens generate() gives `prompt` alone, in a fresh cache.
std::vector<int32_t> alone(Fixture& f, const std::vector<int32_t>& prompt, int64_t n_predict,
                           const SamplingParams& sp, int64_t n_ctx) {
  Result<KvCache> kv = make_kv_cache(*f.model, n_ctx);
  EXPECT_TRUE(kv.ok());
  Sampler sampler = make_sampler(sp);
  GenerateParams gp;
  gp.n_predict = n_predict;
  gp.n_batch = f.model->n_batch();
  Result<GenerateResult> r =
      generate(*f.model, f.backend, *kv, prompt, gp, sampler, nullptr, nullptr);
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->tokens : std::vector<int32_t>();
}

// Every request ended by its length with the tokens it gives alone: request i had prompts[i],
// n_predict[i] and sampling sp[i].
void expect_each_as_alone(Fixture& f, const std::vector<Outcome>& out,
                          const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<int64_t>& n_predict,
                          const std::vector<SamplingParams>& sp, int64_t n_ctx,
                          const std::string& what) {
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].result.has_value()) << what << ", request " << i;
    ASSERT_TRUE(out[i].result->ok()) << out[i].result->error().message;
    EXPECT_EQ((*out[i].result)->stop_reason, StopReason::kLength) << what << ", request " << i;
    EXPECT_EQ(out[i].tokens, alone(f, prompts[i], n_predict[i], sp[i], n_ctx))
        << what << ", request " << i;
  }
}

TEST(BatchScheduler, RequestsRunTogetherGiveWhatEachGivesAlone) {
  for (const char* model : {"stories260K.gguf", "TinyLLama-v0-5M-Q4_0.gguf"}) {
    constexpr int64_t kCtx = 96;
    Fixture f(model, /*n_batch=*/8, /*n_seq=*/3);
    const int64_t n_vocab = f.model->hparams().n_vocab;
    std::atomic<bool> shutdown{false};
    BatchScheduler sched(*f.model, f.backend, f.caches(3, kCtx), 8, 16, &shutdown);
    // Five requests for three slots; prompts of 1 to 30 tokens; the last two sample with a
    // seed rather than greedily.
    const int64_t lengths[] = {5, 30, 1, 17, 9};
    const int64_t predict[] = {20, 12, 25, 8, 30};
    std::vector<Outcome> out(5);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 5; ++i) {
      prompts.push_back(prompt_of(lengths[i], i, n_vocab));
      const SamplingParams sp = sampling(i < 3, 100 + i);
      ASSERT_EQ(sched.submit(request(sched, out[i], prompts[i], predict[i], sp)),
                BatchScheduler::Submitted::kQueued);
    }
    for (int guard = 0; guard < 1000 && sched.step(); ++guard) {
    }
    EXPECT_EQ(sched.n_running(), 0);
    EXPECT_GT(sched.n_mixed_steps(), 0) << "no step held prompt chunks and decode tokens";
    std::vector<SamplingParams> sp;
    for (int i = 0; i < 5; ++i) sp.push_back(sampling(i < 3, 100 + i));
    expect_each_as_alone(f, out, prompts, {std::begin(predict), std::end(predict)}, sp, kCtx,
                         model);
  }
}

// Paged slots: four sequences of up to 320 positions over a pool of 320 tokens (20 blocks
// of 16). A contiguous split of those 320 tokens gives 80 a slot, too few for request 0
// (60 prompt tokens and 40 generated); paged, each takes the blocks it fills, the greedy
// and seeded tokens are those of each request alone, and every block goes back.
TEST(BatchScheduler, PagedSlotsTakeBlocksOnDemandAndGiveWhatEachGivesAlone) {
  for (const char* model : {"stories260K.gguf", "TinyLLama-v0-5M-Q4_0.gguf"}) {
    constexpr int64_t kCtx = 320;
    Fixture f(model, /*n_batch=*/16, /*n_seq=*/4);
    const int64_t n_vocab = f.model->hparams().n_vocab;
    std::atomic<bool> shutdown{false};
    BatchScheduler sched(*f.model, f.backend, f.paged(4, kCtx, kCtx / 16), 16, 16, &shutdown);
    ASSERT_TRUE(sched.paged());
    EXPECT_EQ(sched.kv_blocks_total(), 20);
    const int64_t lengths[] = {60, 5, 1, 17, 9};
    const int64_t predict[] = {40, 12, 25, 8, 30};
    std::vector<Outcome> out(5);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 5; ++i) {
      prompts.push_back(prompt_of(lengths[i], i, n_vocab));
      ASSERT_EQ(
          sched.submit(request(sched, out[i], prompts[i], predict[i], sampling(i < 3, 100 + i))),
          BatchScheduler::Submitted::kQueued);
    }
    int64_t most_blocks = 0;
    for (int guard = 0; guard < 1000 && sched.step(); ++guard) {
      most_blocks = std::max(most_blocks, sched.kv_blocks_used());
      EXPECT_EQ(sched.kv_blocks_used(), f.pool->n_used());
    }
    EXPECT_GT(most_blocks, 0);
    EXPECT_EQ(f.pool->n_used(), 0);
    EXPECT_EQ(sched.kv_blocks_used(), 0);
    std::vector<SamplingParams> sp;
    for (int i = 0; i < 5; ++i) sp.push_back(sampling(i < 3, 100 + i));
    expect_each_as_alone(f, out, prompts, {std::begin(predict), std::end(predict)}, sp, kCtx,
                         model);
  }
}

// Prefix caching: after A (50 prompt tokens, 20 generated) ends, its full blocks of 16 are
// cached, prompt and reply. B shares A's first 40 prompt tokens: it reuses 2 blocks (32
// tokens) and feeds only 23 tokens, in 2 steps instead of 4; C is A's first 49 tokens, whose
// 3 cached blocks would leave one token to feed, so it reuses 2 (two tokens at least go in,
// see the header); D continues A's conversation (its prompt, its reply, more) and reuses 4
// blocks, the last of them holding A's reply. Each gives the tokens it gives alone, and
// without prefix caching nothing is reused.
TEST(BatchScheduler, PrefixCachingReusesWholeBlocksAndSkipsTheirPrefill) {
  for (const char* model : {"stories260K.gguf", "TinyLLama-v0-5M-Q4_0.gguf"}) {
    for (const bool prefix_cache : {true, false}) {
      Fixture f(model, 16, 2);
      const int64_t n_vocab = f.model->hparams().n_vocab;
      std::atomic<bool> shutdown{false};
      BatchScheduler sched(*f.model, f.backend, f.paged(2, 320, 20), 16, 4, &shutdown,
                           prefix_cache);
      const SamplingParams greedy = sampling(true, 0);
      auto run = [&](const std::vector<int32_t>& prompt, int64_t n_predict) {
        Outcome o;
        EXPECT_EQ(sched.submit(request(sched, o, prompt, n_predict, greedy)),
                  BatchScheduler::Submitted::kQueued);
        for (int guard = 0; guard < 200 && sched.step(); ++guard) {
        }
        EXPECT_TRUE(o.result && o.result->ok());
        EXPECT_EQ(o.tokens, alone(f, prompt, n_predict, greedy, 320)) << model;
        return o;
      };
      const std::vector<int32_t> pa = prompt_of(50, 1, n_vocab);
      const Outcome a = run(pa, 20);
      EXPECT_EQ((*a.result)->timings.n_prompt_cached, 0);
      EXPECT_EQ(a.token_steps.front() - a.start_step, 4);  // ceil(50 / 16) chunks

      std::vector<int32_t> pb(pa.begin(), pa.begin() + 40);
      const std::vector<int32_t> tail = prompt_of(15, 2, n_vocab);
      pb.insert(pb.end(), tail.begin(), tail.end());
      const Outcome b = run(pb, 5);
      const std::vector<int32_t> pc(pa.begin(), pa.begin() + 49);
      const Outcome c = run(pc, 5);
      std::vector<int32_t> pd = pa;
      pd.insert(pd.end(), a.tokens.begin(), a.tokens.end());
      pd.insert(pd.end(), tail.begin(), tail.begin() + 5);
      const Outcome d = run(pd, 5);
      const int64_t want_b = prefix_cache ? 32 : 0, want_c = prefix_cache ? 32 : 0,
                    want_d = prefix_cache ? 64 : 0;
      EXPECT_EQ((*b.result)->timings.n_prompt_cached, want_b) << model;
      EXPECT_EQ(b.token_steps.front() - b.start_step, prefix_cache ? 2 : 4);
      EXPECT_EQ((*c.result)->timings.n_prompt_cached, want_c) << model;
      EXPECT_EQ((*d.result)->timings.n_prompt_cached, want_d) << model;
      EXPECT_EQ(sched.n_prefix_hits(), prefix_cache ? 3 : 0);
      EXPECT_EQ(sched.n_prefix_tokens(), want_b + want_c + want_d);
      EXPECT_EQ(f.pool->n_used(), 0);
    }
  }
}

// A prompt that finds too few free blocks waits, first in line, until a sequence ends and
// gives its blocks back; it is not refused, and the queue counts it as waiting.
TEST(BatchScheduler, APromptWaitsForBlocks) {
  Fixture f("stories260K.gguf", 16, 2);
  const int64_t n_vocab = f.model->hparams().n_vocab;
  std::atomic<bool> shutdown{false};
  // 4 blocks of 16: A's 40 prompt tokens and 5 generated take 3, B's prompt needs 3 more.
  BatchScheduler sched(*f.model, f.backend, f.paged(2, 64, 4), 16, 4, &shutdown);
  const SamplingParams greedy = sampling(true, 0);
  const std::vector<int32_t> pa = prompt_of(40, 1, n_vocab), pb = prompt_of(40, 2, n_vocab);
  Outcome a, b;
  ASSERT_EQ(sched.submit(request(sched, a, pa, 5, greedy)), BatchScheduler::Submitted::kQueued);
  ASSERT_EQ(sched.submit(request(sched, b, pb, 5, greedy)), BatchScheduler::Submitted::kQueued);
  ASSERT_TRUE(sched.step());
  EXPECT_EQ(sched.n_running(), 1);
  EXPECT_EQ(sched.n_queued(), 1);  // b, parked
  EXPECT_EQ(b.start_step, -1);
  for (int guard = 0; guard < 100 && sched.step(); ++guard) {
  }
  ASSERT_TRUE(a.result && a.result->ok() && b.result && b.result->ok());
  EXPECT_GE(b.start_step, a.done_step);
  EXPECT_EQ(a.tokens, alone(f, pa, 5, greedy, 64));
  EXPECT_EQ(b.tokens, alone(f, pb, 5, greedy, 64));
  EXPECT_EQ(f.pool->n_used(), 0);
}

// Out of blocks: three sequences of 20 prompt tokens and 50 generated (70 positions, 5
// blocks of 16 each) over a pool of 6 blocks. All three start (2 blocks each); when the pool
// runs dry the newest running sequence gives its blocks back and waits to recompute its
// prompt and reply so far. All finish with the tokens each gives alone (greedy, and seeded:
// the sampler goes on where it was), no request fails, and no block stays held.
TEST(BatchScheduler, OutOfBlocksPreemptsTheNewestAndRecomputesIt) {
  for (const char* model : {"stories260K.gguf", "TinyLLama-v0-5M-Q4_0.gguf"}) {
    for (const bool prefix_cache : {false, true}) {
      Fixture f(model, 16, 3);
      const int64_t n_vocab = f.model->hparams().n_vocab;
      std::atomic<bool> shutdown{false};
      BatchScheduler sched(*f.model, f.backend, f.paged(3, 96, 6), 16, 8, &shutdown, prefix_cache);
      std::vector<Outcome> out(3);
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < 3; ++i) {
        prompts.push_back(prompt_of(20, i, n_vocab));
        ASSERT_EQ(sched.submit(request(sched, out[i], prompts[i], 50, sampling(i < 2, 7 + i))),
                  BatchScheduler::Submitted::kQueued);
      }
      for (int guard = 0; guard < 2000 && sched.step(); ++guard) {
        EXPECT_LE(sched.n_running() + sched.n_queued(), 3);
      }
      EXPECT_GT(sched.n_preemptions(), 0) << model;
      expect_each_as_alone(f, out, prompts, {50, 50, 50},
                           {sampling(true, 7), sampling(true, 8), sampling(false, 9)}, 96,
                           std::string(model) + (prefix_cache ? ", prefix caching" : ""));
      EXPECT_EQ(f.pool->n_used(), 0);
      EXPECT_EQ(sched.n_running() + sched.n_queued(), 0);
    }
  }
}

// A preempted sequence waiting to recompute is still a request: cancelled, it ends at the
// next step with the tokens it had (a prefix of what it gives alone); at shutdown, the
// running and the waiting all end, and every block goes back.
TEST(BatchScheduler, PreemptedSequencesEndOnCancelAndShutdown) {
  Fixture f("TinyLLama-v0-5M-Q4_0.gguf", 16, 3);
  const int64_t n_vocab = f.model->hparams().n_vocab;
  std::atomic<bool> shutdown{false};
  BatchScheduler sched(*f.model, f.backend, f.paged(3, 96, 6), 16, 8, &shutdown, true);
  const SamplingParams greedy = sampling(true, 0);
  std::vector<Outcome> out(3);
  std::vector<std::vector<int32_t>> prompts;
  auto cancel_newest = std::make_shared<std::atomic<bool>>(false);
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(prompt_of(20, i, n_vocab));
    SeqRequest r = request(sched, out[i], prompts[i], 50, greedy);
    if (i == 2) r.cancel = cancel_newest;
    ASSERT_EQ(sched.submit(std::move(r)), BatchScheduler::Submitted::kQueued);
  }
  for (int guard = 0; guard < 200 && sched.n_preemptions() == 0; ++guard) ASSERT_TRUE(sched.step());
  ASSERT_EQ(sched.n_preemptions(), 1);
  EXPECT_EQ(sched.n_running(), 2);
  EXPECT_EQ(sched.n_queued(), 1);  // the newest, waiting to recompute
  ASSERT_FALSE(out[2].tokens.empty());
  cancel_newest->store(true);
  sched.step();
  ASSERT_TRUE(out[2].result && out[2].result->ok());
  EXPECT_EQ((*out[2].result)->stop_reason, StopReason::kInterrupted);
  const std::vector<int32_t> whole = alone(f, prompts[2], 50, greedy, 96);
  ASSERT_LE(out[2].tokens.size(), whole.size());
  EXPECT_TRUE(std::equal(out[2].tokens.begin(), out[2].tokens.end(), whole.begin()));
  EXPECT_EQ(sched.n_queued(), 0);
  for (int guard = 0; guard < 200 && sched.n_preemptions() == 1; ++guard) ASSERT_TRUE(sched.step());
  EXPECT_EQ(sched.n_preemptions(), 2);  // the younger of the two others now waits
  shutdown = true;
  sched.run();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(out[i].result && out[i].result->ok()) << i;
    EXPECT_EQ((*out[i].result)->stop_reason, StopReason::kInterrupted) << i;
  }
  EXPECT_EQ(sched.n_running() + sched.n_queued(), 0);
  EXPECT_EQ(f.pool->n_used(), 0);
}

TEST(BatchScheduler, ALongPromptDoesNotStopAStreamingSequence) {
  // A budget of 8 tokens per step: while B's 60-token prompt goes in (8 - 1 tokens a step,
  // beside A's decode token), A gets a token in every step.
  constexpr int64_t kBatch = 8;
  Fixture f("stories260K.gguf", kBatch, 2);
  const int64_t n_vocab = f.model->hparams().n_vocab;
  std::atomic<bool> shutdown{false};
  BatchScheduler sched(*f.model, f.backend, f.caches(2, 256), kBatch, 4, &shutdown);
  Outcome a, b;
  const SamplingParams greedy = sampling(true, 0);
  ASSERT_EQ(sched.submit(request(sched, a, prompt_of(3, 1, n_vocab), 100, greedy)),
            BatchScheduler::Submitted::kQueued);
  while (a.tokens.size() < 3) ASSERT_TRUE(sched.step());
  ASSERT_EQ(sched.submit(request(sched, b, prompt_of(60, 2, n_vocab), 5, greedy)),
            BatchScheduler::Submitted::kQueued);
  while (b.tokens.empty()) ASSERT_TRUE(sched.step());
  // B started at step s0 (its first chunk ran in step s0 + 1) and had its first token at
  // step s1, after ceil(60 / 7) = 9 chunks.
  const int64_t s0 = b.start_step;
  const int64_t s1 = b.token_steps.front();
  EXPECT_EQ(s1 - s0, 9);
  for (int64_t step = s0 + 1; step <= s1; ++step) {
    EXPECT_EQ(std::count(a.token_steps.begin(), a.token_steps.end(), step), 1)
        << "A got no token in step " << step << " while B's prompt went in";
  }
  EXPECT_GE(sched.n_mixed_steps(), 9);
  shutdown = true;
  sched.run();  // ends both
  ASSERT_TRUE(a.result && a.result->ok());
  EXPECT_EQ((*a.result)->stop_reason, StopReason::kInterrupted);
}

TEST(BatchScheduler, CancelTimeLimitQueueAndShutdown) {
  Fixture f("stories260K.gguf", 8, 1);
  const int64_t n_vocab = f.model->hparams().n_vocab;
  std::atomic<bool> shutdown{false};
  BatchScheduler sched(*f.model, f.backend, f.caches(1, 128), 8, 1, &shutdown);
  const SamplingParams greedy = sampling(true, 0);

  // One slot and a queue of one: a third request is refused at once.
  Outcome a, b, c;
  SeqRequest ra = request(sched, a, prompt_of(4, 1, n_vocab), 100, greedy);
  auto cancel_a = std::make_shared<std::atomic<bool>>(false);
  ra.cancel = cancel_a;
  ASSERT_EQ(sched.submit(std::move(ra)), BatchScheduler::Submitted::kQueued);
  ASSERT_TRUE(sched.step());  // a takes the slot
  SeqRequest rb = request(sched, b, prompt_of(4, 2, n_vocab), 100, greedy);
  rb.timeout_s = 1e-9;  // over as soon as it has the slot
  ASSERT_EQ(sched.submit(std::move(rb)), BatchScheduler::Submitted::kQueued);
  EXPECT_EQ(sched.submit(request(sched, c, prompt_of(4, 3, n_vocab), 5, greedy)),
            BatchScheduler::Submitted::kQueueFull);
  EXPECT_EQ(sched.n_queued(), 1);

  // Cancelled: a ends at the next step, interrupted, and b takes the slot.
  ASSERT_TRUE(sched.step());
  const size_t a_tokens = a.tokens.size();
  cancel_a->store(true);
  sched.step();
  ASSERT_TRUE(a.result && a.result->ok());
  EXPECT_EQ((*a.result)->stop_reason, StopReason::kInterrupted);
  EXPECT_FALSE(a.timed_out);
  EXPECT_EQ(a.tokens.size(), a_tokens);
  // The gauges no longer count it when its caller hears of the end (a server's /metrics
  // scraped right after the reply must not see its slot and tokens).
  EXPECT_EQ(a.running_at_done, 0);
  EXPECT_EQ(a.kv_used_at_done, 0);
  // b's time is up before its first step ends: interrupted, with timed_out.
  for (int i = 0; i < 3 && !b.result; ++i) sched.step();
  ASSERT_TRUE(b.result && b.result->ok());
  EXPECT_EQ((*b.result)->stop_reason, StopReason::kInterrupted);
  EXPECT_TRUE(b.timed_out);
  EXPECT_EQ(sched.n_running(), 0);
  EXPECT_EQ(sched.kv_tokens_used(), 0);

  // Shutdown: running and queued requests end, new ones are refused.
  Outcome d, e;
  ASSERT_EQ(sched.submit(request(sched, d, prompt_of(4, 4, n_vocab), 100, greedy)),
            BatchScheduler::Submitted::kQueued);
  sched.step();
  ASSERT_EQ(sched.submit(request(sched, e, prompt_of(4, 5, n_vocab), 100, greedy)),
            BatchScheduler::Submitted::kQueued);
  shutdown = true;
  sched.run();
  for (Outcome* o : {&d, &e}) {
    ASSERT_TRUE(o->result && o->result->ok());
    EXPECT_EQ((*o->result)->stop_reason, StopReason::kInterrupted);
    EXPECT_FALSE(o->timed_out);
  }
  EXPECT_TRUE(e.tokens.empty());
  Outcome late;
  EXPECT_EQ(sched.submit(request(sched, late, prompt_of(4, 6, n_vocab), 5, greedy)),
            BatchScheduler::Submitted::kShuttingDown);
}

TEST(BatchScheduler, APromptThatDoesNotFitEndsWithAnError) {
  Fixture f("stories260K.gguf", 8, 1);
  std::atomic<bool> shutdown{false};
  BatchScheduler sched(*f.model, f.backend, f.caches(1, 16), 8, 1, &shutdown);
  Outcome a;
  ASSERT_EQ(sched.submit(request(sched, a, prompt_of(16, 1, f.model->hparams().n_vocab), 4,
                                 sampling(true, 0))),
            BatchScheduler::Submitted::kQueued);
  sched.step();
  ASSERT_TRUE(a.result.has_value());
  ASSERT_FALSE(a.result->ok());
  EXPECT_EQ(a.result->error().code, ErrorCode::kContextOverflow);
}

}  // namespace
}  // namespace qrun
