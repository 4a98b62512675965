// -ngl N short of the whole model: the last N layers on the CUDA backend (here under the
// SIMT emulator; built against the nvcc target as cuda_gpu_split_test for a GPU), the rest
// and the output layer on the CPU backend, through SplitBackend. Against llama.cpp's golden
// logits within the bound cuda_emu_golden_test holds the CUDA backend to for quantized
// weights (normalized MSE 1e-3 per row: the CPU layers are well inside it, the CUDA layers
// are what that bound was set for). One prefill, then 4 decode steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/gpu_offload.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/split_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/golden.h"
#include "tests/support/recording_backend.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

class CudaEmuSplit : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEmuSplit, LastLayersOnTheGpuMatchLlamaCpp) {
  const std::string name = GetParam();
  Result<gguf::File> file = gguf::File::open(test::data_path("models/" + name + ".gguf").string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file, ModelOptions{512});
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int64_t n_layer = (*model)->hparams().n_layer;
  const test::Golden g = test::load_golden("golden/" + name + ".once", true);
  const int64_t n_vocab = g.n_vocab;
  const auto n_prompt = static_cast<int64_t>(g.prompt.size());
  const int64_t n_rows = n_prompt + test::kGoldenDecodeRows;

  kernels::CpuBackend cpu(1);
  kernels::cuda::CudaBackend cuda;
  for (const int64_t on_gpu : {int64_t{1}, n_layer}) {
    SCOPED_TRACE(name + ", -ngl " + std::to_string(on_gpu));
    auto gpu_side = std::make_unique<test::RecordingBackend>(cuda);
    const test::RecordingBackend* gpu_ops = gpu_side.get();
    SplitBackend split(std::make_unique<test::RecordingBackend>(cpu), std::move(gpu_side),
                       cli::layer_weights(*file, n_layer - on_gpu, n_layer));
    ASSERT_TRUE((*model)->check_backend(split).ok());
    Result<KvCache> kv = make_kv_cache(**model, 256, DType::kF16);
    ASSERT_TRUE(kv.ok()) << kv.error().message;
    std::vector<float> rows(static_cast<size_t>(n_rows * n_vocab));
    ASSERT_TRUE((*model)->forward(split, g.prompt, 0, *kv, true, rows.data()).ok());
    for (int i = 0; i < test::kGoldenDecodeRows; ++i) {
      const int32_t tok = g.greedy[static_cast<size_t>(i)];
      ASSERT_TRUE((*model)
                      ->forward(split, std::span<const int32_t>(&tok, 1), n_prompt + i, *kv, false,
                                rows.data() + (n_prompt + i) * n_vocab)
                      .ok());
    }
    EXPECT_GT(gpu_ops->count("attention"), 0);
    EXPECT_EQ(gpu_ops->count("attention"), on_gpu * (1 + test::kGoldenDecodeRows));
    double worst = 0.0;
    for (int64_t row = 0; row < n_rows; ++row) {
      const double e = test::nmse(rows.data() + row * n_vocab, g.logits.data() + row * n_vocab,
                                  static_cast<size_t>(n_vocab));
      worst = std::max(worst, e);
      EXPECT_LT(e, 1e-3) << "logits row " << row;
    }
    std::printf("%s -ngl %lld of %lld: worst row nmse %.2e\n", name.c_str(),
                static_cast<long long>(on_gpu), static_cast<long long>(n_layer), worst);
  }
}

#if defined(QRUN_CUDA_GPU_TEST)  // built against the nvcc target
#define QRUN_SPLIT_MODELS "stories260K-Q4_0", "TinyLLama-v0-5M-Q4_K_M"
#else
#define QRUN_SPLIT_MODELS "stories260K-Q4_0"
#endif
INSTANTIATE_TEST_SUITE_P(SharedModels, CudaEmuSplit, ::testing::Values(QRUN_SPLIT_MODELS),
                         [](const auto& p) {
                           std::string s = p.param;
                           std::replace_if(
                               s.begin(), s.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return s;
                         });

}  // namespace
}  // namespace qrun
