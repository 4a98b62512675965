// write_synthetic_model: a llama, qwen2, qwen3, qwen3moe, qwen2moe, olmoe, granite, granitemoe,
// gemma2, gemma3 or phi3 GGUF with random weights.
// Speed matters (a 1B model should take seconds), so each distinct (type, row length)
// gets a pool of randomly generated, reference-quantized rows, and every tensor row is
// a pool row rotated by a random whole number of blocks: a valid, varied row of the
// right type produced at memcpy speed.
#include "models/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "models/quant_recipe.h"

namespace qrun::models {
namespace {

constexpr int64_t kPoolRows = 256;

// splitmix64: small, fast and good enough for random weights.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
};

class RowPool {
 public:
  RowPool(DType type, int64_t row_len, float std_dev, uint64_t seed)
      : type_(type), row_bytes_(row_size(type, row_len)), rows_(kPoolRows * row_bytes_) {
    Rng rng{seed};
    const float amplitude = std_dev * std::sqrt(3.0f);  // uniform [-a, a) has std a/sqrt(3)
    const FromFloatFn quantize = type_traits(type).from_float;
    QRUN_CHECK(quantize != nullptr, "no reference quantizer for %s", dtype_name(type));
    std::vector<float> src(static_cast<size_t>(row_len));
    for (int64_t r = 0; r < kPoolRows; ++r) {
      for (float& x : src) x = amplitude * rng.uniform();
      quantize(src.data(), rows_.data() + r * row_bytes_, row_len);
    }
    block_bytes_ = type_traits(type).block_bytes;
  }

  // Fills `out` (a whole tensor) with rotated pool rows.
  void fill(std::span<uint8_t> out, uint64_t seed) const {
    Rng rng{seed};
    const size_t n_blocks = row_bytes_ / block_bytes_;
    for (size_t off = 0; off + row_bytes_ <= out.size(); off += row_bytes_) {
      const uint8_t* src = rows_.data() + (rng.next() % kPoolRows) * row_bytes_;
      const size_t split = (rng.next() % n_blocks) * block_bytes_;
      std::memcpy(out.data() + off, src + split, row_bytes_ - split);
      std::memcpy(out.data() + off + row_bytes_ - split, src, split);
    }
  }

 private:
  DType type_;
  size_t row_bytes_;
  size_t block_bytes_ = 1;
  std::vector<uint8_t> rows_;
};

}  // namespace

