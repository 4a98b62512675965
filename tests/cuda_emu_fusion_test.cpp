// CudaBackend's decode fusions (QRUN_CUDA_FUSE): Q, K and V (and gate and up) in one
// launch, the residual add fused with the next RMS norm, the matmul inputs quantized by
// the RMS norm, gated activation or attention that writes them, the K/V store done by the
// RoPE launch, and attention's splits merged by its own last blocks. They change the number of
// launches, never a bit of the result: synthetic models whose rows the grouped tile kernel takes
// (widths of 256 and 512), in llama (Q4_0), qwen2 (Q4_K_M: Q/K/V biases, and V of another
// type in some layers, so that group takes a launch a type), qwen3 (per-head Q/K
// norms, done by the RoPE launch) and gemma3 (Q8_0: post-norms, GELU-gated FFN, Q/K norms
// and q's scale in the RoPE launch), prefill a prompt and decode steps with the fusions on and
// off, and every logit must have the same bits. Built against the nvcc target
// (cuda_gpu_fusion_test), the same check runs on the GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "models/synth.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

using kernels::cuda::CudaBackend;

// The logits of a 40-token prompt's last token, then of 4 decode steps (feeding token t,
// the same for both runs), through `backend`. 40 positions: the decode steps' attention has
// two splits of 32, merged by a second kernel (unfused) or by its last block (fused).
std::vector<float> run(Model& model, CudaBackend& backend) {
  const int64_t n_vocab = model.hparams().n_vocab;
  Result<KvCache> kv = make_kv_cache(model, 64, DType::kF16);
  EXPECT_TRUE(kv.ok()) << kv.error().message;
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + 37 * i % 500);
  std::vector<float> logits(static_cast<size_t>(5 * n_vocab));
  Result<void> r = model.forward(backend, prompt, 0, *kv, false, logits.data());
  EXPECT_TRUE(r.ok()) << r.error().message;
  for (int step = 0; step < 4; ++step) {
    const int32_t token = 20 + 31 * step;
    r = model.forward(backend, std::span<const int32_t>(&token, 1),
                      static_cast<int64_t>(prompt.size()) + step, *kv, false,
                      logits.data() + (step + 1) * n_vocab);
    EXPECT_TRUE(r.ok()) << r.error().message;
  }
  return logits;
}

struct FusionCase {
  const char* arch;
  const char* recipe;
};

class CudaEmuFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(CudaEmuFusion, FusedDecodeHasTheBitsOfUnfused) {
  const FusionCase c = GetParam();
  // stories260K's 512-token vocabulary keeps the output layer small under the emulator.
  Result<gguf::File> vocab = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(vocab.ok()) << vocab.error().message;
  models::SynthOptions o;
  o.arch = c.arch;
  o.recipe = c.recipe;
  o.shape = models::SynthShape{256, 2, 4, 2, 512, 256, 10000.0f, 1e-5f, false};
  // gemma3: the local layer's window ends inside the prompt
  if (std::string(c.arch) == "gemma3") o.shape.sliding_window = 4;
  const std::string path =
      (test::temp_dir() / (std::string("fusion-") + c.arch + "-" + c.recipe + ".gguf")).string();
  Result<void> written = models::write_synthetic_model(o, *vocab, path);
  ASSERT_TRUE(written.ok()) << written.error().message;
  Result<gguf::File> file = gguf::File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file, ModelOptions{64});
  ASSERT_TRUE(model.ok()) << model.error().message;

  CudaBackend fused(/*graphs=*/false, /*fuse=*/true);
  CudaBackend unfused(/*graphs=*/false, /*fuse=*/false);
#if defined(QRUN_SIMT_EMU)
  const int64_t k0 = kernels::cuda::kernels_launched();
#endif
  const std::vector<float> a = run(**model, fused);
#if defined(QRUN_SIMT_EMU)
  const int64_t k1 = kernels::cuda::kernels_launched();
#endif
  const std::vector<float> b = run(**model, unfused);
#if defined(QRUN_SIMT_EMU)
  // The fusions engaged: per layer of a decode step, llama's 3 matmul inputs and 2 adds
  // launch nothing of their own, and Q/K/V and gate/up save 3 launches (its prefill saves
  // the 2 adds); the other architectures save fewer (a mixed-type group, post-norms).
  const int64_t saved = (kernels::cuda::kernels_launched() - k1) - (k1 - k0);
  if (std::string(c.arch) == "llama") {
    EXPECT_GE(saved, 4 * (8 * o.shape.n_layer - 1)) << "kernels saved by the fusions";
  }
  EXPECT_GT(saved, 0) << "kernels saved by the fusions";
#endif
  ASSERT_EQ(a.size(), b.size());
  const int64_t n_vocab = (*model)->hparams().n_vocab;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << "step " << static_cast<int64_t>(i) / n_vocab << ", logit " << i % n_vocab << ": " << a[i]
        << " fused, " << b[i] << " unfused";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, CudaEmuFusion,
    ::testing::Values(FusionCase{"llama", "q4_0"}, FusionCase{"qwen2", "q4_k_m"},
                      FusionCase{"qwen3", "q4_k_m"}, FusionCase{"gemma3", "q8_0"}),
    [](const auto& p) { return std::string(p.param.arch) + "_" + p.param.recipe; });

}  // namespace
}  // namespace qrun
