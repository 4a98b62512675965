// Loading llama models: a tiny synthetic model written with the GGUF writer loads, its
// hyper-parameters read back, a tied output equals an explicit copy of token_embd, rope
// factors and linear scaling take effect; and every kind of bad file or bad call is a
// one-line Error with the right code naming the key or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"

namespace qrun {
namespace {

constexpr int64_t kEmbd = 32;
constexpr int64_t kLayers = 2;
constexpr int64_t kHeads = 4;
constexpr int64_t kHeadsKv = 2;
constexpr int64_t kFf = 48;
constexpr int64_t kVocab = 40;

struct Spec {
  std::string arch = "llama";
  bool tied = false;                         // omit output.weight
  bool output_copy = false;                  // output.weight = token_embd.weight
  std::string drop;                          // tensor to leave out
  std::string reshape;                       // tensor whose second dimension is halved
  std::string retype;                        // tensor stored as q8_1 (no weight type)
  std::string drop_key;                      // metadata key to leave out
  std::vector<float> rope_freqs;             // written when not empty
  std::map<std::string, gguf::Value> extra;  // extra or replaced metadata
};

std::vector<float> randoms(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Result<gguf::File> build(const Spec& s) {
  gguf::Writer w;
  std::map<std::string, gguf::Value> kv = {
      {"general.architecture", gguf::Value{s.arch}},
      {s.arch + ".embedding_length", gguf::Value{static_cast<uint32_t>(kEmbd)}},
      {s.arch + ".block_count", gguf::Value{static_cast<uint32_t>(kLayers)}},
      {s.arch + ".feed_forward_length", gguf::Value{static_cast<uint32_t>(kFf)}},
      {s.arch + ".attention.head_count", gguf::Value{static_cast<uint32_t>(kHeads)}},
      {s.arch + ".attention.head_count_kv", gguf::Value{static_cast<uint32_t>(kHeadsKv)}},
      {s.arch + ".context_length", gguf::Value{static_cast<uint32_t>(64)}},
      {s.arch + ".attention.layer_norm_rms_epsilon", gguf::Value{1e-5f}},
  };
  for (const auto& [k, v] : s.extra) kv[k] = v;
  for (const auto& [k, v] : kv) {
    if (k != s.drop_key) w.set(k, v);
  }
  uint32_t seed = 0;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    if (name == s.drop) return;
    if (name == s.reshape) shape[1] /= 2;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data = randoms(static_cast<size_t>(n), ++seed);
    if (name.find("norm") != std::string::npos) {
      for (float& x : data) x = 1.0f + x;
    }
    if (name == s.retype) {
      w.add_tensor(name, DType::kQ8_1, shape,
                   std::vector<uint8_t>(row_size(DType::kQ8_1, shape[0]) *
                                        static_cast<size_t>(n / shape[0])));
      return;
    }
    std::vector<uint8_t> bytes(data.size() * sizeof(float));
    std::memcpy(bytes.data(), data.data(), bytes.size());
    w.add_tensor(name, DType::kF32, shape, bytes);
  };
  add("token_embd.weight", {kEmbd, kVocab});
  if (s.output_copy) {
    seed = 0;  // regenerate token_embd's values
    const std::vector<float> data = randoms(static_cast<size_t>(kEmbd * kVocab), ++seed);
    std::vector<uint8_t> bytes(data.size() * sizeof(float));
    std::memcpy(bytes.data(), data.data(), bytes.size());
    w.add_tensor("output.weight", DType::kF32, {kEmbd, kVocab}, bytes);
  } else if (!s.tied) {
    add("output.weight", {kEmbd, kVocab});
  }
  add("output_norm.weight", {kEmbd});
  if (!s.rope_freqs.empty()) {
    std::vector<uint8_t> bytes(s.rope_freqs.size() * sizeof(float));
    std::memcpy(bytes.data(), s.rope_freqs.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", DType::kF32, {static_cast<int64_t>(s.rope_freqs.size())},
                 bytes);
  }
  const int64_t head_dim = kEmbd / kHeads;
  for (int il = 0; il < kLayers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {kEmbd});
    add(p + "attn_q.weight", {kEmbd, kEmbd});
    add(p + "attn_k.weight", {kEmbd, kHeadsKv * head_dim});
    add(p + "attn_v.weight", {kEmbd, kHeadsKv * head_dim});
    add(p + "attn_output.weight", {kEmbd, kEmbd});
    add(p + "ffn_norm.weight", {kEmbd});
    add(p + "ffn_gate.weight", {kEmbd, kFf});
    add(p + "ffn_up.weight", {kEmbd, kFf});
    add(p + "ffn_down.weight", {kFf, kEmbd});
  }
  return gguf::File::from_bytes(w.to_bytes(), "tiny.gguf");
}

struct Loaded {
  gguf::File file;
  std::unique_ptr<Model> model;
};

// Loads a spec that must succeed.
Loaded load_ok(const Spec& s) {
  Result<gguf::File> f = build(s);
  EXPECT_TRUE(f.ok()) << f.error().message;
  Loaded l{std::move(f.value()), nullptr};
  Result<std::unique_ptr<Model>> m = models::load_model(l.file);
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (m.ok()) l.model = std::move(m.value());
  return l;
}

// Loads a spec that must fail; returns the error.
Error load_error(const Spec& s) {
  Result<gguf::File> f = build(s);
  EXPECT_TRUE(f.ok()) << f.error().message;
  Result<std::unique_ptr<Model>> m = models::load_model(*f);
  EXPECT_FALSE(m.ok());
  return m.ok() ? Error{} : m.error();
}

std::vector<float> logits_of(Model& model, const std::vector<int32_t>& tokens) {
  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(model, 0, DType::kF32);
  EXPECT_TRUE(kv.ok());
  std::vector<float> out(tokens.size() * static_cast<size_t>(kVocab));
  Result<void> r = model.forward(be, tokens, 0, *kv, true, out.data());
  EXPECT_TRUE(r.ok()) << r.error().message;
  return out;
}

const std::vector<int32_t> kTokens = {1, 5, 39, 0, 17, 17, 2};

TEST(ModelLoad, TinyLlamaLoadsAndRuns) {
  Loaded l = load_ok(Spec{});
  ASSERT_NE(l.model, nullptr);
  const ModelHparams& hp = l.model->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_vocab, kVocab);
  EXPECT_EQ(hp.n_embd, kEmbd);
  EXPECT_EQ(hp.n_layer, kLayers);
  EXPECT_EQ(hp.n_head, kHeads);
  EXPECT_EQ(hp.n_head_kv, kHeadsKv);
  EXPECT_EQ(hp.head_dim, kEmbd / kHeads);
  EXPECT_EQ(hp.n_rot, kEmbd / kHeads);
  EXPECT_EQ(hp.n_ff, kFf);
  EXPECT_EQ(hp.n_ctx_train, 64);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f);
  EXPECT_EQ(l.model->n_batch(), 512);
  const std::vector<float> logits = logits_of(*l.model, kTokens);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  kernels::CpuBackend be(1);
  EXPECT_TRUE(l.model->check_backend(be).ok());
}

