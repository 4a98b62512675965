// LlamaModel: hyper-parameters, weight binding and the forward pass. The forward pass
// follows llama.cpp's LLM_ARCH_LLAMA graph op for op, so logits match it to rounding; a
// LlamaVariant switches on Qwen2's Q/K/V biases, Qwen3's per-head Q/K norms, OLMoE's
// whole-row ones, Granite's scales, SmolLM3's layers without RoPE, Mistral 3's attention
// temperature, and the mixture-of-experts feed-forward blocks of Mixtral-style llama files,
// Qwen3-MoE, Qwen2-MoE (Qwen2's attention, experts with a shared one), OLMoE and Granite MoE.
// ERNIE 4.5's dense models are the llama graph as it is.
// Activations live in buffers sized once for n_batch tokens; forward() allocates nothing.
#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "models/common_blocks.h"
#include "models/forward_step.h"
#include "models/moe.h"

namespace qrun::models {
namespace {

// Whether the feed-forward blocks are mixtures of experts.
enum class Experts {
  kNever,      // dense; expert tensors are refused (qwen2, qwen3)
  kIfCounted,  // experts when "<arch>.expert_count" is above 0, as llama.cpp decides (llama,
               // granite)
  kAlways,     // "<arch>.expert_count" is required (qwen3moe, qwen2moe, olmoe, granitemoe)
};

// RMS norms of Q and K before RoPE (blk.N.attn_{q,k}_norm.weight, required when present).
enum class QkNorm {
  kNone,
  kPerHead,  // each head's row on its own, one weight of head_dim (qwen3)
  kWhole,    // each token's whole Q and K rows, weights of n_head and n_head_kv heads (olmoe)
};

// What distinguishes the architectures that share the llama graph.
struct LlamaVariant {
  RopeMode rope_mode = RopeMode::kNormal;
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias, required (qwen2)
  QkNorm qk_norm = QkNorm::kNone;
  Experts experts = Experts::kNever;
  // Granite's multipliers, from "<arch>.embedding_scale", ".residual_scale",
  // ".attention.scale" (each optional) and ".logit_scale" (required): on the embeddings, on
  // each block's output before its residual add, as the attention's scale, and 1 / it on
  // the logits.
  bool granite_scales = false;
  // SmolLM3: layers il with (il + 1) % nope_period == 0 attend without RoPE; 0: none.
  int64_t nope_period = 0;
  // Mistral 3: q scaled by Llama 4's attention temperature, from
  // "<arch>.attention.temperature_scale" (optional; 0: none) over steps of the original
  // context (AttentionConfig::temp_scale).
  bool attn_temperature = false;
};

constexpr LlamaVariant kLlama{RopeMode::kNormal, false, QkNorm::kNone, Experts::kIfCounted};
constexpr LlamaVariant kQwen2{RopeMode::kNeox, true, QkNorm::kNone};
constexpr LlamaVariant kQwen3{RopeMode::kNeox, false, QkNorm::kPerHead};
constexpr LlamaVariant kQwen3Moe{RopeMode::kNeox, false, QkNorm::kPerHead, Experts::kAlways};
constexpr LlamaVariant kQwen2Moe{RopeMode::kNeox, true, QkNorm::kNone, Experts::kAlways};
constexpr LlamaVariant kOlmoe{RopeMode::kNeox, false, QkNorm::kWhole, Experts::kAlways};
constexpr LlamaVariant kGranite{RopeMode::kNormal, false, QkNorm::kNone, Experts::kIfCounted, true};
constexpr LlamaVariant kGraniteMoe{RopeMode::kNormal, false, QkNorm::kNone, Experts::kAlways, true};
constexpr LlamaVariant kSmollm3{RopeMode::kNormal, false, QkNorm::kNone, Experts::kNever, false, 4};
constexpr LlamaVariant kMistral3{
    RopeMode::kNormal, false, QkNorm::kNone, Experts::kIfCounted, false, 0, true};
constexpr LlamaVariant kErnie45{RopeMode::kNormal, false, QkNorm::kNone, Experts::kNever};

struct LlamaLayer {
  Tensor attn_norm;  // [n_embd]
  AttentionWeights attn;
  Tensor ffn_norm;  // [n_embd]
  FfnWeights ffn;   // dense models
  MoeWeights moe;   // mixture-of-experts models (hp.n_expert > 0)
};

class LlamaModel final : public Model {
 public:
  static Result<std::unique_ptr<Model>> load(const gguf::File& file, const ModelOptions& options,
                                             const LlamaVariant& variant);

