// The qwen2 and qwen3 architectures. Verified: (1) against llama.cpp's logits and greedy
// tokens on models `qrun synth` writes (qwen2; qwen3 with head_dim != n_embd / n_head;
// references in tests/data, see its README); (2) against a double-precision forward pass
// written here from the architectures' definitions (biases; per-head Q/K RMS norm before
// neox RoPE; head_dim != n_embd / n_head). Not verified: a real Qwen2 or Qwen3 checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
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

// ---- against llama.cpp ----

TEST(Qwen2, MatchesLlamaCppOnASyntheticModel) {
  // Measured (QRUN_FORCE_ISA=generic, avx2, avx512 alike): the prompt rows agree to ~1e-13,
  // the decode rows to 1e-11 .. 6e-8: F16 roundings of K or V flipped by llama.cpp's other
  // F32 summation order. Neox vs normal RoPE, or a dropped Q bias, gives ~1e-2.
  test::expect_synth_matches_llamacpp(
      "--arch qwen2 --like tiny --tied --type f32 --std 0.1 --seed 7", 8234809583934069454ull,
      "qwen2_tiny_llamacpp.txt", 1e-6);
}

// Heads of 32 in an embedding of 64 (4 heads): n_head * head_dim != n_embd, as in Qwen3.
// Measured: rows agree to 3e-14 .. 1.4e-8 (as qwen2's).
TEST(Qwen3, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch qwen3 --like tiny --head-dim 32 --tied --type f32 --std 0.1 --seed 7",
      9932835067913179413ull, "qwen3_tiny_llamacpp.txt", 1e-6);
}

// YaRN (rope.scaling.type yarn, factor 8, original context 4096 of 8192): of each head's 16
// pairs, 0 .. 4 keep their unscaled angles, 5 .. 12 ramp to the interpolated ones (the
// range from yarn_beta_fast 32 and yarn_beta_slow 1), 13 .. 15 are interpolated, and cos
// and sin are scaled by 1 + 0.1 ln 8. Measured (generic, avx2, avx512): every row within
// 3e-8. Without the mix 0.81, without the magnitude correction 0.17, the ramp's first pair
// one later 2.3e-4, its last one later 8.7e-6.
TEST(Qwen3, YarnMatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch qwen3 --like tiny --head-dim 32 --tied --rope-scaling yarn --rope-factor 8 "
      "--ctx 8192 --orig-ctx 4096 --type f32 --std 0.1 --seed 7",
      8661467203956149507ull, "qwen3_yarn_llamacpp.txt", 1e-6);
}

// ---- qwen2 and qwen3 against a forward pass written here ----

// A small model built in memory with F32 weights (std 0.3, so attention is far from uniform).
struct Spec {
  std::string arch;
  int64_t n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 8, n_ff = 48;
  int64_t n_vocab = 40;
  bool qkv_bias = false, qk_norm = false;
  std::string drop;  // a tensor to leave out
};

struct Weights {  // by name, F32 values in GGML order (rows of shape[0] elements)
  std::map<std::string, std::vector<float>> t;
  const std::vector<float>& operator[](const std::string& name) const { return t.at(name); }
};

Result<gguf::File> build(const Spec& s, Weights* weights) {
  gguf::Writer w;
  const std::string& a = s.arch;
  w.set_string("general.architecture", a);
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32(a + ".context_length", 64);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32(a + ".rope.freq_base", 1000.0f);
  std::mt19937 rng(1234);
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, float center) {
    if (name == s.drop) return;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> d(center, 0.3f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(name, DType::kF32, shape, bytes);
    weights->t[name] = std::move(v);
  };
  const int64_t n_q = s.n_head * s.head_dim, n_kv = s.n_head_kv * s.head_dim;
  add("token_embd.weight", {s.n_embd, s.n_vocab}, 0.0f);
  add("output_norm.weight", {s.n_embd}, 1.0f);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, 1.0f);
    add(p + "attn_q.weight", {s.n_embd, n_q}, 0.0f);
    add(p + "attn_k.weight", {s.n_embd, n_kv}, 0.0f);
    add(p + "attn_v.weight", {s.n_embd, n_kv}, 0.0f);
    if (s.qkv_bias) {
      add(p + "attn_q.bias", {n_q}, 0.0f);
      add(p + "attn_k.bias", {n_kv}, 0.0f);
      add(p + "attn_v.bias", {n_kv}, 0.0f);
    }
    if (s.qk_norm) {
      add(p + "attn_q_norm.weight", {s.head_dim}, 1.0f);
      add(p + "attn_k_norm.weight", {s.head_dim}, 1.0f);
    }
    add(p + "attn_output.weight", {n_q, s.n_embd}, 0.0f);
    add(p + "ffn_norm.weight", {s.n_embd}, 1.0f);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, 0.0f);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, 0.0f);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, 0.0f);
  }
  return gguf::File::from_bytes(w.to_bytes(), "qwen.gguf");
}

