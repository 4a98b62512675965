// Mixture-of-experts feed-forward blocks (models/moe.h): qwen3moe, qwen2moe, olmoe and
// Mixtral-style llama files. Verified: (1) against llama.cpp's logits and greedy tokens on models
// `qrun synth` writes (tests/data, see its README); (2) moe_ffn against a double-precision block
// written here from the definition, on many tokens so that experts get several tokens each; (3) the
// load errors of malformed expert files. Not verified: a real MoE checkpoint (the smallest,
// OLMoE-1B-7B and Qwen3-30B-A3B, are gigabytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/common_blocks.h"
#include "models/moe.h"
#include "models/registry.h"
#include "tests/support/llamacpp_rows.h"
#include "tests/support/recording_backend.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

// ---- against llama.cpp ----

// 8 experts, 2 used, experts 96 wide in a model whose feed_forward_length is 128: the
// experts' width must come from expert_feed_forward_length. Measured (QRUN_FORCE_ISA=generic,
// avx2, avx512 alike): prompt rows within 4e-14 .. 7e-10 of llama.cpp's, decode rows up to
// 2.1e-7 (F16 roundings of K or V flipped by llama.cpp's other F32 summation order, as in
// the dense tests). Weights left unnormalized give 1e-6 .. 2e-5 on every row; the least
// probable experts instead of the most, 0.2 .. 1.2.
TEST(Qwen3Moe, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch qwen3moe --like tiny --head-dim 32 --expert-ff 96 "
      "--tied --type f32 --std 0.1 --seed 7",
      903044548743429034ull, "qwen3moe_tiny_llamacpp.txt", 1e-6);
}

// Mixtral's shape: a llama file with llama.expert_count, Q8_0 experts (each expert's matrix
// a slice of one 3-D tensor). Measured (generic, avx2, avx512): every row within 7e-15.
TEST(LlamaMoe, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch llama --like tiny --experts 4 --experts-used 2 --type q8_0 --std 0.1 --seed 7",
      17983087337072689638ull, "llama_moe_tiny_llamacpp.txt", 1e-6);
}

// Qwen2-MoE: Qwen2's attention biases, Q8_0 experts whose weights are the chosen experts'
// probabilities as they are (not renormalized), and a shared expert 160 wide with an F32
// one-row gate, added after the routed experts weighted by its gate's sigmoid. Measured
// (generic, avx2, avx512): every row within 6e-15. Renormalized weights give 9e-3; the
// shared expert's weight 1 % low, 1.2e-4.
TEST(Qwen2Moe, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch qwen2moe --like tiny --expert-ff 96 --shared-expert-ff 160 --type q8_0 --std 0.1 "
      "--seed 7",
      15089405960182310242ull, "qwen2moe_tiny_llamacpp.txt", 1e-6);
}

// OLMoE: RMS norms over each token's whole Q and K rows (llama.cpp's olmoe has no GQA, so
// K has n_head heads), Q8_0 experts as wide as feed_forward_length, weights not
// renormalized. Measured (generic, avx2, avx512): every row within 5.1e-15; renormalized
// weights give 1.2e-2.
TEST(Olmoe, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch olmoe --like tiny --n-head-kv 4 --type q8_0 --std 0.1 --seed 7",
      8354838422586894233ull, "olmoe_tiny_llamacpp.txt", 1e-6);
}

// ---- moe_ffn against a block written here ----

struct MoeBlock {
  ModelHparams hp;
  std::vector<float> router, gate, up, down;  // GGML order, F32
  // The shared expert, after add_shared_expert
  std::vector<float> sh_gate_inp, sh_gate, sh_up, sh_down;
  models::MoeWeights w;

