// The phi3 architecture, against llama.cpp's logits and greedy tokens on a model
// `qrun synth --arch phi3` writes (Q8_0 weights, fused attn_qkv and gate-up ffn_up, random
// LongRoPE factors, an original context of 256 in a context of 512, and a 4-token sliding
// window key that llama.cpp does not apply). References in tests/data (see its README),
// made with llama.cpp at n_ctx 256 (short factors) and 512 (long factors); and a second
// model with Phi-4-mini's partial RoPE, a tied output and F32 weights.
// Also: separate Q/K/V tensors give the bits of the fused ones, an output bias is added,
// and missing or misshapen fused tensors are one-line errors naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/llamacpp_rows.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

const std::vector<int32_t> kPrompt = {1, 450, 4996, 338, 263, 1243, 29889, 13};

// `qrun synth --arch phi3 <args>`, which must hash to `fnv`: byte for byte the model
// llama.cpp ran on.
std::string synth_phi3(const std::string& args, uint64_t fnv) {
  const std::string path = (test::temp_dir() / "phi3.gguf").string();
  const test::CommandResult r = test::run_command(
      test::qrun_binary().string() + " synth --arch phi3 --like tiny " + args + " --vocab " +
      test::data_path("vocab/ggml-vocab-phi-3.gguf").string() + " -o " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::fnv1a(test::read_bytes(path)), fnv)
      << "qrun synth no longer writes the model the references were computed on";
  return path;
}

// The model of the main references: Q8_0, untied, LongRoPE over all 16 elements of a head.
std::string synth_phi3() {
  return synth_phi3("--type q8_0 --std 0.1 --seed 7 --orig-ctx 256 --sliding-window 4",
                    11064951399713859443ull);
}

// The prompt in one pass (every row), then one token at a time feeding back llama.cpp's
// argmax: one logits row per reference row, on an F16 cache of n_ctx positions
// (llama.cpp ran with flash attention, which rounds K and V to F16).
std::vector<std::vector<float>> qrun_rows(Model& model, int64_t n_ctx,
                                          const std::vector<test::LlamaCppRow>& ref) {
  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(model, n_ctx, DType::kF16);
  EXPECT_TRUE(kv.ok());
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<float> logits(kPrompt.size() * static_cast<size_t>(n_vocab));
  EXPECT_TRUE(model.forward(be, kPrompt, 0, *kv, true, logits.data()).ok());
  std::vector<std::vector<float>> rows;
  for (size_t t = 0; t < kPrompt.size(); ++t)
    rows.emplace_back(logits.begin() + t * n_vocab, logits.begin() + (t + 1) * n_vocab);
  for (size_t i = kPrompt.size(); i < ref.size(); ++i) {
    const std::vector<int32_t> one = {ref[i - 1].argmax};
    EXPECT_TRUE(model.forward(be, one, static_cast<int64_t>(i), *kv, false, logits.data()).ok());
    rows.emplace_back(logits.begin(), logits.begin() + n_vocab);
  }
  return rows;
}

int argmax(const std::vector<float>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int>(best);
}

class Phi3LlamaCpp : public testing::Test {
 protected:
  void SetUp() override {
    path_ = synth_phi3();
    Result<gguf::File> f = gguf::File::open(path_);
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::make_unique<gguf::File>(std::move(*f));
    Result<std::unique_ptr<Model>> m = models::load_model(*file_);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m);
    ASSERT_EQ(model_->hparams().n_vocab, 32064);
    short_ = test::read_llamacpp_rows("phi3_tiny_llamacpp_ctx256.txt");
    long_ = test::read_llamacpp_rows("phi3_tiny_llamacpp_ctx512.txt");
    ASSERT_EQ(short_.size(), 16u);
    ASSERT_EQ(long_.size(), 16u);
  }

  // qrun at n_ctx against `ref`, row by row.
  void expect_matches(int64_t n_ctx, const std::vector<test::LlamaCppRow>& ref) {
    const std::vector<std::vector<float>> rows = qrun_rows(*model_, n_ctx, ref);
    for (size_t i = 0; i < ref.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "n_ctx " << n_ctx << " position " << ref[i].pos);
      EXPECT_LT(test::nmse_strided(rows[i].data(), ref[i]), kBound);
      EXPECT_EQ(argmax(rows[i]), ref[i].argmax);
    }
  }

  // Per-row NMSE over ids 0, 128, ...: measured at most 6e-15 on prompt rows (llama.cpp sums
  // batched Q8_0 dot products in another order) and 4e-18 on decode rows (the reference's
  // 9 printed digits), with QRUN_FORCE_ISA=generic, avx2 and avx512 alike. The bound leaves
  // room for a Q8_0 activation rounding tie resolved the other way on another ISA, and stays
  // far below what a wrong factor set (>= 7e-4, below) or split order would give.
  static constexpr double kBound = 1e-8;
  std::string path_;
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Model> model_;
  std::vector<test::LlamaCppRow> short_, long_;
};

