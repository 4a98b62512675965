// CudaBackend over paged KV caches (under the SIMT emulator; built against the nvcc target
// as cuda_gpu_paged_test for a GPU), end to end on stories260K, against contiguous caches
// on the same backend:
// - four sequences whose blocks interleave in one pool, in Model::forward_batch steps that
//   mix prompt chunks (the prefill path, which gathers a paged cache's rows) and decode
//   tokens (the split-K kernel, which reads them through the block table), against the
//   same steps on four contiguous caches;
// - a sequence that attaches another's published prefix and rewinds into a shared block,
//   so that KvCache::reserve has the backend copy the block where its rows are (kv_copy:
//   on the device, and with -ngl N for half the layers on the host for the CPU's layers),
//   against a contiguous cache that computed the same prefix in the same chunks; and the
//   first sequence, decoding on, against its contiguous twin (the shared block unchanged).
// The same kernels read the same values in the same order: the same bits under the
// emulator. On the GPU the prefill path's cuBLAS products over gathered rows may round
// otherwise than over the cache's own rows (their alignment differs), so there the bound
// is the golden tests' normalized MSE of 1e-3 per logits row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/gpu_offload.h"
#include "core/gguf/gguf.h"
#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/split_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/recording_backend.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr int kSeqs = 4;
constexpr int64_t kCtx = 64, kBlockRows = 16;

// Logits rows equal: bit for bit under the emulator, within the golden bound on a GPU.
void expect_same_logits(const std::vector<float>& got, const std::vector<float>& want,
                        int64_t n_vocab, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
#if defined(QRUN_CUDA_GPU_TEST)
  for (size_t row = 0; row < want.size(); row += static_cast<size_t>(n_vocab)) {
    double err = 0.0, ref = 0.0;
    for (int64_t j = 0; j < n_vocab; ++j) {
      const double w = want[row + static_cast<size_t>(j)];
      const double g = got[row + static_cast<size_t>(j)];
      err += (g - w) * (g - w);
      ref += w * w;
    }
    EXPECT_LT(err / ref, 1e-3) << what << ", row " << row / static_cast<size_t>(n_vocab);
  }
#else
  (void)n_vocab;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
#endif
}

class CudaEmuPaged : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> file =
        gguf::File::open(test::data_path("models/stories260K-Q8_0.gguf").string());
    ASSERT_TRUE(file.ok()) << file.error().message;
    file_ = std::make_unique<gguf::File>(std::move(*file));
    Result<std::unique_ptr<Model>> loaded = models::load_model(*file_, ModelOptions{16, kSeqs});
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    model_ = std::move(*loaded);
    ASSERT_TRUE(model_->check_backend(backend_).ok());
    ASSERT_TRUE(backend_.supports_paged_kv());
    Result<std::shared_ptr<KvBlockPool>> pool =
        make_kv_block_pool(*model_, kSeqs * kCtx / kBlockRows + 4, kBlockRows, DType::kF16);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    pool_ = *pool;
  }

  int32_t token(int seq, int64_t pos) const {
    return static_cast<int32_t>((seq * 131 + pos * 17 + 5) % model_->hparams().n_vocab);
  }
  std::vector<float> logits(int64_t rows) const {
    return std::vector<float>(static_cast<size_t>(rows * model_->hparams().n_vocab));
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Model> model_;
  kernels::cuda::CudaBackend backend_;
  std::shared_ptr<KvBlockPool> pool_;
};

TEST_F(CudaEmuPaged, BatchedStepsMatchContiguousCaches) {
  if (model_ == nullptr) return;  // (SetUp failed)
  Model& m = *model_;
  const int64_t n_vocab = m.hparams().n_vocab;
  std::vector<KvCache> flat, paged;
  for (int i = 0; i < kSeqs; ++i) {
    Result<KvCache> a = make_kv_cache(m, kCtx, DType::kF16);
    Result<KvCache> b = make_paged_kv_cache(m, pool_, kCtx);
    ASSERT_TRUE(a.ok() && b.ok());
    flat.push_back(std::move(*a));
    paged.push_back(std::move(*b));
  }
  struct Part {
    int seq;
    int64_t n;
    bool all_logits = false;
  };
  // n_batch 16: prompt chunks of up to 16 tokens (prefill from 16 on) beside decode tokens;
  // the sequences' blocks interleave as they grow, and cross block edges mid-step.
  const std::vector<std::vector<Part>> script = {
      {{0, 17}, {1, 1}, {2, 16}},
      {{0, 1}, {1, 1}, {2, 1}, {3, 20, true}},
      {{1, 16}, {3, 1}, {2, 1}, {0, 1}},
      {{0, 1}, {1, 1}, {2, 18}, {3, 1}},
  };
  std::vector<int64_t> pos(kSeqs, 0);
  int step = 0;
  for (const std::vector<Part>& call : script) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> want, got;
    for (const Part& p : call) {
      std::vector<int32_t> t;
      for (int64_t i = 0; i < p.n; ++i) t.push_back(token(p.seq, pos[p.seq] + i));
      tokens.push_back(std::move(t));
      want.push_back(logits(p.all_logits ? p.n : 1));
      got.push_back(logits(p.all_logits ? p.n : 1));
    }
    std::vector<SeqForward> on_flat, on_paged;
    for (size_t i = 0; i < call.size(); ++i) {
      const Part& p = call[i];
      ASSERT_TRUE(paged[p.seq].reserve(pos[p.seq], p.n, backend_).ok());
      on_flat.push_back(
          SeqForward{tokens[i], pos[p.seq], &flat[p.seq], p.all_logits, want[i].data()});
      on_paged.push_back(
          SeqForward{tokens[i], pos[p.seq], &paged[p.seq], p.all_logits, got[i].data()});
    }
    ASSERT_TRUE(m.forward_batch(backend_, on_flat).ok());
    ASSERT_TRUE(m.forward_batch(backend_, on_paged).ok());
    for (size_t i = 0; i < call.size(); ++i) {
      pos[call[i].seq] += call[i].n;
      expect_same_logits(
          got[i], want[i], n_vocab,
          "step " + std::to_string(step) + ", sequence " + std::to_string(call[i].seq));
    }
    ++step;
  }
  // The blocks did interleave: some sequence's table is not a run of consecutive blocks.
  EXPECT_TRUE(std::any_of(paged.begin(), paged.end(), [](const KvCache& kv) {
    const std::span<const int32_t> t = kv.block_table();
    return std::adjacent_find(t.begin(), t.end(),
                              [](int32_t a, int32_t b) { return b != a + 1; }) != t.end();
  }));
}