  MoeBlock(int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t k, uint32_t seed) {
    hp.arch = "qwen3moe";
    hp.n_embd = n_embd;
    hp.n_ff_exp = n_ff;
    hp.n_expert = n_expert;
    hp.n_expert_used = k;
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.3f);
    const auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      for (float& x : v) x = d(rng);
    };
    fill(router, n_embd * n_expert);
    fill(gate, n_embd * n_ff * n_expert);
    fill(up, n_embd * n_ff * n_expert);
    fill(down, n_ff * n_embd * n_expert);
    w.gate_inp = tensor(router, {n_embd, n_expert, 1});
    w.gate_exps = tensor(gate, {n_embd, n_ff, n_expert});
    w.up_exps = tensor(up, {n_embd, n_ff, n_expert});
    w.down_exps = tensor(down, {n_ff, n_embd, n_expert});
  }

  // Qwen2-MoE's form: a shared expert n_ff_sh wide, and the chosen experts' weights as
  // they are. The gate spreads wide so that its sigmoid spans (0, 1) over the tokens.
  void add_shared_expert(int64_t n_ff_sh, uint32_t seed) {
    hp.n_ff_shexp = n_ff_sh;
    hp.expert_weights_norm = false;
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.3f);
    const auto fill = [&](std::vector<float>& v, int64_t n, float scale) {
      v.resize(static_cast<size_t>(n));
      for (float& x : v) x = scale * d(rng);
    };
    fill(sh_gate_inp, hp.n_embd, 3.0f);
    fill(sh_gate, hp.n_embd * n_ff_sh, 1.0f);
    fill(sh_up, hp.n_embd * n_ff_sh, 1.0f);
    fill(sh_down, n_ff_sh * hp.n_embd, 1.0f);
    w.gate_inp_shexp = tensor(sh_gate_inp, {hp.n_embd, 1, 1});
    w.gate_shexp = tensor(sh_gate, {hp.n_embd, n_ff_sh, 1});
    w.up_shexp = tensor(sh_up, {hp.n_embd, n_ff_sh, 1});
    w.down_shexp = tensor(sh_down, {n_ff_sh, hp.n_embd, 1});
  }

  static Tensor tensor(const std::vector<float>& v, std::array<int64_t, 3> ne) {
    Tensor t;
    t.type = DType::kF32;
    t.n_dims = ne[2] > 1 ? 3 : 2;
    t.ne = {ne[0], ne[1], ne[2], 1};
    t.data = v.data();
    return t;
  }

  // The block's output for one token, in double, from the definition.
  std::vector<double> reference(const float* x) const {
    const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff_exp, n_exp = hp.n_expert;
    std::vector<double> p(static_cast<size_t>(n_exp));
    for (int64_t e = 0; e < n_exp; ++e) {
      double s = 0;
      for (int64_t i = 0; i < n_embd; ++i) s += double(router[e * n_embd + i]) * x[i];
      p[e] = s;
    }
    const double max = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += v = std::exp(v - max);
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(static_cast<size_t>(n_exp));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < hp.n_expert_used; ++j) chosen += p[order[j]];
    if (!hp.expert_weights_norm) chosen = 1.0;
    std::vector<double> out(static_cast<size_t>(n_embd), 0.0);
    for (int64_t j = 0; j < hp.n_expert_used; ++j) {
      const int64_t e = order[j];
      std::vector<double> h(static_cast<size_t>(n_ff));
      for (int64_t f = 0; f < n_ff; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < n_embd; ++i) {
          g += double(gate[(e * n_ff + f) * n_embd + i]) * x[i];
          u += double(up[(e * n_ff + f) * n_embd + i]) * x[i];
        }
        h[f] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < n_embd; ++o) {
        double s = 0;
        for (int64_t f = 0; f < n_ff; ++f) s += double(down[(e * n_embd + o) * n_ff + f]) * h[f];
        out[o] += p[e] / chosen * s;
      }
    }
    if (hp.n_ff_shexp > 0) {
      const int64_t n_sh = hp.n_ff_shexp;
      double g_logit = 0;
      for (int64_t i = 0; i < n_embd; ++i) g_logit += double(sh_gate_inp[i]) * x[i];
      const double weight = 1 / (1 + std::exp(-g_logit));
      std::vector<double> h(static_cast<size_t>(n_sh));
      for (int64_t f = 0; f < n_sh; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < n_embd; ++i) {
          g += double(sh_gate[f * n_embd + i]) * x[i];
          u += double(sh_up[f * n_embd + i]) * x[i];
        }
        h[f] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < n_embd; ++o) {
        double s = 0;
        for (int64_t f = 0; f < n_sh; ++f) s += double(sh_down[o * n_sh + f]) * h[f];
        out[o] += weight * s;
      }
    }
    return out;
  }
};