  const ModelHparams& hparams() const override { return hp_; }
  int64_t n_batch() const override { return n_batch_; }
  Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                       bool all_logits, float* logits_out) override;
  Result<void> forward_batch(Backend& backend, std::span<const SeqForward> seqs) override;
  Result<void> check_backend(const Backend& backend) const override;
  std::optional<RopeParams> key_rope(int64_t il, int64_t /*n_ctx*/) const override {
    return config(il).use_rope ? config(il).rope : RopeParams{};  // n_rot 0: not rotated
  }
  void set_warmup(bool on) override { warmup_ = on; }

 private:
  Result<void> bind_weights(const gguf::File& file);
  Result<void> read_granite_scales(const gguf::File& file);
  Result<void> read_attn_temperature(const gguf::File& file);
  // Layer il's attention: attn_config_, or nope_config_ for SmolLM3's NoPE layers.
  const AttentionConfig& config(int64_t il) const {
    return variant_.nope_period > 0 && (il + 1) % variant_.nope_period == 0 ? nope_config_
                                                                            : attn_config_;
  }
  // One step of at most n_batch tokens (models/forward_step.h).
  void forward_step(Backend& backend, const ForwardStep& step);

  LlamaVariant variant_;
  ModelHparams hp_;
  int64_t n_batch_ = 0;
  AttentionConfig attn_config_;
  AttentionConfig nope_config_;  // attn_config_ without RoPE

