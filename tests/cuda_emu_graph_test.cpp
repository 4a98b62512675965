// CudaBackend's CUDA graphs (cuda_backend.h): decode steps captured and replayed give the
// logits eager steps give, bit for bit (the graph runs the same kernels), and the capture
// decisions are the documented ones: from the second decode step on, never across work a
// graph cannot hold (a new KV cache, a new weight, a scratch buffer that grows), which
// ends the capture early instead. Under the emulator a capture runs eagerly, but the
// emulated runtime refuses what the CUDA runtime refuses while a stream captures (an
// allocation, a pageable copy, a synchronize), so a missed flush fails here too. Built
// against the nvcc target (cuda_gpu_graph_test), the same checks run on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/quants.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/random_data.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

using kernels::cuda::CudaBackend;
using test::random_vector;

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// A shared model decoding through a backend: a prompt, then one token at a time.
class Decoder {
 public:
  explicit Decoder(Model& model) : model_(model) {}

  // The logits of the last prompt token.
  std::vector<float> prefill(CudaBackend& backend, KvCache& kv, std::span<const int32_t> prompt) {
    std::vector<float> logits(static_cast<size_t>(model_.hparams().n_vocab));
    const Result<void> r = model_.forward(backend, prompt, 0, kv, false, logits.data());
    EXPECT_TRUE(r.ok()) << r.error().message;
    return logits;
  }
  std::vector<float> decode(CudaBackend& backend, KvCache& kv, int32_t token, int64_t pos) {
    std::vector<float> logits(static_cast<size_t>(model_.hparams().n_vocab));
    const Result<void> r =
        model_.forward(backend, std::span<const int32_t>(&token, 1), pos, kv, false, logits.data());
    EXPECT_TRUE(r.ok()) << r.error().message;
    return logits;
  }

 private:
  Model& model_;
};

class CudaEmuGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> file =
        gguf::File::open(test::data_path("models/stories260K-Q4_0.gguf").string());
    ASSERT_TRUE(file.ok()) << file.error().message;
    file_ = std::make_unique<gguf::File>(std::move(*file));
    Result<std::unique_ptr<Model>> model = models::load_model(*file_, ModelOptions{512});
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model);
  }
  KvCache new_cache() {
    Result<KvCache> kv = make_kv_cache(*model_, 64, DType::kF16);
    EXPECT_TRUE(kv.ok()) << kv.error().message;
    return std::move(*kv);
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Model> model_;
};

TEST_F(CudaEmuGraph, DecodeStepsAreCapturedFromTheSecondOnWithTheSameLogits) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 429};
  constexpr int kSteps = 6;
  CudaBackend eager(false), graphs(true);
  KvCache kv_eager = new_cache(), kv_graphs = new_cache();
  Decoder d(*model_);
  std::vector<float> want = d.prefill(eager, kv_eager, prompt);
  std::vector<float> got = d.prefill(graphs, kv_graphs, prompt);
  ASSERT_EQ(got, want);
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    const int32_t token = argmax(want);
    const auto pos = static_cast<int64_t>(prompt.size()) + step;
    want = d.decode(eager, kv_eager, token, pos);
    got = d.decode(graphs, kv_graphs, token, pos);
    ASSERT_EQ(got, want);  // bit for bit: the graph runs the same kernels
    const CudaBackend::GraphStats& s = graphs.graph_stats();
    // The first step runs eagerly (it sizes the decode scratch); each later one is
    // captured whole (nothing flushed) and launched: one instantiation, then updates.
    EXPECT_EQ(s.captures, step);
    EXPECT_EQ(s.launches, step);
    EXPECT_EQ(s.flushes, 0);
    EXPECT_EQ(s.instantiations, step == 0 ? 0 : 1) << "the kept graph could not be updated";
    EXPECT_EQ(s.updates, std::max(step - 1, 0));
  }
  EXPECT_EQ(eager.graph_stats().captures, 0);
}

TEST_F(CudaEmuGraph, ANewKvCacheMidCaptureEndsTheCaptureEarly) {
  const std::vector<int32_t> prompt = {1, 403, 407};
  CudaBackend eager(false), graphs(true);
  KvCache kv_eager = new_cache(), kv_graphs = new_cache();
  Decoder d(*model_);
  d.prefill(eager, kv_eager, prompt);
  d.prefill(graphs, kv_graphs, prompt);
  for (int step = 0; step < 2; ++step) {
    const auto pos = static_cast<int64_t>(prompt.size()) + step;
    ASSERT_EQ(d.decode(graphs, kv_graphs, 300 + step, pos),
              d.decode(eager, kv_eager, 300 + step, pos));
  }
  ASSERT_EQ(graphs.graph_stats().captures, 1);
  // A step on a cache the backend has never seen: its first kv_store allocates the layer.
  KvCache fresh_eager = new_cache(), fresh_graphs = new_cache();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(step);
    ASSERT_EQ(d.decode(graphs, fresh_graphs, 350 + step, step),
              d.decode(eager, fresh_eager, 350 + step, step));
  }
  const CudaBackend::GraphStats& s = graphs.graph_stats();
  EXPECT_EQ(s.captures, 3);
  EXPECT_EQ(s.flushes, 1);  // the step on the new cache; the next one is captured whole
}

