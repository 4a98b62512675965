// SplitBackend (-ngl N with N short of the whole model): ops go where their weights are
// placed, weightless ops follow the op before them, and a forward pass split between two
// backends computes what one backend computes. Two CPU backends stand in for CPU and GPU
// here, so the split must be exact; cuda_emu_split_test runs the CUDA backend as the second.
#include "ggml-like/split_backend.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cli/gpu_offload.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/recording_backend.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

using test::RecordingBackend;

// A SplitBackend over two recording CPU backends, with the recorders kept for inspection.
struct Split {
  kernels::CpuBackend cpu_a{1}, cpu_b{1};
  RecordingBackend* first = nullptr;
  RecordingBackend* second = nullptr;
  std::unique_ptr<SplitBackend> backend;

  explicit Split(std::span<const SplitBackend::Placement> on_second) {
    auto a = std::make_unique<RecordingBackend>(cpu_a);
    auto b = std::make_unique<RecordingBackend>(cpu_b);
    first = a.get();
    second = b.get();
    backend = std::make_unique<SplitBackend>(std::move(a), std::move(b), on_second);
  }
};

Tensor matrix(const std::vector<float>& data, int64_t n_in, int64_t n_out) {
  return Tensor{DType::kF32, 2, {n_in, n_out, 1, 1}, data.data(), "w"};
}

TEST(SplitBackend, OpsRunWhereTheirWeightsAreAndWeightlessOpsFollow) {
  const int64_t n = 8;
  std::vector<float> cpu_w(n * n, 0.5f), gpu_w(2 * n * n, 0.25f), norm(n, 1.0f);
  std::vector<float> x(n, 1.0f), y(2 * n), z(n);
  const SplitBackend::Placement placed[] = {{gpu_w.data(), gpu_w.size() * sizeof(float)}};
  Split s(placed);
  SplitBackend& b = *s.backend;

  b.matmul(matrix(gpu_w, n, n), x.data(), 1, y.data());
  b.add(y.data(), x.data(), n, y.data());  // follows the matmul
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"matmul", "add"}));
  EXPECT_TRUE(s.first->ops().empty());

  // A view inside a placed tensor (as a fused QKV split into three) is placed with it.
  const Tensor second_half{DType::kF32, 2, {n, n, 1, 1}, gpu_w.data() + n * n, "half"};
  b.matmul(second_half, x.data(), 1, z.data());
  EXPECT_EQ(s.second->count("matmul"), 2);

  b.get_rows(matrix(gpu_w, n, 2 * n), std::vector<int32_t>{1}, z.data());  // always the first
  b.scale(z.data(), n, 2.0f, z.data());
  EXPECT_EQ(s.first->ops(), (std::vector<std::string>{"get_rows", "scale"}));

  b.rms_norm(x.data(), matrix(norm, n, 1), 1, n, 1e-5f, z.data());  // norm weight: not placed
  b.swiglu(z.data(), x.data(), n, z.data());
  EXPECT_EQ(s.first->count("rms_norm"), 1);
  EXPECT_EQ(s.first->count("swiglu"), 1);

  // Products on both sides run one by one, each where its weight is; on one side, together.
  std::vector<float> y2(n);
  const Backend::Product mixed[] = {{nullptr, y2.data()}, {nullptr, z.data()}};
  const Tensor wa = matrix(cpu_w, n, n), wb = matrix(gpu_w, n, n);
  Backend::Product products[] = {mixed[0], mixed[1]};
  products[0].w = &wa;
  products[1].w = &wb;
  s.first->clear();
  s.second->clear();
  b.matmuls(x.data(), 1, products);
  EXPECT_EQ(s.first->ops(), (std::vector<std::string>{"matmul"}));
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"matmul"}));
  products[0].w = &wb;
  s.second->clear();
  b.matmuls(x.data(), 1, products);
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"matmuls"}));

  // The scratch scope goes to the first backend only: the second copies in and out.
  const std::span<float> buffers[] = {std::span<float>(y)};
  s.first->clear();
  s.second->clear();
  b.begin_scratch(buffers);
  b.end_scratch();
  EXPECT_EQ(s.first->ops(), (std::vector<std::string>{"begin_scratch", "end_scratch"}));
  EXPECT_TRUE(s.second->ops().empty());
}

