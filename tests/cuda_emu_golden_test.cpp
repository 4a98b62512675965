// The forward pass end to end through CudaBackend under the SIMT emulator, against
// llama.cpp's golden logits (../shared/golden), for the shared quantized models whose
// weight types the CUDA backend has: one batched prefill and 4 decode steps with an F16
// KV cache, every logits row within normalized MSE 1e-3 of llama.cpp's, the bound
// forward_golden_test.cpp holds the CPU backend to for quantized weights. (The CUDA
// backend quantizes activations in blocks of 32 for the k-quants too, where llama.cpp's
// CPU uses Q8_K blocks of 256, and sums attention in float; both stay well inside it.)
// Only the stories260K files run: TinyLlama 5M's 32000-row output layer is a million
// emulated threads per token, minutes per prompt under the emulator. Under sanitizers
// (several times slower) one prompt per model. Built against the nvcc target for a GPU
// (cuda_gpu_golden_test), every quantized shared model runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/golden.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

class CudaEmuGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEmuGolden, MatchesLlamaCpp) {
  const std::string name = GetParam();
  Result<gguf::File> file = gguf::File::open(test::data_path("models/" + name + ".gguf").string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file, ModelOptions{512});
  ASSERT_TRUE(model.ok()) << model.error().message;
  kernels::cuda::CudaBackend backend;
  Result<void> supported = (*model)->check_backend(backend);
  ASSERT_TRUE(supported.ok()) << supported.error().message;

#if defined(QRUN_SANITIZED)
  const std::vector<std::string> prompts = {"once"};
#else
  const std::vector<std::string> prompts = {"once", "park"};
#endif
  for (const std::string& prompt : prompts) {
    SCOPED_TRACE(name + "." + prompt);
    const test::Golden g = test::load_golden("golden/" + name + "." + prompt, true);
    const int64_t n_vocab = g.n_vocab;
    const int64_t n_prompt = static_cast<int64_t>(g.prompt.size());
    const int64_t n_rows = n_prompt + test::kGoldenDecodeRows;
    ASSERT_EQ(static_cast<int64_t>(g.logits.size()), n_rows * n_vocab);
    Result<KvCache> kv = make_kv_cache(**model, 256, DType::kF16);
    ASSERT_TRUE(kv.ok()) << kv.error().message;
    std::vector<float> rows(static_cast<size_t>(n_rows * n_vocab));
    Result<void> r = (*model)->forward(backend, g.prompt, 0, *kv, true, rows.data());
    ASSERT_TRUE(r.ok()) << r.error().message;
    for (int i = 0; i < test::kGoldenDecodeRows; ++i) {
      const int32_t tok = g.greedy[static_cast<size_t>(i)];
      r = (*model)->forward(backend, std::span<const int32_t>(&tok, 1), n_prompt + i, *kv, false,
                            rows.data() + (n_prompt + i) * n_vocab);
      ASSERT_TRUE(r.ok()) << r.error().message;
    }
    double worst = 0.0;
    for (int64_t row = 0; row < n_rows; ++row) {
      const double e = test::nmse(rows.data() + row * n_vocab, g.logits.data() + row * n_vocab,
                                  static_cast<size_t>(n_vocab));
      worst = std::max(worst, e);
      EXPECT_LT(e, 1e-3) << "logits row " << row;
    }
    std::printf("%s.%s: %lld rows, worst row nmse %.2e\n", name.c_str(), prompt.c_str(),
                static_cast<long long>(n_rows), worst);
  }
}

#if defined(QRUN_CUDA_GPU_TEST)  // built against the nvcc target: every quantized model
#define QRUN_GOLDEN_MODELS                                                                \
  "stories260K-Q4_0", "stories260K-Q8_0", "TinyLLama-v0-5M-Q4_0", "TinyLLama-v0-5M-Q8_0", \
      "TinyLLama-v0-5M-Q4_K_M", "TinyLLama-v0-5M-Q4_K-Q6_K-mix"
#else
#define QRUN_GOLDEN_MODELS "stories260K-Q4_0", "stories260K-Q8_0"
#endif
INSTANTIATE_TEST_SUITE_P(SharedModels, CudaEmuGolden, ::testing::Values(QRUN_GOLDEN_MODELS),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& c : s) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace qrun
