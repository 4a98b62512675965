// The decode loop allocates nothing: this executable replaces the global operator new and
// delete with counting versions, loads small shared models (F32, Q4_0 and k-quant weights,
// so both activation quantizers run) and a synthetic phi3, feeds a prompt and a few warm-up
// tokens, then counts every allocation, on any thread, over further single-token forward
// passes plus sampling on every ISA this host runs, with F16 and F32 caches. Expected: 0.
// The same for batched steps (Model::forward_batch over four sequences, decode tokens and
// a prompt chunk together) and for the serve engine's steps (BatchScheduler::step: batched
// forward, sampling and stop checks for every sequence).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "core/batch_scheduler.h"
#include "core/gguf/gguf.h"
#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "models/synth.h"
#include "tests/support/test_data.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* counted_alloc(std::size_t size, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (size == 0) size = 1;
  void* p = align > alignof(std::max_align_t)
                ? std::aligned_alloc(align, (size + align - 1) / align * align)
                : std::malloc(size);
  return p;
}

// Frees what counted_alloc returned. Out of line: when operator delete is inlined into a
// caller, GCC would otherwise see operator new's result reach free() and report the
// replaced pair as mismatched (-Wmismatched-new-delete, at -O2).
[[gnu::noinline]] void counted_free(void* p) noexcept {
  std::free(p);
}

}  // namespace