// Param: whether the CUDA backend holds the last half of the layers only (-ngl N: a
// SplitBackend with the CPU backend, each copying the blocks of its own layers).
class CudaEmuPagedPrefix : public CudaEmuPaged, public ::testing::WithParamInterface<bool> {};

TEST_P(CudaEmuPagedPrefix, SharedPrefixIsCopiedWhereTheRowsAre) {
  if (model_ == nullptr) return;  // (SetUp failed)
  Model& m = *model_;
  const int64_t n_layer = m.hparams().n_layer;
  auto recorded = std::make_unique<test::RecordingBackend>(backend_);
  const test::RecordingBackend& gpu_ops = *recorded;
  std::unique_ptr<Backend> owned = std::move(recorded);
  if (GetParam()) {
    owned =
        std::make_unique<SplitBackend>(std::make_unique<kernels::CpuBackend>(1), std::move(owned),
                                       cli::layer_weights(*file_, n_layer / 2, n_layer));
  }
  Backend& backend = *owned;
  ASSERT_TRUE(m.check_backend(backend).ok());
  const int64_t n_vocab = m.hparams().n_vocab;
  Result<KvCache> flat = make_kv_cache(m, kCtx, DType::kF16);
  Result<KvCache> a = make_paged_kv_cache(m, pool_, kCtx);
  ASSERT_TRUE(flat.ok() && a.ok());
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < 40; ++i) tokens.push_back(token(0, i));
  std::vector<float> want = logits(1), got = logits(1);
  // The prompt in two chunks of 20.
  const std::span<const int32_t> head = std::span(tokens).first(20);
  const std::span<const int32_t> rest = std::span(tokens).subspan(20);
  ASSERT_TRUE(a->reserve(0, 40, backend).ok());
  ASSERT_TRUE(m.forward(backend, head, 0, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, head, 0, *a, false, got.data()).ok());
  expect_same_logits(got, want, n_vocab, "the first chunk");
  ASSERT_TRUE(m.forward(backend, rest, 20, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, rest, 20, *a, false, got.data()).ok());
  expect_same_logits(got, want, n_vocab, "the second chunk");
  a->publish(tokens);
  ASSERT_EQ(pool_->n_cached(), 2);
  // The first sequence's next step on the contiguous cache, for after the second ran.
  const int32_t next = token(0, 40);
  std::vector<float> want_next = logits(1);
  ASSERT_TRUE(m.forward(backend, std::span(&next, 1), 40, *flat, false, want_next.data()).ok());

  // Another sequence: the first 36 tokens, then its own; it attaches the two cached blocks
  // and rewinds into the second, which reserve() copies (positions 16 .. 24 kept).
  std::vector<int32_t> second(tokens.begin(), tokens.begin() + 36);
  for (int64_t i = 0; i < 10; ++i) second.push_back(token(1, i));
  Result<KvCache> b = make_paged_kv_cache(m, pool_, kCtx);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->attach_prefix(second), 32);
  const int64_t from = 25;
  b->truncate(from);
  const auto n_tail = static_cast<int64_t>(second.size()) - from;
  ASSERT_TRUE(b->reserve(from, n_tail, backend).ok());
  ASSERT_NE(b->block_table()[1], a->block_table()[1]);  // a private copy
  ASSERT_EQ(b->block_table()[0], a->block_table()[0]);  // still shared
  // The reference: the contiguous cache, which computed the same chunks, rewound.
  flat->truncate(from);
  const std::span<const int32_t> tail = std::span(second).subspan(static_cast<size_t>(from));
  ASSERT_TRUE(m.forward(backend, tail, from, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, tail, from, *b, false, got.data()).ok());
  expect_same_logits(got, want, n_vocab, "the second sequence on the shared prefix");

  // The first sequence decodes on: the block the second copied was not written.
  ASSERT_TRUE(a->reserve(40, 1, backend).ok());
  ASSERT_TRUE(m.forward(backend, std::span(&next, 1), 40, *a, false, got.data()).ok());
  expect_same_logits(got, want_next, n_vocab, "the first sequence after the second ran");
  EXPECT_GT(gpu_ops.count("attention"), 0);
  EXPECT_EQ(gpu_ops.count("kv_copy"), n_layer);  // the one shared block, every layer
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaEmuPagedPrefix, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "split" : "cuda"; });

}  // namespace
}  // namespace qrun