// Gemma's post-norm, residual add and next norm: one op where both norm weights are, else
// the post-norm where its weight is and the add and norm where theirs is (the last layer
// on one side, the next on the other).
TEST(SplitBackend, NormAddRmsNormRunsWhereBothWeightsAreOrIsSplitBetweenThem) {
  const int64_t n = 8;
  std::vector<float> placed_norms(2 * n, 0.5f), other_norm(n, 2.0f);
  const SplitBackend::Placement placed[] = {
      {placed_norms.data(), placed_norms.size() * sizeof(float)}};
  Split s(placed);
  const Tensor post{DType::kF32, 1, {n, 1, 1, 1}, placed_norms.data(), "post"};
  const Tensor next{DType::kF32, 1, {n, 1, 1, 1}, placed_norms.data() + n, "next"};
  const Tensor first_side{DType::kF32, 1, {n, 1, 1, 1}, other_norm.data(), "first"};
  std::vector<float> x(n, 1.0f), delta(n, 3.0f);
  s.backend->norm_add_rms_norm(x.data(), delta.data(), post, next, 1, n, 1e-5f, delta.data());
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"norm_add_rms_norm"}));
  EXPECT_TRUE(s.first->ops().empty());
  s.second->clear();
  s.backend->norm_add_rms_norm(x.data(), delta.data(), post, first_side, 1, n, 1e-5f, delta.data());
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"rms_norm"}));
  EXPECT_EQ(s.first->ops(), (std::vector<std::string>{"add_rms_norm"}));
}

// The per-head Q/K norms, RoPE with the K/V store and q's scale: one op on the backend the
// layer runs on where both norm weights are there, else each op where its weight is (the
// rope, store and scale then following the last norm).
TEST(SplitBackend, NormRopeQkStoreRunsWhereBothNormWeightsAreOrIsSplit) {
  const int64_t head_dim = 4, n_head = 2, n_head_kv = 1;
  std::vector<float> placed(2 * head_dim + head_dim * head_dim, 1.0f), other_norm(head_dim, 2.0f);
  const SplitBackend::Placement on_second[] = {{placed.data(), placed.size() * sizeof(float)}};
  Split s(on_second);
  const Tensor wq{DType::kF32, 1, {head_dim, 1, 1, 1}, placed.data(), "q_norm"};
  const Tensor wk{DType::kF32, 1, {head_dim, 1, 1, 1}, placed.data() + head_dim, "k_norm"};
  const Tensor wk_first{DType::kF32, 1, {head_dim, 1, 1, 1}, other_norm.data(), "k_norm"};
  const Tensor layer_w{
      DType::kF32, 2, {head_dim, head_dim, 1, 1}, placed.data() + 2 * head_dim, "wq"};
  std::vector<float> q(n_head * head_dim, 1.5f), k(n_head_kv * head_dim, 0.5f), v(k);
  std::vector<float> x(head_dim, 1.0f), kc(4 * head_dim), vc(4 * head_dim);
  KvLayerView cache;
  cache.k_type = cache.v_type = DType::kF32;
  cache.k = kc.data();
  cache.v = vc.data();
  cache.n_rows = 4;
  cache.n_head_kv = n_head_kv;
  cache.head_dim = head_dim;
  RopeParams rope;
  rope.n_rot = head_dim;
  const std::vector<int32_t> positions = {2};
  SplitBackend& b = *s.backend;
  b.matmul(layer_w, x.data(), 1, q.data());  // the layer runs on the second backend
  s.second->clear();
  b.norm_rope_qk_store(q.data(), n_head, k.data(), v.data(), n_head_kv, 1, head_dim, positions,
                       rope, Backend::HeadNorms{&wq, &wk, 1e-6f, 0.5f}, cache, 2);
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"norm_rope_qk_store"}));
  EXPECT_TRUE(s.first->ops().empty());
  s.second->clear();
  b.norm_rope_qk_store(q.data(), n_head, k.data(), v.data(), n_head_kv, 1, head_dim, positions,
                       rope, Backend::HeadNorms{&wq, &wk_first, 1e-6f, 0.5f}, cache, 2);
  EXPECT_EQ(s.second->ops(), (std::vector<std::string>{"rms_norm"}));
  EXPECT_EQ(s.first->ops(), (std::vector<std::string>{"rms_norm", "rope_qk", "kv_store", "scale"}));
}