// 37 tokens over 8 experts with 3 each: every expert gets several tokens, in groups that
// do not follow token order. Each token's output must be its own block's, whatever tokens
// share the step.
TEST(MoeFfn, MatchesTheDefinitionOnManyTokens) {
  const int64_t n = 37;
  MoeBlock b(48, 40, 8, 3, 11);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * b.hp.n_embd));
  for (float& v : x) v = d(rng);

  kernels::CpuBackend be(2);
  models::MoeScratch scratch;
  scratch.allocate(b.hp, 64);
  std::vector<float> out(x.size());
  models::moe_ffn(be, b.w, b.hp, x.data(), n, scratch, out.data());
  std::vector<float> one(static_cast<size_t>(b.hp.n_embd));
  for (int64_t t = 0; t < n; ++t) {
    SCOPED_TRACE(testing::Message() << "token " << t);
    const std::vector<double> ref = b.reference(x.data() + t * b.hp.n_embd);
    double num = 0, den = 0;
    for (int64_t i = 0; i < b.hp.n_embd; ++i) {
      const double e = out[t * b.hp.n_embd + i] - ref[i];
      num += e * e;
      den += ref[i] * ref[i];
    }
    // F32 sums of 48 and 40 products against double: measured 4e-14 (generic) .. 1.5e-13
    // (avx2, avx512).
    EXPECT_LT(num / den, 1e-10);
    // The token alone gives the same bits as in the batch (F32 weights: no gemm tiles).
    models::moe_ffn(be, b.w, b.hp, x.data() + t * b.hp.n_embd, 1, scratch, one.data());
    EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + t * b.hp.n_embd));
  }
  // In place, as the models call it.
  models::moe_ffn(be, b.w, b.hp, x.data(), n, scratch, x.data());
  EXPECT_EQ(x, out);
}

// Qwen2-MoE's block: a shared expert weighted by its gate's sigmoid, routed weights left
// unnormalized, on one token (its products joined with the experts'), on two tokens whose
// experts differ (one row each, the shared expert run apart; the second token is the first
// negated, so the router ranks its experts in reverse) and on many; each token as in the
// definition, and alone the same bits as in a batch.
TEST(MoeFfn, SharedExpertMatchesTheDefinition) {
  MoeBlock b(48, 40, 8, 3, 21);
  b.add_shared_expert(56, 22);
  std::mt19937 rng(6);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t n_max = 37;
  std::vector<float> x(static_cast<size_t>(n_max * b.hp.n_embd));
  for (float& v : x) v = d(rng);
  for (int64_t i = 0; i < b.hp.n_embd; ++i) x[b.hp.n_embd + i] = -x[i];
  kernels::CpuBackend cpu(2);
  test::RecordingBackend be(cpu);
  models::MoeScratch scratch;
  scratch.allocate(b.hp, 64);
  std::vector<float> out(x.size());
  std::vector<float> one(static_cast<size_t>(b.hp.n_embd));
  for (int64_t n : {int64_t{1}, int64_t{2}, n_max}) {
    const int64_t gathers = be.count("gather_rows");
    models::moe_ffn(be, b.w, b.hp, x.data(), n, scratch, out.data());
    // Rows are gathered only where an expert has several.
    EXPECT_EQ(be.count("gather_rows") - gathers, n == n_max ? 1 : 0) << n << " tokens";
    for (int64_t t = 0; t < n; ++t) {
      SCOPED_TRACE(testing::Message() << n << " tokens, token " << t);
      const std::vector<double> ref = b.reference(x.data() + t * b.hp.n_embd);
      double num = 0, den = 0;
      for (int64_t i = 0; i < b.hp.n_embd; ++i) {
        const double e = out[t * b.hp.n_embd + i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
      }
      // As above, F32 sums against double: measured 4e-14 (generic) .. 1e-13 (avx2, avx512).
      EXPECT_LT(num / den, 1e-10);
      models::moe_ffn(be, b.w, b.hp, x.data() + t * b.hp.n_embd, 1, scratch, one.data());
      EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + t * b.hp.n_embd));
    }
  }
}