// Decode on a paged cache, past two block edges: the block table grows in the middle of
// captured steps, and its upload is captured with them (its device copy has room for the
// whole table, and the last upload is known done once the previous step's logits came
// back), so no step flushes; the logits are the eager backend's.
TEST_F(CudaEmuGraph, PagedDecodeAcrossBlockEdgesStaysCaptured) {
  constexpr int64_t kBlockRows = 16, kCtx = 64;
  CudaBackend eager(false), graphs(true);
  std::vector<KvCache> caches;
  for (int i = 0; i < 2; ++i) {
    Result<std::shared_ptr<KvBlockPool>> pool =
        make_kv_block_pool(*model_, kCtx / kBlockRows, kBlockRows, DType::kF16);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    Result<KvCache> kv = make_paged_kv_cache(*model_, *pool, kCtx);
    ASSERT_TRUE(kv.ok()) << kv.error().message;
    caches.push_back(std::move(*kv));
  }
  const std::vector<int32_t> prompt = {1, 403, 407};
  Decoder d(*model_);
  ASSERT_TRUE(caches[0].reserve(0, 3, eager).ok());
  ASSERT_TRUE(caches[1].reserve(0, 3, graphs).ok());
  std::vector<float> want = d.prefill(eager, caches[0], prompt);
  ASSERT_EQ(d.prefill(graphs, caches[1], prompt), want);
  const int64_t n_steps = 2 * kBlockRows + 4 - 3;  // positions 3 .. 35
  for (int64_t step = 0; step < n_steps; ++step) {
    SCOPED_TRACE(step);
    const int32_t token = argmax(want);
    const int64_t pos = 3 + step;
    ASSERT_TRUE(caches[0].reserve(pos, 1, eager).ok());
    ASSERT_TRUE(caches[1].reserve(pos, 1, graphs).ok());
    want = d.decode(eager, caches[0], token, pos);
    ASSERT_EQ(d.decode(graphs, caches[1], token, pos), want);
  }
  const CudaBackend::GraphStats& s = graphs.graph_stats();
  EXPECT_EQ(s.captures, n_steps - 1);
  EXPECT_EQ(s.flushes, 0) << "a block table's upload ended a capture";
  EXPECT_EQ(s.launches, n_steps - 1);
}

// A decode-shaped step of backend ops on synthetic weights: one embedding row into x, RoPE
// at `pos`, then y = w x (n_tokens rows of x) and logits = w_out y[0] copied to the host.
struct SyntheticStep {
  static constexpr int64_t kN = 64, kOut = 32, kVocab = 8;
  std::vector<float> table = random_vector(4 * kN, 1);
  std::vector<float> w_out = random_vector(kVocab * kN, 2);  // [kOut or kN, kVocab]
  std::vector<BlockQ8_0> w1 = quantized(3), w2 = quantized(4);
  std::vector<float> x = std::vector<float>(2 * kN), y = std::vector<float>(2 * kOut);
  std::vector<int32_t> positions = {0};

  static std::vector<BlockQ8_0> quantized(uint32_t seed) {
    const std::vector<float> f = random_vector(kOut * kN, seed);
    std::vector<BlockQ8_0> q(static_cast<size_t>(kOut * kN / 32));
    quantize_q8_0(f.data(), q.data(), kOut * kN);
    return q;
  }
  static Tensor matrix(DType type, int64_t n_in, int64_t n_out, const void* data) {
    Tensor t;
    t.type = type;
    t.n_dims = 2;
    t.ne = {n_in, n_out, 1, 1};
    t.data = data;
    return t;
  }

  // The logits; none when `read_back` is false (the scope ends with the result on the
  // device).
  std::vector<float> run(CudaBackend& b, int32_t pos, const std::vector<BlockQ8_0>& w,
                         int64_t n_tokens = 1, bool read_back = true) {
    const std::span<float> buffers[] = {x, y};
    b.begin_scratch(buffers);
    const int32_t id = pos % 4;
    b.get_rows(matrix(DType::kF32, kN, 4, table.data()), std::span<const int32_t>(&id, 1),
               x.data());
    positions[0] = pos;
    RopeParams rp;
    rp.n_rot = kN;
    b.rope(x.data(), 1, 1, kN, positions, rp);
    b.matmul(matrix(DType::kQ8_0, kN, kOut, w.data()), x.data(), n_tokens, y.data());
    std::vector<float> logits(kVocab);
    if (read_back)
      b.matmul(matrix(DType::kF32, kOut, kVocab, w_out.data()), y.data(), 1, logits.data());
    b.end_scratch();
    return logits;
  }
};

