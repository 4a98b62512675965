// Decode rows (Backend::set_decode_rows) through CudaBackend under the SIMT emulator (built
// against the nvcc target as cuda_gpu_decode_rows_test for a GPU): a speculative
// verification pass of 18 rows, each row's logits bit for bit those of decoding its token
// alone, as tests/speculative_test.cpp holds the CPU backend to. Without the flag the same
// pass goes through the F16 GEMM and the tiled prefill attention, whose rows differ from a
// lone token's in the last bits (checked too, so that the test shows the flag at work).
// The rows start at position 31 in a cache of 128 rows, so that the attention launches hold
// 2 tokens each (the scratch of one token at the cache's end holds 4 splits of 32
// positions, the pass's last token needs 2) and the first launch's first token attends
// one split alone and two in the launch (the split kernel's direct output against its
// merge).
// The shared stories260K Q4_0 file (the grouped MMVQ layout of Q4_0 and Q8_0) and synthetic
// qwen3 (Q4_K and Q6_K, Q/K norms) and gemma3 (Q5_K, GELU gates, windows of 4) files with
// the demo model's 512-token vocabulary, so that the output layer stays small for the
// emulator (about 9 s a file; under sanitizers, several times that, gemma3 alone of the
// synthetic ones). And the pass keeps attention's scratch at one token's at the cache's end.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
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

constexpr int64_t kPrefix = 31;  // tokens before the pass
constexpr int64_t kCacheRows = 128;
constexpr int64_t kRows = 18;  // rows of the pass: past kPrefillMinTokens, 8 + 8 + 2 for MMVQ

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Model> model;
};

Loaded load(const std::string& path) {
  Loaded l;
  Result<gguf::File> file = gguf::File::open(path);
  EXPECT_TRUE(file.ok()) << file.error().message;
  if (!file.ok()) return l;
  l.file = std::make_unique<gguf::File>(std::move(*file));
  Result<std::unique_ptr<Model>> model = models::load_model(*l.file, ModelOptions{64});
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (model.ok()) l.model = std::move(*model);
  return l;
}

// The rows of the pass, run as decode rows and not, whose logits differ in any bit from
// the one-token passes', after the same prefix in each cache.
struct Unlike {
  int as_decode_rows = 0;
  int as_prompt = 0;
};

Unlike rows_unlike_one_token_passes(Model& m) {
  const auto n_vocab = static_cast<size_t>(m.hparams().n_vocab);
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < kPrefix + kRows; ++i) {
    tokens.push_back(static_cast<int32_t>((i * 131 + 7) % static_cast<int64_t>(n_vocab)));
  }
  const std::span<const int32_t> prefix = std::span(tokens).first(kPrefix);
  const std::span<const int32_t> batch = std::span(tokens).subspan(kPrefix);
  kernels::cuda::CudaBackend be;
  EXPECT_TRUE(m.check_backend(be).ok());
  auto prefilled = [&] {
    Result<KvCache> kv = make_kv_cache(m, kCacheRows, DType::kF16);
    EXPECT_TRUE(kv.ok());
    EXPECT_TRUE(m.forward(be, prefix, 0, *kv, false, nullptr).ok());
    return std::move(*kv);
  };
  KvCache alone = prefilled();
  std::vector<float> want(batch.size() * n_vocab);
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_TRUE(m.forward(be, batch.subspan(i, 1), kPrefix + static_cast<int64_t>(i), alone, false,
                          want.data() + i * n_vocab)
                    .ok());
  }
  auto unlike = [&](bool decode_rows) {
    KvCache kv = prefilled();
    std::vector<float> got(batch.size() * n_vocab);
    be.set_decode_rows(decode_rows);
    EXPECT_TRUE(m.forward(be, batch, kPrefix, kv, true, got.data()).ok());
    be.set_decode_rows(false);
    int n = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      n += std::memcmp(got.data() + i * n_vocab, want.data() + i * n_vocab,
                       n_vocab * sizeof(float)) != 0;
    }
    return n;
  };
  return Unlike{unlike(true), unlike(false)};
}

void expect_decode_rows_are_one_token_passes(Model& m) {
  const Unlike u = rows_unlike_one_token_passes(m);
  EXPECT_EQ(u.as_decode_rows, 0);
  EXPECT_GT(u.as_prompt, 0);
}

TEST(CudaEmuDecodeRows, PassIsOneTokenPassesBitForBitOnASharedFile) {
  Loaded l = load(test::data_path("models/stories260K-Q4_0.gguf").string());
  ASSERT_NE(l.model, nullptr);
  expect_decode_rows_are_one_token_passes(*l.model);
}

TEST(CudaEmuDecodeRows, PassIsOneTokenPassesBitForBitOnEveryArchitecture) {
  Result<gguf::File> vocab = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(vocab.ok()) << vocab.error().message;
  struct Case {
    std::string arch, recipe;
  };
#if defined(QRUN_SANITIZED)
  const std::vector<Case> cases = {{"gemma3", "q5_k_m"}};
#else
  const std::vector<Case> cases = {{"qwen3", "q4_k_m"}, {"gemma3", "q5_k_m"}};
#endif
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arch + " " + c.recipe);
    models::SynthOptions o;
    o.arch = c.arch;
    o.shape = *models::synth_preset("tiny");
    o.shape.n_embd = 256;  // whole k-quant super-blocks
    o.shape.n_ff = 512;
    if (c.arch == "gemma3") o.shape.sliding_window = 4;
    o.recipe = c.recipe;
    o.seed = 5;
    const std::string path = (test::temp_dir() / ("rows-" + c.arch + ".gguf")).string();
    const Result<void> written = models::write_synthetic_model(o, *vocab, path);
    ASSERT_TRUE(written.ok()) << written.error().message;
    Loaded l = load(path);
    ASSERT_NE(l.model, nullptr);
    expect_decode_rows_are_one_token_passes(*l.model);
  }
}

// A pass of decode rows keeps attention's scratch at what one token at the cache's last row
// needs (what the memory plan counts): its launches hold as many tokens as fit that.
// Without that, 17 rows right after the first token would ask for 17 tokens' partials.
TEST(CudaEmuDecodeRows, PassKeepsTheAttentionScratchOfOneTokenAtTheCachesEnd) {
  Loaded l = load(test::data_path("models/stories260K-Q4_0.gguf").string());
  ASSERT_NE(l.model, nullptr);
  Model& m = *l.model;
  const ModelHparams& hp = m.hparams();
  kernels::cuda::CudaBackend be;
  ASSERT_TRUE(m.check_backend(be).ok());
  Result<KvCache> kv = make_kv_cache(m, kCacheRows, DType::kF16);
  ASSERT_TRUE(kv.ok());
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 18; ++i) tokens.push_back((i * 131 + 7) % 512);
  ASSERT_TRUE(m.forward(be, std::span(tokens).first(1), 0, *kv, false, nullptr).ok());
  const size_t one_at_end =
      kernels::cuda::attention_scratch_floats(
          1, kCacheRows - 1, AttentionParams{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f, 0}) *
      sizeof(float);
  EXPECT_EQ(be.attention_scratch_bytes(), one_at_end);
  be.set_decode_rows(true);
  ASSERT_TRUE(m.forward(be, std::span(tokens).subspan(1), 1, *kv, true, nullptr).ok());
  be.set_decode_rows(false);
  EXPECT_EQ(be.attention_scratch_bytes(), one_at_end);
}

}  // namespace
}  // namespace qrun