// The warm-up's all-experts mode is the block with every expert used, even when the
// scratch was sized for n_batch 1 and fewer experts than there are.
TEST(MoeFfn, WarmUpRunsEveryExpert) {
  MoeBlock b(32, 24, 6, 2, 3);
  std::vector<float> x(32);
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = d(rng);
  kernels::CpuBackend be(1);
  models::MoeScratch scratch;
  scratch.allocate(b.hp, 1);
  std::vector<float> out(32);
  models::moe_ffn(be, b.w, b.hp, x.data(), 1, scratch, out.data(), true);
  MoeBlock all = b;
  all.hp.n_expert_used = 6;
  const std::vector<double> ref = all.reference(x.data());
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_NEAR(out[i], ref[i], 1e-5 * std::abs(ref[i]) + 1e-6);
}

// The default row moves: gather, and the weighted sum in slot order with rounded products.
TEST(MoeFfn, BackendRowMovesFollowTheirContract) {
  kernels::CpuBackend be(1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const std::vector<int32_t> rows = {2, 0, 2, 1};
  std::vector<float> g(8);
  be.gather_rows(x.data(), 2, rows, g.data());
  EXPECT_EQ(g, (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  const std::vector<float> w = {0.5f, 0.25f, 1.0f, 2.0f};
  std::vector<float> out(4);
  be.weighted_row_sum(x.data(), 2, rows, w, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f * 5 + 0.25f * 1, 0.5f * 6 + 0.25f * 2, 5 + 2.0f * 3,
                                     6 + 2.0f * 4}));
}

// ---- load errors ----

// The load error of a tiny qwen3moe or llama-MoE file written here ("" if it loads), with
// `extra` tensors added and `drop` left out. n_expert 0: no expert keys.
std::string load_error(const std::string& arch, int64_t n_expert, int64_t n_used,
                       const std::function<void(gguf::Writer&)>& extra = {},
                       const std::string& drop = "") {
  gguf::Writer w;
  const int64_t n_embd = 32, n_ff = 16, n_vocab = 16;
  w.set_string("general.architecture", arch);
  w.set_u32(arch + ".embedding_length", n_embd);
  w.set_u32(arch + ".block_count", 1);
  w.set_u32(arch + ".feed_forward_length", n_ff);
  w.set_u32(arch + ".attention.head_count", 2);
  w.set_u32(arch + ".context_length", 64);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (n_expert > 0) {
    w.set_u32(arch + ".expert_count", static_cast<uint32_t>(n_expert));
    w.set_u32(arch + ".expert_used_count", static_cast<uint32_t>(n_used));
  }
  if (arch == "qwen3moe" || arch == "qwen2moe")
    w.set_u32(arch + ".expert_feed_forward_length", n_ff);
  const int64_t n_tensors = n_expert > 0 ? n_expert : 4;  // expert tensors of a count-less file
  const auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    if (name == drop) return;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w.add_tensor(name, DType::kF32, shape, std::vector<uint8_t>(static_cast<size_t>(n) * 4, 0));
  };
  add("token_embd.weight", {n_embd, n_vocab});
  add("output_norm.weight", {n_embd});
  add("blk.0.attn_norm.weight", {n_embd});
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
    add(std::string("blk.0.") + m + ".weight", {n_embd, n_embd});
  if (arch == "qwen3moe") {
    add("blk.0.attn_q_norm.weight", {16});
    add("blk.0.attn_k_norm.weight", {16});
  }
  add("blk.0.ffn_norm.weight", {n_embd});
  add("blk.0.ffn_gate_inp.weight", {n_embd, n_tensors});
  add("blk.0.ffn_gate_exps.weight", {n_embd, n_ff, n_tensors});
  add("blk.0.ffn_up_exps.weight", {n_embd, n_ff, n_tensors});
  add("blk.0.ffn_down_exps.weight", {n_ff, n_embd, n_tensors});
  if (arch == "qwen2moe") {  // biases and a shared expert n_ff wide (no width key)
    for (const char* b : {"attn_q", "attn_k", "attn_v"})
      add(std::string("blk.0.") + b + ".bias", {n_embd});
    add("blk.0.ffn_gate_inp_shexp.weight", {n_embd});
    add("blk.0.ffn_gate_shexp.weight", {n_embd, n_ff});
    add("blk.0.ffn_up_shexp.weight", {n_embd, n_ff});
    add("blk.0.ffn_down_shexp.weight", {n_ff, n_embd});
  }
  if (extra) extra(w);
  const std::string path = (test::temp_dir() / "moe.gguf").string();
  if (!w.write(path).ok()) return "write failed";
  Result<gguf::File> file = gguf::File::open(path);
  if (!file.ok()) return file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  return model.ok() ? "" : model.error().message;
}