std::optional<SynthShape> synth_preset(const std::string& name) {
  // n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, rope base, eps, tied output
  static const std::map<std::string, SynthShape> kPresets = {
      {"tiny", {64, 2, 4, 2, 128, 512, 10000.0f, 1e-5f, false}},
      {"smollm-135m", {576, 30, 9, 3, 1536, 2048, 10000.0f, 1e-5f, true}},
      {"tinyllama-1.1b", {2048, 22, 32, 4, 5632, 2048, 10000.0f, 1e-5f, false}},
      {"llama-3.2-1b", {2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, true}},
      {"llama-3.2-3b", {3072, 28, 24, 8, 8192, 131072, 500000.0f, 1e-5f, true}},
      {"llama-2-7b", {4096, 32, 32, 32, 11008, 4096, 10000.0f, 1e-5f, false}},
      {"llama-3-8b", {4096, 32, 32, 8, 14336, 8192, 500000.0f, 1e-5f, false}},
      {"mistral-7b", {4096, 32, 32, 8, 14336, 32768, 1000000.0f, 1e-5f, false}},
      // Mixtures of experts; then also: head size, rope dims, window, original context,
      // experts, experts used, expert width
      {"mixtral-8x7b",
       {4096, 32, 32, 8, 14336, 32768, 1000000.0f, 1e-5f, false, 0, 0, 0, 0, 8, 2, 0}},
      {"qwen3-30b-a3b",
       {2048, 48, 32, 4, 6144, 40960, 1000000.0f, 1e-6f, false, 128, 0, 0, 0, 128, 8, 768}},
      // then also the shared expert's width
      {"qwen1.5-moe-a2.7b",
       {2048, 24, 16, 16, 5632, 8192, 1000000.0f, 1e-6f, false, 0, 0, 0, 0, 60, 4, 1408, 5632}},
  };
  auto it = kPresets.find(name);
  if (it == kPresets.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> synth_preset_names() {
  return {"tiny",         "smollm-135m",   "tinyllama-1.1b",   "llama-3.2-1b",
          "llama-3.2-3b", "llama-2-7b",    "llama-3-8b",       "mistral-7b",
          "mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b"};
}

std::vector<std::string> synth_arch_names() {
  return {"llama",  "qwen2",  "qwen3", "qwen3moe", "qwen2moe", "olmoe",    "granite", "granitemoe",
          "gemma2", "gemma3", "phi3",  "smollm3",  "mistral3", "ernie4_5", "olmo2"};
}

std::vector<std::string> synth_recipe_names() {
  return quant_recipe_names();
}

Result<void> write_synthetic_model(const SynthOptions& o, const gguf::File& vocab,
                                   const std::string& path) {
  const SynthShape& s = o.shape;
  Result<QuantRecipe> recipe = quant_recipe_or_error(o.recipe, "synth");
  if (!recipe.ok()) return recipe.error();
  const bool qwen2moe = o.arch == "qwen2moe";
  const bool qwen2 = o.arch == "qwen2" || qwen2moe;
  const bool qwen3moe = o.arch == "qwen3moe";
  const bool olmoe = o.arch == "olmoe";
  const bool olmo2 = o.arch == "olmo2";  // no pre-norms: post-norms and whole-row Q/K norms
  const bool granitemoe = o.arch == "granitemoe";
  const bool granite = o.arch == "granite" || granitemoe;
  const bool qwen3 = o.arch == "qwen3" || qwen3moe;
  const bool gemma3 = o.arch == "gemma3";
  const bool gemma = o.arch == "gemma2" || gemma3;
  const bool phi3 = o.arch == "phi3";
  // The llama graph under other names (SmolLM3's NoPE layers and Mistral 3's temperature
  // are the loader's; the file is llama's).
  const bool llama_like =
      o.arch == "llama" || o.arch == "smollm3" || o.arch == "mistral3" || o.arch == "ernie4_5";
  if (!llama_like && !qwen2 && !qwen3 && !olmoe && !olmo2 && !granite && !gemma && !phi3) {
    return make_error(
        ErrorCode::kUsage,
        format("synth: unknown architecture '%s' (llama, qwen2, qwen3, qwen3moe, qwen2moe, "
               "olmoe, olmo2, granite, granitemoe, gemma2, gemma3, phi3, smollm3, mistral3, "
               "ernie4_5)",
               o.arch.c_str()));
  }
  const int64_t n_expert =
      (qwen3moe || qwen2moe || olmoe || granitemoe) && s.n_expert == 0 ? 8 : s.n_expert;
  const int64_t n_expert_used = n_expert > 0 && s.n_expert_used == 0 ? 2 : s.n_expert_used;
  const int64_t n_ff_exp = s.n_ff_exp > 0 ? s.n_ff_exp : s.n_ff;
  const int64_t n_ff_shexp = s.n_ff_shexp > 0 ? s.n_ff_shexp : s.n_ff;
  if ((olmoe || granite) && n_ff_exp != s.n_ff) {  // llama.cpp reads no expert width there
    return make_error(
        ErrorCode::kUsage,
        format("synth: %s's experts are the feed-forward width %lld wide, not "
               "%lld (set --n-ff instead of --expert-ff)",
               o.arch.c_str(), static_cast<long long>(s.n_ff), static_cast<long long>(n_ff_exp)));
  }
  // Shared experts: qwen2moe's always, granite's (gateless) when a width is given.
  const bool shared_expert = qwen2moe || (granite && n_expert > 0 && s.n_ff_shexp > 0);
  if ((n_expert > 0 && o.arch != "llama" && !qwen3moe && !qwen2moe && !olmoe && !granite) ||
      n_expert_used > n_expert || (n_expert > 0 && n_expert_used == 0)) {
    return make_error(
        ErrorCode::kUsage,
        format("synth: %lld experts with %lld used: experts need --arch llama, qwen3moe, "
               "qwen2moe, olmoe, granite or granitemoe, and 1 .. the experts used",
               static_cast<long long>(n_expert), static_cast<long long>(n_expert_used)));
  }
  if (s.sliding_window < 0 || (s.sliding_window > 0 && !gemma && !phi3 && !olmo2)) {
    return make_error(ErrorCode::kUsage, format("synth: a sliding window (%lld) needs --arch "
                                                "gemma2, gemma3, phi3 or olmo2 and must be > 0",
                                                static_cast<long long>(s.sliding_window)));
  }
  if (o.attn_softcap < 0.0f || o.final_softcap < 0.0f ||
      (o.attn_softcap > 0.0f && o.arch != "gemma2") || (o.final_softcap > 0.0f && !gemma)) {
    return make_error(ErrorCode::kUsage,
                      format("synth: soft-caps (attention %g, output %g) must be >= 0; the "
                             "attention's needs --arch gemma2, the output's gemma2 or gemma3",
                             o.attn_softcap, o.final_softcap));
  }
  const bool yarn = o.rope_scaling == "yarn";
  if (!(o.rope_scaling.empty() || o.rope_scaling == "linear" || yarn) ||
      (!o.rope_scaling.empty() && (phi3 || !(o.rope_factor >= 1.0f && o.rope_factor <= 1024.0f))) ||
      (o.rope_scaling.empty() && o.rope_factor != 0.0f)) {
    return make_error(ErrorCode::kUsage,
                      format("synth: rope scaling '%s' by %g: linear or yarn, by a factor in "
                             "1 .. 1024, and not for phi3 (whose LongRoPE comes with --orig-ctx)",
                             o.rope_scaling.c_str(), o.rope_factor));
  }
  if (s.rope_orig_ctx < 0 || s.rope_orig_ctx > s.n_ctx || (s.rope_orig_ctx > 0 && !phi3 && !yarn)) {
    return make_error(
        ErrorCode::kUsage,
        format("synth: an original context (%lld) needs --arch phi3 or --rope-scaling yarn "
               "and must be in 1 .. the context length %lld",
               static_cast<long long>(s.rope_orig_ctx), static_cast<long long>(s.n_ctx)));
  }
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 ||
      s.head_dim < 0 || (s.head_dim == 0 && s.n_embd % s.n_head != 0) ||
      s.n_head % s.n_head_kv != 0) {
    return make_error(ErrorCode::kUsage,
                      format("synth: invalid shape (n_embd %lld, n_head %lld, n_head_kv %lld): "
                             "n_embd must divide by n_head (unless a head size is given) and "
                             "n_head by n_head_kv",
                             static_cast<long long>(s.n_embd), static_cast<long long>(s.n_head),
                             static_cast<long long>(s.n_head_kv)));
  }
  const gguf::Value* tokens = vocab.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type() != gguf::ValueType::kArray || tokens->as_array().items.empty()) {
    return vocab.error(ErrorCode::kFormat,
                       "no tokenizer.ggml.tokens array to copy the vocabulary from");
  }
  const int64_t n_vocab = static_cast<int64_t>(tokens->as_array().items.size());
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t n_embd_q = head_dim * s.n_head;
  const int64_t n_embd_kv = head_dim * s.n_head_kv;
  const int64_t n_rot = s.rope_dims > 0 ? s.rope_dims : head_dim;
  if (s.rope_dims < 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    return make_error(ErrorCode::kUsage,
                      format("synth: rope dimensions %lld must be even and at most the head size "
                             "%lld",
                             static_cast<long long>(n_rot), static_cast<long long>(head_dim)));
  }
  const std::string& a = o.arch;  // key prefix

  gguf::Writer w;
  w.set_string("general.architecture", a);
  w.set_string("general.name", o.name);
  w.set_u32("general.file_type", static_cast<uint32_t>(recipe->file_type));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(n_rot));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + ".rope.freq_base", s.rope_freq_base);
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(n_vocab));
  if (olmo2 && s.sliding_window > 0)  // OLMo 3: local layers 3 of every 4
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (gemma) {
    w.set_u32(a + ".attention.sliding_window",
              static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 512));
  }
  if (o.arch == "gemma2") {  // as every Gemma 2 file carries them
    w.set_f32(a + ".attn_logit_softcapping", o.attn_softcap > 0.0f ? o.attn_softcap : 50.0f);
    w.set_f32(a + ".final_logit_softcapping", o.final_softcap > 0.0f ? o.final_softcap : 30.0f);
  } else if (o.final_softcap > 0.0f) {
    w.set_f32(a + ".final_logit_softcapping", o.final_softcap);
  }
  // phi3: LongRoPE when the original context is below the context (as Phi-3's converter
  // writes it: the attention factor sqrt(1 + ln(scale) / ln(original)), scale = n_ctx / orig).
  const int64_t orig_ctx = s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx;
  const bool longrope = phi3 && orig_ctx < s.n_ctx;
  if (phi3) {
    w.set_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(orig_ctx));
    if (s.sliding_window > 0)
      w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  }
  if (!o.rope_scaling.empty()) {
    w.set_string(a + ".rope.scaling.type", o.rope_scaling);
    w.set_f32(a + ".rope.scaling.factor", o.rope_factor);
    if (yarn && s.rope_orig_ctx > 0)
      w.set_u32(a + ".rope.scaling.original_context_length",
                static_cast<uint32_t>(s.rope_orig_ctx));
  }
  if (o.arch == "mistral3") {  // Llama 4's attention temperature, as llama4's 0.1
    w.set_f32(a + ".attention.temperature_scale", 0.1f);
  }
  if (granite) {  // Granite 3.x 2B's multipliers
    w.set_f32(a + ".embedding_scale", 12.0f);
    w.set_f32(a + ".residual_scale", 0.22f);
    w.set_f32(a + ".attention.scale", 0.015625f);
    w.set_f32(a + ".logit_scale", 8.0f);
  }
  if (longrope) {
    const double scale = static_cast<double>(s.n_ctx) / static_cast<double>(orig_ctx);
    w.set_f32(a + ".rope.scaling.attn_factor",
              static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(double(orig_ctx)))));
  }
  if (n_expert > 0) {
    w.set_u32(a + ".expert_count", static_cast<uint32_t>(n_expert));
    w.set_u32(a + ".expert_used_count", static_cast<uint32_t>(n_expert_used));
    if (qwen3moe || qwen2moe)
      w.set_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(n_ff_exp));
    if (shared_expert) {
      w.set_u32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(n_ff_shexp));
    }
  }
  if (qwen3 || gemma || head_dim * s.n_head != s.n_embd) {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  }
  for (const gguf::KeyValue& kv : vocab.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  }

  // One pool per (type, row length), shared by every tensor of that geometry.
  std::map<std::pair<DType, int64_t>, std::unique_ptr<RowPool>> pools;  // outlives w.write()
  uint64_t tensor_seed = o.seed * 1000003u;
  // Types in write order, as llama-quantize would choose them for this recipe.
  QuantPlanner planner(*recipe, s.n_layer, s.n_layer, !s.tied_output && !gemma,
                       s.n_head / s.n_head_kv);
  auto add_matrix = [&](const std::string& name, int64_t cols, int64_t rows,
                        int64_t n_matrices = 1) {
    const DType type = planner.next(name, cols);
    std::unique_ptr<RowPool>& pool = pools[{type, cols}];
    if (!pool) {
      const uint64_t pool_seed =
          o.seed ^ (static_cast<uint64_t>(cols) * 31 + static_cast<uint64_t>(type));
      pool = std::make_unique<RowPool>(type, cols, o.weight_std, pool_seed);
    }
    const RowPool* p = pool.get();
    const uint64_t seed = ++tensor_seed;
    std::vector<int64_t> shape = {cols, rows};
    if (n_matrices > 1) shape.push_back(n_matrices);
    w.add_tensor(name, type, shape, [p, seed](std::span<uint8_t> out) { p->fill(out, seed); });
  };
  auto add_ones = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, DType::kF32, {n}, [](std::span<uint8_t> out) {
      const float one = 1.0f;
      for (size_t i = 0; i + 4 <= out.size(); i += 4) std::memcpy(out.data() + i, &one, 4);
    });
  };

  // F32 vector of center + uniform [-amplitude, amplitude): biases (center 0) and per-head
  // norm weights (center 1), random so that a wrong pairing of weights shows in the output.
  auto add_random = [&](const std::string& name, std::vector<int64_t> shape, float center,
                        float amplitude) {
    const uint64_t seed = ++tensor_seed;
    w.add_tensor(name, DType::kF32, shape, [seed, center, amplitude](std::span<uint8_t> out) {
      Rng rng{seed};
      for (size_t i = 0; i + 4 <= out.size(); i += 4) {
        const float x = center + amplitude * rng.uniform();
        std::memcpy(out.data() + i, &x, 4);
      }
    });
  };
  const float bias_amplitude = 10.0f * o.weight_std;

  add_matrix("token_embd.weight", s.n_embd, n_vocab);
  if (longrope) {
    // Per-pair divisors of the RoPE frequency, as in Phi-3.5: short ones near 1, long ones
    // up to ~10, so that using the wrong set shows in every rotated head.
    add_random("rope_factors_long.weight", {n_rot / 2}, 5.0f, 4.0f);
    add_random("rope_factors_short.weight", {n_rot / 2}, 1.25f, 0.25f);
  }
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string b = format("blk.%lld.", static_cast<long long>(i));
    if (!olmo2) add_ones(b + "attn_norm.weight", s.n_embd);
    if (phi3) {
      add_matrix(b + "attn_qkv.weight", s.n_embd, n_embd_q + 2 * n_embd_kv);
    } else {
      add_matrix(b + "attn_q.weight", s.n_embd, n_embd_q);
      add_matrix(b + "attn_k.weight", s.n_embd, n_embd_kv);
      add_matrix(b + "attn_v.weight", s.n_embd, n_embd_kv);
    }
    if (qwen2) {
      add_random(b + "attn_q.bias", {n_embd_q}, 0.0f, bias_amplitude);
      add_random(b + "attn_k.bias", {n_embd_kv}, 0.0f, bias_amplitude);
      add_random(b + "attn_v.bias", {n_embd_kv}, 0.0f, bias_amplitude);
    }
    if (qwen3 || gemma3) {
      add_random(b + "attn_q_norm.weight", {head_dim}, 1.0f, 0.5f);
      add_random(b + "attn_k_norm.weight", {head_dim}, 1.0f, 0.5f);
    }
    if (olmoe || olmo2) {  // over each token's whole rows
      add_random(b + "attn_q_norm.weight", {n_embd_q}, 1.0f, 0.5f);
      add_random(b + "attn_k_norm.weight", {n_embd_kv}, 1.0f, 0.5f);
    }
    add_matrix(b + "attn_output.weight", n_embd_q, s.n_embd);
    if (gemma || olmo2) add_random(b + "post_attention_norm.weight", {s.n_embd}, 1.0f, 0.5f);
    if (!olmo2) add_ones(b + "ffn_norm.weight", s.n_embd);
    if (n_expert > 0) {
      // The router's rows spread wider than the weights' so that the choice of experts
      // differs between tokens and is clear of near-ties.
      add_random(b + "ffn_gate_inp.weight", {s.n_embd, n_expert}, 0.0f, bias_amplitude);
      add_matrix(b + "ffn_gate_exps.weight", s.n_embd, n_ff_exp, n_expert);
      add_matrix(b + "ffn_up_exps.weight", s.n_embd, n_ff_exp, n_expert);
      add_matrix(b + "ffn_down_exps.weight", n_ff_exp, s.n_embd, n_expert);
      if (shared_expert) {
        // qwen2moe's 1-D gate, which llama-quantize keeps F32; wide enough that its sigmoid
        // spans (0, 1) over the tokens.
        if (qwen2moe) add_random(b + "ffn_gate_inp_shexp.weight", {s.n_embd}, 0.0f, bias_amplitude);
        add_matrix(b + "ffn_gate_shexp.weight", s.n_embd, n_ff_shexp);
        add_matrix(b + "ffn_up_shexp.weight", s.n_embd, n_ff_shexp);
        add_matrix(b + "ffn_down_shexp.weight", n_ff_shexp, s.n_embd);
      }
    } else if (phi3) {
      add_matrix(b + "ffn_up.weight", s.n_embd, 2 * s.n_ff);  // gate rows, then up rows
    } else {
      add_matrix(b + "ffn_gate.weight", s.n_embd, s.n_ff);
      add_matrix(b + "ffn_up.weight", s.n_embd, s.n_ff);
    }
    if (n_expert == 0) add_matrix(b + "ffn_down.weight", s.n_ff, s.n_embd);
    if (gemma || olmo2) add_random(b + "post_ffw_norm.weight", {s.n_embd}, 1.0f, 0.5f);
  }
  add_ones("output_norm.weight", s.n_embd);
  if (!s.tied_output && !gemma) add_matrix("output.weight", s.n_embd, n_vocab);
  return w.write(path);
}

}  // namespace qrun::models