void* operator new(std::size_t size) {
  void* p = counted_alloc(size, 0);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t size) {
  void* p = counted_alloc(size, 0);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new(std::size_t size, std::align_val_t align) {
  void* p = counted_alloc(size, static_cast<std::size_t>(align));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t size, std::align_val_t align) {
  void* p = counted_alloc(size, static_cast<std::size_t>(align));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return counted_alloc(size, 0);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return counted_alloc(size, 0);
}
void operator delete(void* p) noexcept {
  counted_free(p);
}
void operator delete[](void* p) noexcept {
  counted_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  counted_free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  counted_free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  counted_free(p);
}

namespace qrun {
namespace {

constexpr int kWarmup = 4;
constexpr int kCounted = 16;

// Allocations during kCounted calls of step() after kWarmup of them; -1 when one failed.
// (A template, so that the step is not wrapped in an allocating std::function.)
template <typename Step>
int64_t allocations_after_warmup(Step& step) {
  for (int i = 0; i < kWarmup; ++i) {
    if (!step()) return -1;
  }
  g_allocations.store(0);
  g_counting.store(true);
  bool ok = true;
  for (int i = 0; i < kCounted && ok; ++i) ok = step();
  g_counting.store(false);
  return ok ? g_allocations.load() : -1;
}

// Allocations during kCounted decode steps (forward of one token + sample + accept) after
// a 9-token prompt and kWarmup steps; -1 when a step failed.
int64_t count_decode_allocations(Model& model, kernels::CpuBackend& backend, KvTypes cache_type) {
  Result<KvCache> kv = make_kv_cache(model, 64, cache_type);
  if (!kv.ok()) return -1;
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  SamplingParams sp{0.8f, 42};
  Sampler sampler = make_sampler(sp);
  const std::vector<int32_t> prompt = {1, 13, 25, 7, 99, 5, 42, 17, 3};
  if (!model.forward(backend, prompt, 0, *kv, false, logits.data()).ok()) return -1;
  int64_t pos = static_cast<int64_t>(prompt.size());
  int32_t token = sampler.sample(logits);
  const auto step = [&]() {
    sampler.accept(token);
    const int32_t one[1] = {token};
    if (!model.forward(backend, one, pos, *kv, false, logits.data()).ok()) return false;
    ++pos;
    token = sampler.sample(logits);
    return true;
  };
  return allocations_after_warmup(step);
}

TEST(DecodeAlloc, CountingNewSeesAllocations) {
  g_allocations.store(0);
  g_counting.store(true);
  auto p = std::make_unique<std::vector<int>>(100);
  g_counting.store(false);
  EXPECT_GE(g_allocations.load(), 2);
}

TEST(DecodeAlloc, DecodeStepsAllocateNothing) {
  const char* kModels[] = {"models/stories260K.gguf", "models/stories260K-Q4_0.gguf",
                           "models/TinyLLama-v0-5M-Q4_K_M.gguf"};
  for (const char* name : kModels) {
    Result<gguf::File> f = gguf::File::open(test::data_path(name).string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{16});
    ASSERT_TRUE(m.ok()) << m.error().message;
    for (kernels::Isa isa : kernels::host_isas()) {
      kernels::CpuBackend backend(2, isa);
      for (DType cache : {DType::kF16, DType::kF32}) {
        EXPECT_EQ(count_decode_allocations(**m, backend, cache), 0)
            << name << " " << kernels::isa_name(isa) << " cache " << dtype_name(cache);
      }
    }
  }
}

// Batched steps: four sequences at different positions decode together while a fifth's
// prompt goes in chunks beside them; the model's scratch was sized at load for them.
int64_t count_batched_allocations(Model& model, kernels::CpuBackend& backend) {
  constexpr int kSeqs = 4;
  std::vector<KvCache> caches;
  for (int i = 0; i < kSeqs + 1; ++i) {
    Result<KvCache> kv = make_kv_cache(model, 256);
    if (!kv.ok()) return -1;
    caches.push_back(std::move(*kv));
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab * kSeqs));
  std::vector<int32_t> tokens(kSeqs, 1);
  std::vector<int32_t> prompt(200);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 7 % n_vocab);
  for (int i = 0; i < kSeqs; ++i) {
    const std::span<const int32_t> p(prompt.data(), static_cast<size_t>(3 + 5 * i));
    if (!model.forward(backend, p, 0, caches[i], false, logits.data()).ok()) return -1;
  }
  std::vector<SeqForward> parts(kSeqs + 1);
  int64_t fed = 0;
  const auto step = [&]() {
    for (int i = 0; i < kSeqs; ++i) {
      parts[i] = SeqForward{
          {&tokens[i], 1}, caches[i].n_tokens(), &caches[i], false, logits.data() + i * n_vocab};
    }
    parts[kSeqs] = SeqForward{{prompt.data() + fed, 8}, fed, &caches[kSeqs], false, nullptr};
    fed += 8;
    if (!model.forward_batch(backend, parts).ok()) return false;
    for (int i = 0; i < kSeqs; ++i)
      tokens[i] = static_cast<int32_t>((tokens[i] * 31 + 7) % n_vocab);
    return true;
  };
  return allocations_after_warmup(step);
}

TEST(DecodeAlloc, BatchedStepsAllocateNothing) {
  for (const char* name : {"models/stories260K.gguf", "models/TinyLLama-v0-5M-Q4_K_M.gguf"}) {
    Result<gguf::File> f = gguf::File::open(test::data_path(name).string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{16, 5});
    ASSERT_TRUE(m.ok()) << m.error().message;
    for (kernels::Isa isa : kernels::host_isas()) {
      kernels::CpuBackend backend(2, isa);
      EXPECT_EQ(count_batched_allocations(**m, backend), 0)
          << name << " " << kernels::isa_name(isa);
    }
  }
}

// The engine's steps over `caches` (three slots): three running sequences sampling
// (top-k, top-p, temperature) and decoding together, callbacks that keep nothing. Returns
// the blocks in use after the counted steps (0 with contiguous slots).
int64_t count_scheduler_steps(Model& m, std::vector<KvCache> caches) {
  kernels::CpuBackend backend(2);
  std::atomic<bool> shutdown{false};
  BatchScheduler sched(m, backend, std::move(caches), 16, 4, &shutdown);
  for (int i = 0; i < 3; ++i) {
    SeqRequest r;
    r.prompt = {1, static_cast<int32_t>(13 + i), 25, 7, 99};
    r.n_predict = 100;
    r.sampler = make_sampler(SamplingParams{0.8f, static_cast<uint32_t>(42 + i)});
    r.on_token = [](int32_t) { return TokenAction::kContinue; };
    EXPECT_EQ(sched.submit(std::move(r)), BatchScheduler::Submitted::kQueued);
  }
  for (int i = 0; i < kWarmup; ++i) EXPECT_TRUE(sched.step());
  EXPECT_EQ(sched.n_running(), 3);
  g_allocations.store(0);
  g_counting.store(true);
  for (int i = 0; i < kCounted; ++i) sched.step();
  g_counting.store(false);
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_EQ(sched.n_running(), 3);
  const int64_t blocks = sched.kv_blocks_used();
  shutdown = true;
  sched.run();
  return blocks;
}

TEST(DecodeAlloc, SchedulerStepsAllocateNothing) {
  Result<gguf::File> f = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{16, 3});
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::vector<KvCache> caches;
  for (int i = 0; i < 3; ++i) {
    Result<KvCache> kv = make_kv_cache(**m, 128);
    ASSERT_TRUE(kv.ok());
    caches.push_back(std::move(*kv));
  }
  count_scheduler_steps(**m, std::move(caches));
}

// The same over paged slots (serve's --kv-unified), decoding across block edges.
TEST(DecodeAlloc, PagedSchedulerStepsAllocateNothing) {
  Result<gguf::File> f = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{16, 3});
  ASSERT_TRUE(m.ok()) << m.error().message;
  Result<std::shared_ptr<KvBlockPool>> pool = make_kv_block_pool(**m, 24, 16);
  ASSERT_TRUE(pool.ok());
  std::vector<KvCache> caches;
  for (int i = 0; i < 3; ++i) {
    Result<KvCache> kv = make_paged_kv_cache(**m, *pool, 128);
    ASSERT_TRUE(kv.ok());
    caches.push_back(std::move(*kv));
  }
  // Past the first block edge: 5 + 4 + 16 positions each.
  EXPECT_GE(count_scheduler_steps(**m, std::move(caches)), 6);
}