TEST(MoeLoad, ValidFilesLoadAndBadOnesNameWhatIsWrong) {
  EXPECT_EQ(load_error("qwen3moe", 4, 2), "");
  EXPECT_EQ(load_error("llama", 4, 1), "");
  EXPECT_EQ(load_error("qwen2moe", 4, 2), "");
  const auto has = [](const std::string& message, const char* what) {
    return message.find(what) != std::string::npos;
  };
  std::string e = load_error("qwen3moe", 4, 5);
  EXPECT_TRUE(has(e, "qwen3moe.expert_used_count")) << e;
  e = load_error("qwen3moe", 4, 0);
  EXPECT_TRUE(has(e, "qwen3moe.expert_used_count")) << e;
  e = load_error("qwen3moe", 1000, 2, {}, "blk.0.ffn_gate_exps.weight");
  EXPECT_TRUE(has(e, "qwen3moe.expert_count")) << e;
  e = load_error("qwen3moe", 4, 2, {}, "blk.0.ffn_up_exps.weight");
  EXPECT_TRUE(has(e, "blk.0.ffn_up_exps.weight")) << e;
  // qwen3moe requires the count; llama without it is dense, and its expert tensors refused.
  e = load_error("qwen3moe", 0, 0);
  EXPECT_TRUE(has(e, "qwen3moe.expert_count")) << e;
  e = load_error("llama", 0, 0);
  EXPECT_TRUE(has(e, "blk.0.ffn_gate_inp.weight")) << e;
  // Shared experts (qwen2moe-style) and old per-expert Mixtral tensors are refused by name.
  e = load_error("qwen3moe", 4, 2, [](gguf::Writer& w) {
    w.add_tensor("blk.0.ffn_up_shexp.weight", DType::kF32, {32, 16},
                 std::vector<uint8_t>(32 * 16 * 4, 0));
  });
  EXPECT_TRUE(has(e, "blk.0.ffn_up_shexp.weight") && has(e, "shared experts")) << e;
  e = load_error("llama", 4, 2, [](gguf::Writer& w) {
    w.add_tensor("blk.0.ffn_gate.0.weight", DType::kF32, {32, 16},
                 std::vector<uint8_t>(32 * 16 * 4, 0));
  });
  EXPECT_TRUE(has(e, "blk.0.ffn_gate.0.weight")) << e;
  // qwen2moe needs its shared expert, whole, of the feed-forward width.
  e = load_error("qwen2moe", 4, 2, {}, "blk.0.ffn_down_shexp.weight");
  EXPECT_TRUE(has(e, "blk.0.ffn_down_shexp.weight")) << e;
  e = load_error("qwen2moe", 4, 2, {}, "blk.0.ffn_gate_inp_shexp.weight");
  EXPECT_TRUE(has(e, "blk.0.ffn_gate_inp_shexp.weight")) << e;
}

}  // namespace
}  // namespace qrun
