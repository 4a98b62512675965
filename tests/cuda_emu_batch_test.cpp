// Model::forward_batch through CudaBackend (under the SIMT emulator; built against the nvcc
// target as cuda_gpu_batch_test for a GPU): four sequences, each with its own F16 cache,
// in batched calls that mix prompt chunks, decode tokens and every-row logits, against the
// same tokens fed one sequence at a time through forward(). Each sequence's device KV rows
// are keyed by its own host cache, and every piece of a step reads its rows of the step's
// resident activations, so a mix-up shows as a large error. Not bit-exact: a matmul of up
// to 4 rows quantizes activations for MMVQ and one of 5 or more rounds both operands to
// F16 for the gemm (kernels/cuda/cuda_backend.h), so a batched step and a lone decode token
// round differently; the bound is the golden tests' normalized MSE of 1e-3 per logits row
// (measured under the emulator: 3.5e-5 at worst).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr int kSeqs = 4;
constexpr double kMaxNmse = 1e-3;

struct Part {
  int seq;
  int64_t n;
  bool all_logits = false;
};

// n_batch 16: the first call takes two steps; the others hold 2 to 13 rows, on both sides
// of the MMVQ / gemm switch at 5.
const std::vector<std::vector<Part>> kScript = {
    {{0, 5}, {1, 1}, {2, 14}},        {{0, 1}, {1, 1}, {2, 1}, {3, 6, true}}, {{0, 1}, {1, 1}},
    {{3, 1}, {2, 1}, {1, 1}, {0, 1}}, {{0, 1}, {1, 9}, {2, 1}, {3, 1}},
};

TEST(CudaEmuBatch, BatchedLogitsMatchOneSequenceAtATime) {
  Result<gguf::File> file =
      gguf::File::open(test::data_path("models/stories260K-Q8_0.gguf").string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> loaded = models::load_model(*file, ModelOptions{16, kSeqs});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  Model& m = **loaded;
  kernels::cuda::CudaBackend backend;
  ASSERT_TRUE(m.check_backend(backend).ok());
  const int64_t n_vocab = m.hparams().n_vocab;
  std::vector<KvCache> solo, batched;
  for (int i = 0; i < kSeqs; ++i) {
    Result<KvCache> a = make_kv_cache(m, 64, DType::kF16);
    Result<KvCache> b = make_kv_cache(m, 64, DType::kF16);
    ASSERT_TRUE(a.ok() && b.ok());
    solo.push_back(std::move(*a));
    batched.push_back(std::move(*b));
  }
  std::vector<int64_t> pos(kSeqs, 0);
  double worst = 0.0;
  for (const std::vector<Part>& call : kScript) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> want, got;
    std::vector<SeqForward> seqs;
    for (const Part& p : call) {
      std::vector<int32_t> t;
      for (int64_t i = 0; i < p.n; ++i)
        t.push_back(static_cast<int32_t>((p.seq * 131 + (pos[p.seq] + i) * 17 + 5) % n_vocab));
      tokens.push_back(std::move(t));
      const auto rows = static_cast<size_t>(p.all_logits ? p.n : 1);
      want.emplace_back(rows * static_cast<size_t>(n_vocab));
      got.emplace_back(rows * static_cast<size_t>(n_vocab));
    }
    for (size_t i = 0; i < call.size(); ++i) {
      const Part& p = call[i];
      seqs.push_back(
          SeqForward{tokens[i], pos[p.seq], &batched[p.seq], p.all_logits, got[i].data()});
      ASSERT_TRUE(
          m.forward(backend, tokens[i], pos[p.seq], solo[p.seq], p.all_logits, want[i].data())
              .ok());
    }
    ASSERT_TRUE(m.forward_batch(backend, seqs).ok());
    for (size_t i = 0; i < call.size(); ++i) {
      pos[call[i].seq] += call[i].n;
      for (size_t row = 0; row < want[i].size(); row += static_cast<size_t>(n_vocab)) {
        double err = 0.0, ref = 0.0;
        for (int64_t j = 0; j < n_vocab; ++j) {
          const double w = want[i][row + static_cast<size_t>(j)];
          const double g = got[i][row + static_cast<size_t>(j)];
          err += (g - w) * (g - w);
          ref += w * w;
        }
        worst = std::max(worst, err / ref);
      }
    }
  }
  std::printf("CUDA backend, batched against one at a time: worst logits-row NMSE %.3g\n", worst);
  EXPECT_LT(worst, kMaxNmse);
}

