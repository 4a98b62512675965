// The CUDA backend keeps the KV cache in device memory; Backend::kv_to_host and
// kv_from_host (core/kv_host_sync.h) let prompt cache files and the context shift work on
// it (they once were refused with -ngl). Under the SIMT emulator; also built for a GPU as
// cuda_gpu_kv_sync_test. Model: stories260K Q4_0 (the golden tests' CUDA model).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cli/gpu_offload.h"
#include "core/context_shift.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/kv_host_sync.h"
#include "core/model.h"
#include "core/prompt_cache.h"
#include "ggml-like/split_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/golden.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

struct Fixture {
  Result<gguf::File> file =
      gguf::File::open(test::data_path("models/stories260K-Q4_0.gguf").string());
  std::unique_ptr<Model> model;
  int64_t n_vocab = 0;

  Fixture() {
    EXPECT_TRUE(file.ok());
    Result<std::unique_ptr<Model>> m = models::load_model(*file, ModelOptions{64});
    EXPECT_TRUE(m.ok());
    model = std::move(*m);
    n_vocab = model->hparams().n_vocab;
  }
  KvCache cache(int64_t n_ctx) {
    Result<KvCache> kv = make_kv_cache(*model, n_ctx, DType::kF16);
    EXPECT_TRUE(kv.ok());
    return std::move(*kv);
  }
  std::vector<float> decode(Backend& backend, KvCache& kv, int32_t token) {
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    EXPECT_TRUE(model
                    ->forward(backend, std::span<const int32_t>(&token, 1), kv.n_tokens(), kv,
                              false, logits.data())
                    .ok());
    return logits;
  }
};

std::vector<int32_t> prompt_tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(1 + i * 37 % 500);
  return t;
}

// A prompt prefilled on one backend, saved as a prompt cache file, loaded by a fresh
// backend of the same kind into a fresh cache: the next token's logits are bit for bit
// those of the first backend going on, the whole model on the GPU or split (-ngl 2).
TEST(CudaEmuKvSync, APromptCacheSavedAndLoadedThroughTheGpuResumesExactly) {
  Fixture f;
  const int64_t n_layer = f.model->hparams().n_layer;
  const std::vector<int32_t> prompt = prompt_tokens(20);
  for (const int64_t on_gpu : {n_layer + 1, int64_t{2}}) {
    SCOPED_TRACE(on_gpu);
    const auto make = [&]() -> std::unique_ptr<Backend> {
      auto cuda = std::make_unique<kernels::cuda::CudaBackend>();
      if (on_gpu > n_layer) return cuda;
      return std::make_unique<SplitBackend>(std::make_unique<kernels::CpuBackend>(1),
                                            std::move(cuda),
                                            cli::layer_weights(*f.file, n_layer - on_gpu, n_layer));
    };
    const std::string path = (test::temp_dir() / "prompt.bin").string();
    std::unique_ptr<Backend> first = make();
    KvCache kv = f.cache(64);
    std::vector<float> logits(static_cast<size_t>(f.n_vocab));
    ASSERT_TRUE(f.model->forward(*first, prompt, 0, kv, false, logits.data()).ok());
    sync_kv_to_host(*first, kv);
    ASSERT_TRUE(save_prompt_cache(path, 7, kv, prompt).ok());
    const std::vector<float> going_on = f.decode(*first, kv, 42);

    std::unique_ptr<Backend> second = make();
    KvCache resumed = f.cache(64);
    const PromptCacheLoad loaded = load_prompt_cache(path, 7, resumed, prompt, 20);
    ASSERT_EQ(loaded.n_restored, 20) << loaded.problem;
    sync_kv_from_host(*second, resumed);
    EXPECT_EQ(f.decode(*second, resumed, 42), going_on);
  }
}

// A context shift with the cache on the GPU turns the GPU's keys: the logits after it are
// the CPU backend's after the same shift, within the bound the golden tests hold the CUDA
// backend to (normalized MSE 1e-3; without the transfer they are those of unshifted rows).
TEST(CudaEmuKvSync, AContextShiftOnTheGpuMatchesTheCpu) {
  Fixture f;
  const std::vector<int32_t> prompt = prompt_tokens(30);
  std::vector<std::vector<float>> after;
  kernels::CpuBackend cpu(1);
  kernels::cuda::CudaBackend cuda;
  for (Backend* backend : {static_cast<Backend*>(&cpu), static_cast<Backend*>(&cuda)}) {
    KvCache kv = f.cache(32);
    std::vector<float> logits(static_cast<size_t>(f.n_vocab));
    ASSERT_TRUE(f.model->forward(*backend, prompt, 0, kv, false, logits.data()).ok());
    ASSERT_TRUE(shift_context(*f.model, *backend, kv, 4, 13).ok());
    ASSERT_EQ(kv.n_tokens(), 17);
    after.push_back(f.decode(*backend, kv, 42));
  }
  const double e = test::nmse(after[1].data(), after[0].data(), static_cast<size_t>(f.n_vocab));
  EXPECT_LT(e, 1e-3);
  std::printf("logits after a shift, CUDA against CPU: nmse %.2e\n", e);
}

}  // namespace
}  // namespace qrun