using Vec = std::vector<double>;

// y = W x for W with rows of x.size() elements (GGML [n_in, n_out]).
Vec matvec(const std::vector<float>& w, const Vec& x) {
  Vec y(w.size() / x.size());
  for (size_t o = 0; o < y.size(); ++o)
    for (size_t i = 0; i < x.size(); ++i) y[o] += double{w[o * x.size() + i]} * x[i];
  return y;
}

// RMS norm of x[off .. off + n) times weight, in place.
void rms_norm(Vec& x, size_t off, size_t n, const std::vector<float>& weight, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[off + i] *= scale * weight[i];
}

// Neox RoPE of every head of x (heads of head_dim) at position p: pairs (i, i + head_dim/2).
void rope_neox(Vec& x, int64_t head_dim, int64_t p, double base) {
  const int64_t half = head_dim / 2;
  for (size_t h = 0; h < x.size() / static_cast<size_t>(head_dim); ++h) {
    double* v = x.data() + h * static_cast<size_t>(head_dim);
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(p) * std::pow(base, -2.0 * i / double(head_dim));
      const double a = v[i], b = v[i + half];
      v[i] = a * std::cos(theta) - b * std::sin(theta);
      v[i + half] = a * std::sin(theta) + b * std::cos(theta);
    }
  }
}

// Logits of every token, computed from the definitions in double.
std::vector<Vec> reference_forward(const Spec& s, const Weights& w,
                                   const std::vector<int32_t>& tokens) {
  const double eps = 1e-6;
  const auto n = tokens.size();
  const auto hd = static_cast<size_t>(s.head_dim);
  std::vector<Vec> x(n);
  for (size_t t = 0; t < n; ++t) {
    const auto& e = w["token_embd.weight"];
    x[t].assign(e.begin() + tokens[t] * s.n_embd, e.begin() + (tokens[t] + 1) * s.n_embd);
  }
  const auto add_to = [](Vec& y, const std::vector<float>& b) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
  };
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      Vec xn = x[t];
      rms_norm(xn, 0, xn.size(), w[p + "attn_norm.weight"], eps);
      q[t] = matvec(w[p + "attn_q.weight"], xn);
      k[t] = matvec(w[p + "attn_k.weight"], xn);
      v[t] = matvec(w[p + "attn_v.weight"], xn);
      if (s.qkv_bias) {
        add_to(q[t], w[p + "attn_q.bias"]);
        add_to(k[t], w[p + "attn_k.bias"]);
        add_to(v[t], w[p + "attn_v.bias"]);
      }
      if (s.qk_norm) {
        for (size_t h = 0; h < static_cast<size_t>(s.n_head); ++h)
          rms_norm(q[t], h * hd, hd, w[p + "attn_q_norm.weight"], eps);
        for (size_t h = 0; h < static_cast<size_t>(s.n_head_kv); ++h)
          rms_norm(k[t], h * hd, hd, w[p + "attn_k_norm.weight"], eps);
      }
      rope_neox(q[t], s.head_dim, static_cast<int64_t>(t), 1000.0);
      rope_neox(k[t], s.head_dim, static_cast<int64_t>(t), 1000.0);
    }
    for (size_t t = 0; t < n; ++t) {
      // Causal softmax attention; query head h reads KV head h / (n_head / n_head_kv).
      Vec attn(static_cast<size_t>(s.n_head) * hd);
      for (size_t h = 0; h < static_cast<size_t>(s.n_head); ++h) {
        const size_t kh = h / static_cast<size_t>(s.n_head / s.n_head_kv);
        Vec score(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t u = 0; u <= t; ++u) {
          for (size_t i = 0; i < hd; ++i) score[u] += q[t][h * hd + i] * k[u][kh * hd + i];
          score[u] /= std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, score[u]);
        }
        for (double& sc : score) sum += (sc = std::exp(sc - mx));
        for (size_t u = 0; u <= t; ++u)
          for (size_t i = 0; i < hd; ++i) attn[h * hd + i] += score[u] / sum * v[u][kh * hd + i];
      }
      const Vec o = matvec(w[p + "attn_output.weight"], attn);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
      Vec xn = x[t];
      rms_norm(xn, 0, xn.size(), w[p + "ffn_norm.weight"], eps);
      Vec g = matvec(w[p + "ffn_gate.weight"], xn);
      const Vec up = matvec(w[p + "ffn_up.weight"], xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
      const Vec d = matvec(w[p + "ffn_down.weight"], g);
      for (size_t i = 0; i < d.size(); ++i) x[t][i] += d[i];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) {
    Vec xn = x[t];
    rms_norm(xn, 0, xn.size(), w["output_norm.weight"], eps);
    logits[t] = matvec(w["token_embd.weight"], xn);  // tied output
  }
  return logits;
}