TEST_F(Phi3LlamaCpp, ShortRopeFactorsUpToTheOriginalContext) {
  expect_matches(256, short_);
  expect_matches(100, short_);  // llama.cpp would round 100 up to 256: still short
}

TEST_F(Phi3LlamaCpp, LongRopeFactorsPastTheOriginalContext) {
  expect_matches(512, long_);
  expect_matches(300, long_);  // llama.cpp rounds 300 up to 512: long
}

// The short-factor logits miss the long-factor reference by far more than the bound (from
// position 1: position 0 turns by angle 0): the tests above tell the factor sets apart.
// Measured: 7e-4 at position 1, 2e-2 .. 0.7 after.
TEST_F(Phi3LlamaCpp, TheFactorChoiceShowsInTheLogits) {
  const std::vector<std::vector<float>> rows = qrun_rows(*model_, 256, short_);
  for (size_t i = 1; i < short_.size(); ++i)
    EXPECT_GT(test::nmse_strided(rows[i].data(), long_[i]), 1e-4) << "row " << i;
}

// Phi-4-mini's shape: RoPE on part of each head (12 of 16 elements, so 6 factors per set),
// a tied output, F32 weights; long factors (context 512 over an original 256).
TEST(Phi3PartialRope, MatchesLlamaCpp) {
  const std::string path =
      synth_phi3("--rope-dims 12 --tied --type f32 --std 0.1 --seed 7 --orig-ctx 256",
                 14756595623940055047ull);
  Result<gguf::File> file = gguf::File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ((*model)->hparams().n_rot, 12);
  const std::vector<test::LlamaCppRow> ref =
      test::read_llamacpp_rows("phi3_partial_rope_llamacpp_ctx512.txt");
  ASSERT_EQ(ref.size(), 16u);
  const std::vector<std::vector<float>> rows = qrun_rows(**model, 512, ref);
  for (size_t i = 0; i < ref.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "position " << ref[i].pos);
    // Measured: at most 1.2e-13 (generic, AVX2, AVX-512 alike); the same bound as above.
    EXPECT_LT(test::nmse_strided(rows[i].data(), ref[i]), 1e-8);
    EXPECT_EQ(argmax(rows[i]), ref[i].argmax);
  }
}

// ---- the file's structure ----

// A copy of `file` in memory, with `edit` deciding per tensor: return false to drop it
// (after adding replacements to the writer, or not).
template <typename Edit>
gguf::File rewrite(const gguf::File& file, Edit edit) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.metadata()) w.set(kv.key, kv.value);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!edit(t, w)) continue;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::span<const uint8_t>(t.data, t.n_bytes));
  }
  Result<gguf::File> f = gguf::File::from_bytes(w.to_bytes(), "edited.gguf");
  EXPECT_TRUE(f.ok()) << f.error().message;
  return std::move(*f);
}

// Every row of the prompt on an F32 cache of 512 (long factors).
std::vector<float> prompt_logits(const gguf::File& file) {
  Result<std::unique_ptr<Model>> m = models::load_model(file);
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (!m.ok()) return {};
  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(**m, 512, DType::kF32);
  EXPECT_TRUE(kv.ok());
  std::vector<float> logits(kPrompt.size() * static_cast<size_t>((*m)->hparams().n_vocab));
  EXPECT_TRUE((*m)->forward(be, kPrompt, 0, *kv, true, logits.data()).ok());
  return logits;
}

std::string load_error(const gguf::File& file) {
  Result<std::unique_ptr<Model>> m = models::load_model(file);
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.error().message;
}

class Phi3File : public testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> f = gguf::File::open(synth_phi3());
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::make_unique<gguf::File>(std::move(*f));
  }
  std::unique_ptr<gguf::File> file_;
};