  EmbeddingWeights embd_;
  std::vector<LlamaLayer> layers_;
  DecoderScratch scratch_;
  MoeScratch moe_scratch_;  // allocated for mixture-of-experts models only
  bool warmup_ = false;     // set_warmup: every expert for every token
  // Granite's multipliers (LlamaVariant::granite_scales); 0: none
  float embedding_scale_ = 0.0f;
  float residual_scale_ = 0.0f;
  float logit_scale_ = 0.0f;
};

Result<void> LlamaModel::bind_weights(const gguf::File& file) {
  const WeightBinder b(file);
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;
  const int64_t n_kv = hp_.n_head_kv * hp_.head_dim;

  Result<EmbeddingWeights> embd = bind_embedding_weights(file, hp_);
  if (!embd.ok()) return embd.error();
  embd_ = *embd;
  Result<std::optional<Tensor>> freqs =
      b.bind_optional("rope_freqs.weight", {hp_.n_rot / 2}, WeightUse::kF32);
  if (!freqs.ok()) return freqs.error();
  if (freqs->has_value()) {
    hp_.has_rope_freqs = true;
    attn_config_.rope.freq_factors = static_cast<const float*>((*freqs)->data);
  }

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    LlamaLayer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    QRUN_TRY(b.bind(p + "attn_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_norm));
    QRUN_TRY(b.bind(p + "attn_q.weight", {n_embd, n_q}, WeightUse::kMatMul, &l.attn.wq));
    QRUN_TRY(b.bind(p + "attn_k.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wk));
    QRUN_TRY(b.bind(p + "attn_v.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wv));
    QRUN_TRY(b.bind(p + "attn_output.weight", {n_q, n_embd}, WeightUse::kMatMul, &l.attn.wo));
    QRUN_TRY(b.bind(p + "ffn_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_norm));
    if (hp_.n_expert > 0) {
      QRUN_TRY(bind_moe_weights(b, p, hp_, &l.moe));
    } else {
      QRUN_TRY(b.reject_if_present(p + "ffn_gate_inp.weight",
                                   "mixture-of-experts layers in this architecture"));
      QRUN_TRY(b.bind(p + "ffn_gate.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.gate));
      QRUN_TRY(b.bind(p + "ffn_up.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.up));
      QRUN_TRY(b.bind(p + "ffn_down.weight", {hp_.n_ff, n_embd}, WeightUse::kMatMul, &l.ffn.down));
    }
    if (variant_.qkv_bias) {
      QRUN_TRY(b.bind(p + "attn_q.bias", {n_q}, WeightUse::kF32, &l.attn.bq));
      QRUN_TRY(b.bind(p + "attn_k.bias", {n_kv}, WeightUse::kF32, &l.attn.bk));
      QRUN_TRY(b.bind(p + "attn_v.bias", {n_kv}, WeightUse::kF32, &l.attn.bv));
    } else {
      for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
        QRUN_TRY(b.reject_if_present(p + bias, "attention biases"));
    }
    QRUN_TRY(b.reject_if_present(p + "attn_output.bias", "attention output biases"));
    if (variant_.qk_norm != QkNorm::kNone) {
      const bool whole = variant_.qk_norm == QkNorm::kWhole;
      QRUN_TRY(b.bind(p + "attn_q_norm.weight", {whole ? n_q : hp_.head_dim}, WeightUse::kF32,
                      &l.attn.q_norm));
      QRUN_TRY(b.bind(p + "attn_k_norm.weight", {whole ? n_kv : hp_.head_dim}, WeightUse::kF32,
                      &l.attn.k_norm));
    } else {
      for (const char* norm : {"attn_q_norm.weight", "attn_k_norm.weight"})
        QRUN_TRY(b.reject_if_present(p + norm, "Q/K norms"));
    }
  }
  return {};
}

Result<std::unique_ptr<Model>> LlamaModel::load(const gguf::File& file, const ModelOptions& options,
                                                const LlamaVariant& variant) {
  QRUN_TRY(check_model_options(options));
  auto m = std::make_unique<LlamaModel>();
  m->n_batch_ = options.n_batch;
  m->variant_ = variant;
  Result<ModelHparams> hp = read_decoder_hparams(file);
  if (!hp.ok()) return hp.error();
  m->hp_ = std::move(*hp);
  if (variant.experts != Experts::kNever) {
    QRUN_TRY(read_moe_hparams(file, variant.experts == Experts::kAlways, m->hp_));
  }
  QRUN_TRY(m->bind_weights(file));
  AttentionConfig& a = m->attn_config_;
  a.attn = AttentionParams{m->hp_.n_head, m->hp_.n_head_kv, m->hp_.head_dim,
                           1.0f / std::sqrt(static_cast<float>(m->hp_.head_dim))};
  if (variant.granite_scales) QRUN_TRY(m->read_granite_scales(file));
  const float* freq_factors = a.rope.freq_factors;  // (Llama 3.1's, bound with the weights)
  a.rope = decoder_rope(m->hp_, variant.rope_mode, m->hp_.rope_freq_base, m->hp_.rope_freq_scale);
  a.rope.freq_factors = freq_factors;
  a.norm_eps = m->hp_.norm_eps;
  if (variant.attn_temperature) QRUN_TRY(m->read_attn_temperature(file));
  m->nope_config_ = a;
  m->nope_config_.use_rope = false;
  m->scratch_.allocate(m->hp_, m->n_batch_, options.n_seq);
  if (m->hp_.n_expert > 0) m->moe_scratch_.allocate(m->hp_, m->n_batch_);
  return std::unique_ptr<Model>(std::move(m));
}

Result<void> LlamaModel::read_granite_scales(const gguf::File& file) {
  const std::string& a = hp_.arch;
  // Granite switches RoPE off with rope.scaling.finetuned false; qrun always rotates.
  Result<bool> rope = file.get_bool_or(a + ".rope.scaling.finetuned", true);
  if (!rope.ok()) return rope.error();
  if (!*rope) {
    return file.error(ErrorCode::kUnsupported,
                      format("key '%s.rope.scaling.finetuned' is false: attention without RoPE "
                             "is not supported",
                             a.c_str()));
  }
  // Each a finite multiplier; 0 (or absent, where optional): none.
  auto read = [&](const char* key, std::optional<double> fallback, float* out) -> Result<void> {
    const std::string name = a + "." + key;
    Result<double> v = fallback ? file.get_float_or(name, *fallback) : file.get_float(name);
    if (!v.ok()) return v.error();
    if (!(std::isfinite(*v) && *v >= 0.0 && *v < 1e30)) {
      return file.error(
          ErrorCode::kFormat,
          format("key '%s' is %g, expected a finite multiplier >= 0", name.c_str(), *v));
    }
    *out = static_cast<float>(*v);
    return {};
  };
  float attention_scale = 0.0f;
  QRUN_TRY(read("embedding_scale", 0.0, &embedding_scale_));
  QRUN_TRY(read("residual_scale", 0.0, &residual_scale_));
  QRUN_TRY(read("attention.scale", 0.0, &attention_scale));
  QRUN_TRY(read("logit_scale", std::nullopt, &logit_scale_));
  if (logit_scale_ == 0.0f) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s.logit_scale' is 0, expected the logits' divisor", a.c_str()));
  }
  if (attention_scale != 0.0f) attn_config_.attn.scale = attention_scale;
  return {};
}

Result<void> LlamaModel::read_attn_temperature(const gguf::File& file) {
  const std::string key = hp_.arch + ".attention.temperature_scale";
  Result<double> scale = file.get_float_or(key, 0.0);
  if (!scale.ok()) return scale.error();
  if (!(std::isfinite(*scale) && *scale >= 0.0 && *scale < 1e6)) {
    return file.error(ErrorCode::kFormat, format("key '%s' is %g", key.c_str(), *scale));
  }
  attn_config_.temp_scale = static_cast<float>(*scale);
  attn_config_.temp_floor = hp_.rope_yarn_orig_ctx;  // as llama.cpp: n_ctx_orig_yarn
  return {};
}

Result<void> LlamaModel::check_backend(const Backend& backend) const {
  QRUN_TRY(check_embedding_ops(backend, embd_));
  for (const LlamaLayer& l : layers_) {
    if (hp_.n_expert > 0) {
      QRUN_TRY(check_block_ops(backend, l.attn, nullptr));
      QRUN_TRY(check_moe_ops(backend, l.moe));
    } else {
      QRUN_TRY(check_block_ops(backend, l.attn, &l.ffn));
    }
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.attn_norm));
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.ffn_norm));
  }
  return {};
}

Result<void> LlamaModel::forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                                 KvCache& kv, bool all_logits, float* logits_out) {
  const SeqForward seq{tokens, pos, &kv, all_logits, logits_out};
  return forward_batch(backend, std::span<const SeqForward>(&seq, 1));
}

Result<void> LlamaModel::forward_batch(Backend& backend, std::span<const SeqForward> seqs) {
  return forward_in_steps(hp_, scratch_, seqs,
                          [&](const ForwardStep& step) { forward_step(backend, step); });
}

void LlamaModel::forward_step(Backend& backend, const ForwardStep& step) {
  const int64_t n = step.n();
  const int64_t n_embd = hp_.n_embd;
  const DecoderScratch::Scope scope = scratch_.use(backend, moe_scratch_.device_buffers());
  const BlockScratch s = scratch_.blocks();
  float* x = scratch_.x();
  float* xn = scratch_.xn();

  // x: [n, n_embd] token embeddings, every sequence's rows together
  backend.get_rows(embd_.tok_embd, step.tokens, x);
  if (embedding_scale_ != 0.0f) backend.scale(x, n * n_embd, embedding_scale_, x);

  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LlamaLayer& l = layers_[static_cast<size_t>(il)];
    // Attention. x += xn (the last layer's FFN output), xn: [n, n_embd] x normed, then the
    // attention output
    if (il == 0) {
      backend.rms_norm(x, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    } else {
      backend.add_rms_norm(x, xn, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    }
    self_attention(backend, l.attn, config(il), il, step, xn, s, xn);
    if (residual_scale_ != 0.0f) backend.scale(xn, n * n_embd, residual_scale_, xn);
    // Feed-forward. x += xn, xn: x normed, then the FFN output
    backend.add_rms_norm(x, xn, l.ffn_norm, n, n_embd, hp_.norm_eps, xn);
    if (hp_.n_expert > 0) {
      moe_ffn(backend, l.moe, hp_, xn, n, moe_scratch_, xn, warmup_);
    } else {
      gated_ffn(backend, l.ffn, FfnActivation::kSilu, xn, n, s, xn);
    }
    if (residual_scale_ != 0.0f) backend.scale(xn, n * n_embd, residual_scale_, xn);
  }
  backend.add(x, xn, n * n_embd, x);

  // Output: the rows each sequence asks for (every token, or its last), normed and projected
  // (and divided by Granite's logit scale).
  step_logits(backend, hp_, embd_, scratch_, step);
  if (logit_scale_ == 0.0f) return;
  for (const StepPiece& p : step.pieces) {
    if (p.logits != nullptr)
      backend.scale(p.logits, logit_rows(p) * hp_.n_vocab, 1.0f / logit_scale_, p.logits);
  }
}

}  // namespace

Result<std::unique_ptr<Model>> load_llama(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kLlama);
}

Result<std::unique_ptr<Model>> load_qwen2(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kQwen2);
}

Result<std::unique_ptr<Model>> load_qwen3(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kQwen3);
}

Result<std::unique_ptr<Model>> load_qwen3moe(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kQwen3Moe);
}

Result<std::unique_ptr<Model>> load_qwen2moe(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kQwen2Moe);
}

Result<std::unique_ptr<Model>> load_olmoe(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kOlmoe);
}

Result<std::unique_ptr<Model>> load_granite(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kGranite);
}

Result<std::unique_ptr<Model>> load_granitemoe(const gguf::File& file,
                                               const ModelOptions& options) {
  return LlamaModel::load(file, options, kGraniteMoe);
}

Result<std::unique_ptr<Model>> load_smollm3(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kSmollm3);
}

Result<std::unique_ptr<Model>> load_mistral3(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kMistral3);
}

Result<std::unique_ptr<Model>> load_ernie4_5(const gguf::File& file, const ModelOptions& options) {
  return LlamaModel::load(file, options, kErnie45);
}

}  // namespace qrun::models