TEST(CudaEmuGraphOps, ANewWeightOrAGrownScratchMidCaptureEndsTheCaptureEarly) {
  SyntheticStep step;
  CudaBackend eager(false), graphs(true);
  const auto both = [&](int32_t pos, const std::vector<BlockQ8_0>& w, int64_t n_tokens = 1,
                        bool read_back = true) {
    ASSERT_EQ(step.run(graphs, pos, w, n_tokens, read_back),
              step.run(eager, pos, w, n_tokens, read_back));
  };
  both(0, step.w1);  // warm-up: eager
  both(1, step.w1);  // captured whole
  const CudaBackend::GraphStats& s = graphs.graph_stats();
  EXPECT_EQ(s.captures, 1);
  EXPECT_EQ(s.flushes, 0);
  both(2, step.w2);  // w2's first copy ends the capture (after get_rows and rope)
  EXPECT_EQ(s.captures, 2);
  EXPECT_EQ(s.flushes, 1);
  EXPECT_EQ(s.launches, 2);
  both(3, step.w1, 2);  // two rows of x: the quantized activations' scratch grows
  EXPECT_EQ(s.captures, 3);
  EXPECT_EQ(s.flushes, 2);
  both(4, step.w1, 2, false);  // no read-back: end_scratch ends the capture
  both(5, step.w1, 2);         // and the next step's positions wait for the last copy first
  EXPECT_EQ(s.captures, 5);
  EXPECT_EQ(s.flushes, 2);
  EXPECT_EQ(s.launches, 5);
  EXPECT_EQ(s.instantiations + s.updates, s.launches);
}

TEST(CudaEmuGraphOps, DecodeStepsPastASplitOfAttentionAllocateNothing) {
  // The attention scratch holds one split per attention_split() positions (32 by default):
  // sized for the whole cache when a layer is first seen, steps that add a split (as at
  // position 256) are captured whole.
  SyntheticStep step;
  constexpr int64_t kRows = 512, kN = SyntheticStep::kN;
  std::vector<uint16_t> k(kRows * kN), v(kRows * kN);  // the host cache (only its key)
  const KvLayerView cache{DType::kF16, DType::kF16, k.data(), v.data(), kRows, 1, kN};
  AttentionParams ap;
  ap.n_head = 1;
  ap.n_head_kv = 1;
  ap.head_dim = kN;
  ap.scale = 0.125f;
  std::vector<float> x(kN), o(kN), logits(SyntheticStep::kVocab);
  const auto run = [&](CudaBackend& b, int64_t pos) {
    const std::span<float> buffers[] = {x, o};
    b.begin_scratch(buffers);
    const auto id = static_cast<int32_t>(pos % 4);
    b.get_rows(SyntheticStep::matrix(DType::kF32, kN, 4, step.table.data()),
               std::span<const int32_t>(&id, 1), x.data());
    b.kv_store(cache, pos, 1, x.data(), x.data());
    b.attention(x.data(), 1, pos, cache, ap, o.data());
    b.matmul(SyntheticStep::matrix(DType::kF32, kN, SyntheticStep::kVocab, step.w_out.data()),
             o.data(), 1, logits.data());
    b.end_scratch();
    return logits;
  };
  CudaBackend eager(false), graphs(true);
  for (int64_t pos = 253; pos < 258; ++pos) {
    SCOPED_TRACE(pos);
    ASSERT_EQ(run(graphs, pos), run(eager, pos));
  }
  const CudaBackend::GraphStats& s = graphs.graph_stats();
  EXPECT_EQ(s.captures, 4);
  EXPECT_EQ(s.flushes, 0);
}

// Graphs are off by default and with QRUN_CUDA_GRAPHS=0, on with QRUN_CUDA_GRAPHS=1.
TEST(CudaEmuGraphOps, QrunCudaGraphsOneTurnsThemOn) {
  SyntheticStep step;
  ASSERT_EQ(unsetenv("QRUN_CUDA_GRAPHS"), 0);
  CudaBackend unset;
  ASSERT_EQ(setenv("QRUN_CUDA_GRAPHS", "0", 1), 0);
  CudaBackend off;
  ASSERT_EQ(setenv("QRUN_CUDA_GRAPHS", "1", 1), 0);
  CudaBackend on;
  ASSERT_EQ(unsetenv("QRUN_CUDA_GRAPHS"), 0);
  for (int32_t pos = 0; pos < 3; ++pos) {
    const auto eager = step.run(off, pos, step.w1);
    ASSERT_EQ(step.run(on, pos, step.w1), eager);
    ASSERT_EQ(step.run(unset, pos, step.w1), eager);
  }
  EXPECT_EQ(unset.graph_stats().captures, 0);
  EXPECT_EQ(off.graph_stats().captures, 0);
  EXPECT_EQ(on.graph_stats().captures, 2);
}

}  // namespace
}  // namespace qrun