// Q, K and V as three tensors, cut from attn_qkv's rows in the order Q, K, V, give the
// same bits as the views of the fused one; so do their biases, cut from attn_qkv.bias.
TEST_F(Phi3File, SeparateQkvTensorsGiveTheFusedResult) {
  const int64_t n_q = 64, n_kv = 32;  // tiny: 4 heads and 2 KV heads of 16
  std::vector<float> bias(static_cast<size_t>(n_q + 2 * n_kv));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 5) * 0.3f - 0.6f;
  const auto bytes = [&](int64_t first, int64_t n) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bias.data() + first),
                                    static_cast<size_t>(n) * sizeof(float));
  };
  const std::string suffix = "attn_qkv.weight";
  const auto prefix = [&](const std::string& name) {
    return name.substr(0, name.size() - suffix.size());
  };
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "with attn_qkv.bias" : "without biases");
    const gguf::File fused = rewrite(*file_, [&](const gguf::TensorInfo& t, gguf::Writer& w) {
      if (with_bias && t.name.ends_with(suffix))
        w.add_tensor(prefix(t.name) + "attn_qkv.bias", DType::kF32, {n_q + 2 * n_kv},
                     bytes(0, n_q + 2 * n_kv));
      return true;
    });
    const gguf::File split = rewrite(*file_, [&](const gguf::TensorInfo& t, gguf::Writer& w) {
      if (!t.name.ends_with(suffix)) return true;
      const std::string p = prefix(t.name);
      const size_t row = t.n_bytes / static_cast<size_t>(t.ne[1]);
      const auto part = [&](const char* name, int64_t first, int64_t n) {
        w.add_tensor(p + name + ".weight", t.type, {t.ne[0], n},
                     std::span<const uint8_t>(t.data + row * first, row * n));
        if (with_bias) w.add_tensor(p + name + ".bias", DType::kF32, {n}, bytes(first, n));
      };
      part("attn_q", 0, n_q);
      part("attn_k", n_q, n_kv);
      part("attn_v", n_q + n_kv, n_kv);
      return false;
    });
    ASSERT_EQ(split.find_tensor("blk.1.attn_qkv.weight"), nullptr);
    const std::vector<float> a = prompt_logits(fused);
    const std::vector<float> b = prompt_logits(split);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    // The biases are used: they change the result.
    if (with_bias) {
      EXPECT_NE(a, prompt_logits(*file_));
    }
  }
}

// output.bias is added to every logits row.
TEST_F(Phi3File, OutputBiasIsAdded) {
  const int64_t n_vocab = 32064;
  std::vector<float> bias(static_cast<size_t>(n_vocab));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  const gguf::File biased = rewrite(*file_, [&](const gguf::TensorInfo& t, gguf::Writer& w) {
    if (t.name == "output.weight") {
      w.add_tensor("output.bias", DType::kF32, {n_vocab},
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bias.data()),
                                            bias.size() * sizeof(float)));
    }
    return true;
  });
  const std::vector<float> plain = prompt_logits(*file_);
  const std::vector<float> got = prompt_logits(biased);
  ASSERT_EQ(plain.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], plain[i] + bias[i % static_cast<size_t>(n_vocab)]) << "logit " << i;
  }
}

TEST_F(Phi3File, MissingOrMisshapenFusedTensorsAreNamed) {
  std::string e = load_error(rewrite(*file_, [](const gguf::TensorInfo& t, gguf::Writer&) {
    return t.name != "blk.1.attn_qkv.weight";
  }));
  EXPECT_NE(e.find("'blk.1.attn_qkv.weight' is missing"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  // An ffn_up of n_ff rows (a llama-style up without the gate half).
  e = load_error(rewrite(*file_, [](const gguf::TensorInfo& t, gguf::Writer& w) {
    if (t.name != "blk.0.ffn_up.weight") return true;
    w.add_tensor(t.name, t.type, {t.ne[0], t.ne[1] / 2},
                 std::span<const uint8_t>(t.data, t.n_bytes / 2));
    return false;
  }));
  EXPECT_NE(e.find("'blk.0.ffn_up.weight' has shape [64, 128], expected [64, 256]"),
            std::string::npos)
      << e;

  // Long factors of the wrong length.
  e = load_error(rewrite(*file_, [](const gguf::TensorInfo& t, gguf::Writer& w) {
    if (t.name != "rope_factors_long.weight") return true;
    w.add_tensor(t.name, t.type, {t.ne[0] - 1}, std::span<const uint8_t>(t.data, t.n_bytes - 4));
    return false;
  }));
  EXPECT_NE(e.find("'rope_factors_long.weight' has shape [7], expected [8]"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace qrun