// qrun's logits for `tokens` (F32 cache; prompt then one token at a time to cover decode).
std::vector<float> qrun_logits(Model& model, const std::vector<int32_t>& tokens) {
  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(model, 0, DType::kF32);
  EXPECT_TRUE(kv.ok());
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<float> out(tokens.size() * static_cast<size_t>(n_vocab));
  const size_t split = tokens.size() / 2;
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(split));
  EXPECT_TRUE(model.forward(be, head, 0, *kv, true, out.data()).ok());
  for (size_t t = split; t < tokens.size(); ++t) {
    const std::vector<int32_t> one = {tokens[t]};
    EXPECT_TRUE(
        model.forward(be, one, static_cast<int64_t>(t), *kv, false, out.data() + t * n_vocab).ok());
  }
  return out;
}

void expect_matches_reference(const Spec& s) {
  Weights w;
  Result<gguf::File> file = build(s, &w);
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ((*model)->hparams().head_dim, s.head_dim);
  const std::vector<int32_t> tokens = {1, 7, 39, 0, 22, 22, 5, 13, 30};
  const std::vector<float> got = qrun_logits(**model, tokens);
  const std::vector<Vec> want = reference_forward(s, w, tokens);
  for (size_t t = 0; t < tokens.size(); ++t) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < s.n_vocab; ++i) {
      const double d = got[t * static_cast<size_t>(s.n_vocab) + static_cast<size_t>(i)] -
                       want[t][static_cast<size_t>(i)];
      num += d * d;
      den += want[t][static_cast<size_t>(i)] * want[t][static_cast<size_t>(i)];
    }
    // F32 weights and activations against double: rounding only.
    EXPECT_LT(num / den, 1e-10) << "token " << t;
  }
}

TEST(Qwen2, MatchesHandWrittenForward) {
  Spec s;
  s.arch = "qwen2";
  s.qkv_bias = true;
  expect_matches_reference(s);
}

TEST(Qwen3, MatchesHandWrittenForward) {
  Spec s;
  s.arch = "qwen3";
  s.qk_norm = true;
  expect_matches_reference(s);
  s.head_dim = 12;  // n_head * head_dim = 48 != n_embd = 32, as in Qwen3 checkpoints
  expect_matches_reference(s);
}