// A model `qrun synth` writes with options `o` and the vocabulary of `vocab` (under the
// shared data), loaded with n_batch 16; `file` keeps the file it reads.
std::unique_ptr<Model> load_synth(const models::SynthOptions& o, const std::string& vocab,
                                  std::optional<gguf::File>& file) {
  Result<gguf::File> v = gguf::File::open(test::data_path(vocab).string());
  EXPECT_TRUE(v.ok());
  if (!v.ok()) return nullptr;
  const std::string path = (test::temp_dir() / (o.arch + ".gguf")).string();
  EXPECT_TRUE(models::write_synthetic_model(o, *v, path).ok());
  Result<gguf::File> f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.error().message;
  if (!f.ok()) return nullptr;
  file.emplace(std::move(*f));
  Result<std::unique_ptr<Model>> m = models::load_model(*file, ModelOptions{16});
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

// phi3 picks its LongRoPE factors per forward call and reads fused weights through views:
// still nothing allocated.
TEST(DecodeAlloc, Phi3DecodeStepsAllocateNothing) {
  models::SynthOptions o;
  o.arch = "phi3";
  o.shape = *models::synth_preset("tiny");
  o.shape.rope_orig_ctx = 256;
  o.recipe = "q8_0";
  std::optional<gguf::File> file;
  const std::unique_ptr<Model> m = load_synth(o, "vocab/ggml-vocab-phi-3.gguf", file);
  ASSERT_NE(m, nullptr);
  for (kernels::Isa isa : kernels::host_isas()) {
    kernels::CpuBackend backend(2, isa);
    EXPECT_EQ(count_decode_allocations(*m, backend, DType::kF16), 0) << kernels::isa_name(isa);
  }
}

// A mixture of experts (qwen2moe's with a shared expert) routes each token on the host and
// groups rows by expert in buffers sized at load: still nothing allocated, once the
// session's warm-up (Model::set_warmup) has run every expert, so that experts first chosen
// while decoding have their repacked copies.
// Without it, each such expert's copy is made mid-decode (12 allocations here on AVX2 and
// AVX-512).
TEST(DecodeAlloc, MixtureOfExpertsDecodeStepsAllocateNothing) {
  for (const char* arch : {"qwen3moe", "qwen2moe"}) {
    SCOPED_TRACE(arch);
    models::SynthOptions o;
    o.arch = arch;
    o.shape = *models::synth_preset("tiny");
    o.shape.n_expert_used = 3;
    o.recipe = "q4_0";
    std::optional<gguf::File> file;
    const std::unique_ptr<Model> m = load_synth(o, "vocab/ggml-vocab-llama-spm.gguf", file);
    ASSERT_NE(m, nullptr);
    for (kernels::Isa isa : kernels::host_isas()) {
      kernels::CpuBackend backend(2, isa);
      Result<KvCache> kv = make_kv_cache(*m, 16);
      ASSERT_TRUE(kv.ok());
      std::vector<float> logits(static_cast<size_t>(m->hparams().n_vocab));
      const int32_t bos = 1;
      m->set_warmup(true);
      ASSERT_TRUE(m->forward(backend, std::span(&bos, 1), 0, *kv, false, logits.data()).ok());
      m->set_warmup(false);
      EXPECT_EQ(count_decode_allocations(*m, backend, DType::kF16), 0) << kernels::isa_name(isa);
    }
  }
}

// Quantized and BF16 caches, and K and V of different types (attend_mixed): a llama-shaped
// synthetic model with a head size of 32, so that Q8_0 and Q4_0 blocks tile a head.
TEST(DecodeAlloc, QuantizedCacheDecodeStepsAllocateNothing) {
  Result<gguf::File> vocab = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(vocab.ok());
  models::SynthOptions o;
  o.shape = *models::synth_preset("tiny");
  o.shape.head_dim = 32;
  o.recipe = "q8_0";
  const std::string path = (test::temp_dir() / "tiny-hd32.gguf").string();
  ASSERT_TRUE(models::write_synthetic_model(o, *vocab, path).ok());
  Result<gguf::File> f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{16});
  ASSERT_TRUE(m.ok()) << m.error().message;
  for (kernels::Isa isa : kernels::host_isas()) {
    kernels::CpuBackend backend(2, isa);
    for (const KvTypes types : {KvTypes(DType::kQ8_0), KvTypes(DType::kQ4_0), KvTypes(DType::kBF16),
                                KvTypes(DType::kQ8_0, DType::kF16)}) {
      EXPECT_EQ(count_decode_allocations(**m, backend, types), 0)
          << kernels::isa_name(isa) << " K " << dtype_name(types.k) << " V " << dtype_name(types.v);
    }
  }
}

}  // namespace
}  // namespace qrun