TEST(ModelLoad, TiedOutputUsesTokenEmbedding) {
  Spec tied;
  tied.tied = true;
  Spec copy;
  copy.output_copy = true;
  Loaded a = load_ok(tied);
  Loaded b = load_ok(copy);
  EXPECT_EQ(logits_of(*a.model, kTokens), logits_of(*b.model, kTokens));
}

TEST(ModelLoad, RopeFactorsAndLinearScalingChangeTheResult) {
  Loaded plain = load_ok(Spec{});
  const std::vector<float> base = logits_of(*plain.model, kTokens);
  Spec ones;
  ones.rope_freqs = std::vector<float>(4, 1.0f);
  Loaded with_ones = load_ok(ones);
  EXPECT_TRUE(with_ones.model->hparams().has_rope_freqs);
  EXPECT_EQ(logits_of(*with_ones.model, kTokens), base);
  Spec twos;
  twos.rope_freqs = std::vector<float>(4, 2.0f);
  Loaded with_twos = load_ok(twos);
  EXPECT_NE(logits_of(*with_twos.model, kTokens), base);
  // Dividing every frequency by 2 is linear scaling by a factor of 2.
  Spec linear;
  linear.extra["llama.rope.scaling.type"] = gguf::Value{std::string("linear")};
  linear.extra["llama.rope.scaling.factor"] = gguf::Value{2.0f};
  Loaded scaled = load_ok(linear);
  EXPECT_FLOAT_EQ(scaled.model->hparams().rope_freq_scale, 0.5f);
  const std::vector<float> a = logits_of(*with_twos.model, kTokens);
  const std::vector<float> b = logits_of(*scaled.model, kTokens);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f);
}