// A serve decode step (Backend::set_decode_rows, as BatchScheduler marks a step of decode
// tokens alone) of 6 sequences, past the MMVQ / gemm switch at 5 rows: each sequence's logits
// bit for bit those of its token decoded alone, after prompts of 3 to 38 tokens (one and two
// attention splits of 32). The next step, unmarked, takes the gemm: some row differs.
TEST(CudaEmuBatch, DecodeRowsStepIsEachSequenceAloneBitForBit) {
  constexpr int kRows = 6;
  Result<gguf::File> file =
      gguf::File::open(test::data_path("models/stories260K-Q4_0.gguf").string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> loaded = models::load_model(*file, ModelOptions{64, kRows});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  Model& m = **loaded;
  kernels::cuda::CudaBackend backend;
  ASSERT_TRUE(m.check_backend(backend).ok());
  const auto n_vocab = static_cast<size_t>(m.hparams().n_vocab);
  std::vector<KvCache> solo, batched;
  std::vector<int64_t> pos;
  for (int i = 0; i < kRows; ++i) {
    Result<KvCache> a = make_kv_cache(m, 64, DType::kF16);
    Result<KvCache> b = make_kv_cache(m, 64, DType::kF16);
    ASSERT_TRUE(a.ok() && b.ok());
    solo.push_back(std::move(*a));
    batched.push_back(std::move(*b));
    std::vector<int32_t> prompt;
    for (int j = 0; j < 3 + 7 * i; ++j) prompt.push_back((i * 131 + j * 17 + 5) % 512);
    ASSERT_TRUE(m.forward(backend, prompt, 0, solo.back(), false, nullptr).ok());
    ASSERT_TRUE(m.forward(backend, prompt, 0, batched.back(), false, nullptr).ok());
    pos.push_back(static_cast<int64_t>(prompt.size()));
  }
  for (const bool decode_rows : {true, false}) {
    SCOPED_TRACE(decode_rows ? "decode rows" : "unmarked");
    std::vector<int32_t> tokens;
    std::vector<float> want(kRows * n_vocab), got(kRows * n_vocab);
    std::vector<SeqForward> seqs;
    for (int i = 0; i < kRows; ++i) {
      tokens.push_back(static_cast<int32_t>((i * 37 + pos[i] * 11) % 512));
    }
    for (int i = 0; i < kRows; ++i) {
      const std::span<const int32_t> token(&tokens[i], 1);
      ASSERT_TRUE(
          m.forward(backend, token, pos[i], solo[i], false, want.data() + i * n_vocab).ok());
      seqs.push_back(SeqForward{token, pos[i], &batched[i], false, got.data() + i * n_vocab});
      ++pos[i];
    }
    backend.set_decode_rows(decode_rows);
    ASSERT_TRUE(m.forward_batch(backend, seqs).ok());
    backend.set_decode_rows(false);
    int unlike = 0;
    for (int i = 0; i < kRows; ++i) {
      unlike += std::memcmp(got.data() + i * n_vocab, want.data() + i * n_vocab,
                            n_vocab * sizeof(float)) != 0;
    }
    if (decode_rows) {
      EXPECT_EQ(unlike, 0);
    } else {
      EXPECT_GT(unlike, 0);
    }
  }
}

}  // namespace
}  // namespace qrun