// The hand reference would pass with the norms unused if they were ones; they are not,
// and removing them must change the output.
TEST(Qwen3, NormsChangeTheOutput) {
  Spec with;
  with.arch = "qwen3";
  with.qk_norm = true;
  Weights w;
  Result<gguf::File> f = build(with, &w);
  ASSERT_TRUE(f.ok());
  Result<std::unique_ptr<Model>> m = models::load_model(*f);
  ASSERT_TRUE(m.ok()) << m.error().message;
  Spec without = with;
  without.arch = "llama";  // same weights, no norms, normal RoPE: the llama graph
  without.qk_norm = false;
  Weights w2;
  Result<gguf::File> f2 = build(without, &w2);
  ASSERT_TRUE(f2.ok());
  Result<std::unique_ptr<Model>> m2 = models::load_model(*f2);
  ASSERT_TRUE(m2.ok()) << m2.error().message;
  const std::vector<int32_t> tokens = {3, 4, 5, 6};
  const std::vector<float> a = qrun_logits(**m, tokens);
  EXPECT_EQ(a, qrun_logits(**m, tokens));  // deterministic
  EXPECT_NE(a, qrun_logits(**m2, tokens));
}

// ---- errors ----

Error load_error(const Spec& s) {
  Weights w;
  Result<gguf::File> f = build(s, &w);
  EXPECT_TRUE(f.ok());
  Result<std::unique_ptr<Model>> m = models::load_model(*f);
  EXPECT_FALSE(m.ok());
  return m.ok() ? Error{} : m.error();
}

TEST(QwenErrors, MissingBiasOrNormIsOneLineNamingTheTensor) {
  Spec q2;
  q2.arch = "qwen2";
  q2.qkv_bias = true;
  q2.drop = "blk.1.attn_k.bias";
  Error e = load_error(q2);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("qwen.gguf"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("'blk.1.attn_k.bias' is missing"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;

  Spec q3;
  q3.arch = "qwen3";
  q3.qk_norm = true;
  q3.drop = "blk.0.attn_q_norm.weight";
  e = load_error(q3);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("'blk.0.attn_q_norm.weight' is missing"), std::string::npos)
      << e.message;

  // Tensors an architecture does not have are refused, not ignored.
  Spec llama_with_bias = q2;
  llama_with_bias.arch = "llama";
  llama_with_bias.drop.clear();
  e = load_error(llama_with_bias);
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
  EXPECT_NE(e.message.find("blk.0.attn_q.bias"), std::string::npos) << e.message;
  Spec qwen2_with_norms = q3;
  qwen2_with_norms.arch = "qwen2";
  qwen2_with_norms.qkv_bias = true;
  qwen2_with_norms.drop.clear();
  e = load_error(qwen2_with_norms);
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
  EXPECT_NE(e.message.find("blk.0.attn_q_norm.weight"), std::string::npos) << e.message;
}

// ---- qrun synth ----

TEST(QwenSynth, Qwen3WithWideHeadsLoadsAndRunsDeterministically) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string path = (dir / "qwen3.gguf").string();
  const test::CommandResult r = test::run_command(
      test::qrun_binary().string() +
      " synth --arch qwen3 --like tiny --head-dim 32 --tied --type q8_0 --std 0.1 --vocab " +
      test::data_path("vocab/ggml-vocab-gpt-2.gguf").string() + " -o " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result<gguf::File> file = gguf::File::open(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  ASSERT_NE(file->find_tensor("blk.1.attn_k_norm.weight"), nullptr);
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch, "qwen3");
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.n_embd, 64);
  const std::vector<int32_t> tokens = {15496, 995, 11, 257, 1332};
  const std::vector<float> a = qrun_logits(**model, tokens);
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(a, qrun_logits(**model, tokens));

  // A qwen2 synth has its biases.
  const std::string path2 = (dir / "qwen2.gguf").string();
  ASSERT_EQ(test::run_command(test::qrun_binary().string() +
                              " synth --arch qwen2 --like tiny --type q4_0 -o " + path2)
                .exit_code,
            0);
  Result<gguf::File> f2 = gguf::File::open(path2);
  ASSERT_TRUE(f2.ok());
  EXPECT_NE(f2->find_tensor("blk.0.attn_v.bias"), nullptr);
  EXPECT_TRUE(models::load_model(*f2).ok());
}

}  // namespace
}  // namespace qrun