TEST(ModelLoad, UnknownArchitectureListsSupportedOnes) {
  Spec s;
  s.arch = "gpt5";
  const Error e = load_error(s);
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
  EXPECT_NE(e.message.find("tiny.gguf"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("'gpt5'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("llama"), std::string::npos) << e.message;
  EXPECT_EQ(models::architecture_names(),
            (std::vector<std::string_view>{"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe",
                                           "olmoe", "granite", "granitemoe", "gemma2", "gemma3",
                                           "phi3", "smollm3", "mistral3", "ernie4_5", "olmo2"}));
}

TEST(ModelLoad, MissingTensorIsAFormatError) {
  Spec s;
  s.drop = "blk.1.ffn_up.weight";
  const Error e = load_error(s);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("'blk.1.ffn_up.weight' is missing"), std::string::npos) << e.message;
}

TEST(ModelLoad, WrongShapeNamesExpectedAndActual) {
  Spec s;
  s.reshape = "blk.0.attn_k.weight";
  const Error e = load_error(s);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("tensor 'blk.0.attn_k.weight' has shape [32, 8], expected [32, 16]"),
            std::string::npos)
      << e.message;
}

TEST(ModelLoad, UnsupportedWeightTypeNamesTensorAndType) {
  Spec s;
  s.retype = "blk.1.attn_q.weight";
  const Error e = load_error(s);
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
  EXPECT_NE(e.message.find("'blk.1.attn_q.weight'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("q8_1"), std::string::npos) << e.message;
}

TEST(ModelLoad, BadHyperParameters) {
  Spec missing;
  missing.drop_key = "llama.block_count";
  Error e = load_error(missing);
  EXPECT_NE(e.message.find("llama.block_count"), std::string::npos) << e.message;

  Spec heads;
  heads.extra["llama.attention.head_count_kv"] = gguf::Value{uint32_t{3}};
  e = load_error(heads);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("KV head count 3"), std::string::npos) << e.message;

  Spec zero;
  zero.extra["llama.embedding_length"] = gguf::Value{uint32_t{0}};
  e = load_error(zero);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("llama.embedding_length"), std::string::npos) << e.message;

  Spec longrope;  // Phi-3's, which the llama graph has no factors for
  longrope.extra["llama.rope.scaling.type"] = gguf::Value{std::string("longrope")};
  e = load_error(longrope);
  EXPECT_EQ(e.code, ErrorCode::kUnsupported);
  EXPECT_NE(e.message.find("longrope"), std::string::npos) << e.message;

  Spec yarn;  // YaRN loads; a bad one of its keys is a format error naming it
  yarn.extra["llama.rope.scaling.type"] = gguf::Value{std::string("yarn")};
  yarn.extra["llama.rope.scaling.factor"] = gguf::Value{4.0f};
  EXPECT_NE(load_ok(yarn).model, nullptr);
  yarn.extra["llama.rope.scaling.yarn_beta_fast"] = gguf::Value{-1.0f};
  e = load_error(yarn);
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_NE(e.message.find("llama.rope.scaling.yarn_beta_fast"), std::string::npos) << e.message;

  Spec odd_rot;
  odd_rot.extra["llama.rope.dimension_count"] = gguf::Value{uint32_t{5}};
  e = load_error(odd_rot);
  EXPECT_EQ(e.code, ErrorCode::kFormat);

  Result<gguf::File> f = build(Spec{});
  ASSERT_TRUE(f.ok());
  Result<std::unique_ptr<Model>> m = models::load_model(*f, ModelOptions{0});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kUsage);
}

TEST(ModelLoad, ForwardRejectsBadCalls) {
  Loaded l = load_ok(Spec{});
  kernels::CpuBackend be(1);
  Result<KvCache> kv = make_kv_cache(*l.model, 8, DType::kF16);
  ASSERT_TRUE(kv.ok());
  std::vector<float> logits(static_cast<size_t>(8 * kVocab));
  const std::vector<int32_t> bad_token = {1, static_cast<int32_t>(kVocab)};
  Result<void> r = l.model->forward(be, bad_token, 0, *kv, false, logits.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
  EXPECT_NE(r.error().message.find("token id 40"), std::string::npos) << r.error().message;
  EXPECT_EQ(kv->n_tokens(), 0);

  const std::vector<int32_t> three = {1, 2, 3};
  r = l.model->forward(be, three, 1, *kv, false, logits.data());  // past the 0 cached tokens
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
  r = l.model->forward(be, {}, 0, *kv, false, logits.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);

  ASSERT_TRUE(l.model->forward(be, three, 0, *kv, false, logits.data()).ok());
  EXPECT_EQ(kv->n_tokens(), 3);
  const std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};
  r = l.model->forward(be, six, 3, *kv, false, logits.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kContextOverflow);
  EXPECT_EQ(kv->n_tokens(), 3);
  // Overwriting from an earlier position is allowed and rewinds the cache.
  ASSERT_TRUE(l.model->forward(be, three, 1, *kv, false, logits.data()).ok());
  EXPECT_EQ(kv->n_tokens(), 4);
}

}  // namespace
}  // namespace qrun