TEST(SplitBackend, APointerJustPastAPlacedTensorIsNotPlaced) {
  std::vector<float> both(32, 1.0f), x(4, 1.0f), y(4);
  const SplitBackend::Placement placed[] = {{both.data(), 16 * sizeof(float)}};
  Split s(placed);
  const Tensor after{DType::kF32, 2, {4, 4, 1, 1}, both.data() + 16, "after"};
  const Tensor inside{DType::kF32, 2, {4, 4, 1, 1}, both.data(), "inside"};
  s.backend->matmul(after, x.data(), 1, y.data());
  s.backend->matmul(inside, x.data(), 1, y.data());
  EXPECT_EQ(s.first->count("matmul"), 1);
  EXPECT_EQ(s.second->count("matmul"), 1);
}

TEST(SplitBackend, SupportsOnlyWhatBothRun) {
  Split s({});
  EXPECT_EQ(s.backend->supports(Op::kMatMul, DType::kQ4_0),
            s.cpu_a.supports(Op::kMatMul, DType::kQ4_0));
  EXPECT_EQ(s.backend->name(), "cpu+cpu");
  EXPECT_TRUE(s.backend->supports_paged_kv());  // both CPU backends read paged views
}

TEST(SplitBackend, KvTransfersGoToBothBackends) {
  Split s({});
  const KvLayerView view;  // (the CPU backends do nothing with it: the host is the cache)
  s.backend->kv_to_host(view);
  s.backend->kv_from_host(view);
  const std::vector<std::string> both = {"kv_to_host", "kv_from_host"};
  EXPECT_EQ(s.first->ops(), both);
  EXPECT_EQ(s.second->ops(), both);
}

// The last `on_second` layers of a shared model on the second backend: the logits of a
// prefill and of decode steps are exactly those of one backend, and the second backend ran
// exactly those layers' matmuls.
TEST(SplitBackend, AForwardPassSplitByLayerEqualsOneBackend) {
  for (const char* name : {"stories260K.gguf", "TinyLLama-v0-5M-Q4_K_M.gguf"}) {
    SCOPED_TRACE(name);
    Result<gguf::File> file = gguf::File::open(test::data_path(std::string("models/") + name));
    ASSERT_TRUE(file.ok()) << file.error().message;
    Result<std::unique_ptr<Model>> model = models::load_model(*file, ModelOptions{16});
    ASSERT_TRUE(model.ok()) << model.error().message;
    const int64_t n_layer = (*model)->hparams().n_layer;
    const int64_t n_vocab = (*model)->hparams().n_vocab;
    const std::vector<int32_t> prompt = {
        1,   403, 407, 153, 2,  11, 29, 31, 95,
        300, 5,   7,   9,   13, 17, 19, 23, 3};  // 18: two chunks  // 18: two chunks

    const auto run = [&](Backend& backend) {
      Result<KvCache> kv = make_kv_cache(**model, 64);
      EXPECT_TRUE(kv.ok());
      std::vector<float> logits(static_cast<size_t>(n_vocab) * (prompt.size() + 3));
      EXPECT_TRUE((*model)->forward(backend, prompt, 0, *kv, true, logits.data()).ok());
      for (int i = 0; i < 3; ++i) {
        const int32_t tok = 100 + i;
        float* row = logits.data() + (prompt.size() + i) * n_vocab;
        EXPECT_TRUE((*model)
                        ->forward(backend, std::span<const int32_t>(&tok, 1),
                                  static_cast<int64_t>(prompt.size()) + i, *kv, false, row)
                        .ok());
      }
      return logits;
    };
    kernels::CpuBackend one(1);
    const std::vector<float> want = run(one);
    for (const int64_t on_second : {int64_t{1}, n_layer / 2, n_layer}) {
      SCOPED_TRACE(on_second);
      const std::vector<SplitBackend::Placement> placed =
          cli::layer_weights(*file, n_layer - on_second, n_layer);
      Split s(placed);
      EXPECT_EQ(run(*s.backend), want);
      // Per layer and chunk, the same number of matmul calls on either side: the second's
      // share is on_second of n_layer (the first also ran the output layer, once per chunk).
      const int64_t per_layer =
          (s.second->count("matmul") + s.second->count("matmuls")) / on_second;
      EXPECT_GT(per_layer, 0);
      EXPECT_EQ(s.second->count("get_rows"), 0);
      EXPECT_EQ(s.first->count("matmul") + s.first->count("matmuls"),
                per_layer * (n_layer - on_second) + 5);  // 2 prefill chunks + 3 decode steps
    }
  }
}

}  // namespace
}  // namespace qrun
