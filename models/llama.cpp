// LlamaModel: hyper-parameters, weight binding and the forward pass. The forward pass
// follows llama.cpp's LLM_ARCH_LLAMA graph op for op, so logits match it to rounding; a
// LlamaVariant switches on Qwen2's Q/K/V biases and Qwen3's per-head Q/K norms.
// Activations live in buffers sized once for n_batch tokens; forward() allocates nothing.
#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/common_blocks.h"

namespace qrun::models {
namespace {

// What distinguishes the architectures that share the llama graph.
struct LlamaVariant {
  RopeMode rope_mode = RopeMode::kNormal;
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias, required (qwen2)
  bool qk_norm = false;   // blk.N.attn_{q,k}_norm.weight, required (qwen3)
};

constexpr LlamaVariant kLlama{};
constexpr LlamaVariant kQwen2{RopeMode::kNeox, true, false};
constexpr LlamaVariant kQwen3{RopeMode::kNeox, false, true};

struct LlamaLayer {
  Tensor attn_norm;  // [n_embd]
  AttentionWeights attn;
  Tensor ffn_norm;  // [n_embd]
  FfnWeights ffn;
};

class LlamaModel final : public Model {
 public:
  static Result<std::unique_ptr<Model>> load(const gguf::File& file, const ModelOptions& options,
                                             const LlamaVariant& variant);

  const ModelHparams& hparams() const override { return hp_; }
  int64_t n_batch() const override { return n_batch_; }
  Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                       bool all_logits, float* logits_out) override;
  Result<void> check_backend(const Backend& backend) const override;

 private:
  Result<void> bind_weights(const gguf::File& file);
  void allocate_scratch();
  // One chunk of at most n_batch tokens; logits (may be null) gets the requested rows.
  void forward_chunk(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                     bool all_logits, float* logits);

  LlamaVariant variant_;
  ModelHparams hp_;
  int64_t n_batch_ = 0;
  AttentionConfig attn_config_;

  Tensor tok_embd_;  // [n_embd, n_vocab]
  std::vector<LlamaLayer> layers_;
  Tensor output_norm_;  // [n_embd]
  Tensor output_;       // [n_embd, n_vocab]; token_embd when the file has no output.weight

  // Scratch, [n_batch, ...] each.
  std::vector<float> x_;            // [n_batch, n_embd] residual stream
  std::vector<float> xn_;           // [n_batch, n_embd] normed input / block output
  std::vector<float> q_;            // [n_batch, n_head * head_dim]
  std::vector<float> k_;            // [n_batch, n_head_kv * head_dim]
  std::vector<float> v_;            // [n_batch, n_head_kv * head_dim]
  std::vector<float> attn_;         // [n_batch, n_head * head_dim]
  std::vector<float> gate_;         // [n_batch, n_ff]
  std::vector<float> up_;           // [n_batch, n_ff]
  std::vector<int32_t> positions_;  // [n_batch]
};

Result<void> LlamaModel::bind_weights(const gguf::File& file) {
  const WeightBinder b(file);
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;
  const int64_t n_kv = hp_.n_head_kv * hp_.head_dim;

  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr)
    return file.error(ErrorCode::kFormat, "tensor 'token_embd.weight' is missing");
  hp_.n_vocab = embd->ne[1];
  const auto bind = [&](const std::string& name, std::vector<int64_t> shape, WeightUse use,
                        Tensor* out) -> Result<void> {
    Result<Tensor> t = b.bind(name, std::move(shape), use);
    if (!t.ok()) return t.error();
    *out = *t;
    return {};
  };
  QRUN_TRY(bind("token_embd.weight", {n_embd, hp_.n_vocab}, WeightUse::kGetRows, &tok_embd_));
  QRUN_TRY(bind("output_norm.weight", {n_embd}, WeightUse::kF32, &output_norm_));
  Result<std::optional<Tensor>> output =
      b.bind_optional("output.weight", {n_embd, hp_.n_vocab}, WeightUse::kMatMul);
  if (!output.ok()) return output.error();
  if (output->has_value()) {
    output_ = **output;
  } else {
    QRUN_TRY(bind("token_embd.weight", {n_embd, hp_.n_vocab}, WeightUse::kMatMul, &output_));
  }
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
    QRUN_TRY(bind(p + "attn_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_norm));
    QRUN_TRY(bind(p + "attn_q.weight", {n_embd, n_q}, WeightUse::kMatMul, &l.attn.wq));
    QRUN_TRY(bind(p + "attn_k.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wk));
    QRUN_TRY(bind(p + "attn_v.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wv));
    QRUN_TRY(bind(p + "attn_output.weight", {n_q, n_embd}, WeightUse::kMatMul, &l.attn.wo));
    QRUN_TRY(bind(p + "ffn_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_norm));
    QRUN_TRY(bind(p + "ffn_gate.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.gate));
    QRUN_TRY(bind(p + "ffn_up.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.up));
    QRUN_TRY(bind(p + "ffn_down.weight", {hp_.n_ff, n_embd}, WeightUse::kMatMul, &l.ffn.down));
    if (variant_.qkv_bias) {
      QRUN_TRY(bind(p + "attn_q.bias", {n_q}, WeightUse::kF32, &l.attn.bq));
      QRUN_TRY(bind(p + "attn_k.bias", {n_kv}, WeightUse::kF32, &l.attn.bk));
      QRUN_TRY(bind(p + "attn_v.bias", {n_kv}, WeightUse::kF32, &l.attn.bv));
    } else {
      for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
        QRUN_TRY(b.reject_if_present(p + bias, "attention biases"));
    }
    QRUN_TRY(b.reject_if_present(p + "attn_output.bias", "attention output biases"));
    if (variant_.qk_norm) {
      QRUN_TRY(bind(p + "attn_q_norm.weight", {hp_.head_dim}, WeightUse::kF32, &l.attn.q_norm));
      QRUN_TRY(bind(p + "attn_k_norm.weight", {hp_.head_dim}, WeightUse::kF32, &l.attn.k_norm));
    } else {
      for (const char* norm : {"attn_q_norm.weight", "attn_k_norm.weight"})
        QRUN_TRY(b.reject_if_present(p + norm, "per-head Q/K norms"));
    }
    QRUN_TRY(b.reject_if_present(p + "ffn_gate_inp.weight", "mixture-of-experts layers"));
  }
  return {};
}

void LlamaModel::allocate_scratch() {
  const auto n = static_cast<size_t>(n_batch_);
  const auto n_q = static_cast<size_t>(hp_.n_head * hp_.head_dim);
  const auto n_kv = static_cast<size_t>(hp_.n_head_kv * hp_.head_dim);
  x_.resize(n * static_cast<size_t>(hp_.n_embd));
  xn_.resize(n * static_cast<size_t>(hp_.n_embd));
  q_.resize(n * n_q);
  k_.resize(n * n_kv);
  v_.resize(n * n_kv);
  attn_.resize(n * n_q);
  gate_.resize(n * static_cast<size_t>(hp_.n_ff));
  up_.resize(n * static_cast<size_t>(hp_.n_ff));
  positions_.resize(n);
}

Result<std::unique_ptr<Model>> LlamaModel::load(const gguf::File& file, const ModelOptions& options,
                                                const LlamaVariant& variant) {
  if (options.n_batch <= 0 || options.n_batch > (int64_t{1} << 20)) {
    return make_error(ErrorCode::kUsage, format("batch size %lld must be in 1 .. 1048576",
                                                static_cast<long long>(options.n_batch)));
  }
  auto m = std::make_unique<LlamaModel>();
  m->n_batch_ = options.n_batch;
  m->variant_ = variant;
  Result<ModelHparams> hp = read_decoder_hparams(file);
  if (!hp.ok()) return hp.error();
  m->hp_ = std::move(*hp);
  QRUN_TRY(m->bind_weights(file));
  AttentionConfig& a = m->attn_config_;
  a.attn = AttentionParams{m->hp_.n_head, m->hp_.n_head_kv, m->hp_.head_dim,
                           1.0f / std::sqrt(static_cast<float>(m->hp_.head_dim))};
  a.rope.n_rot = m->hp_.n_rot;
  a.rope.freq_base = m->hp_.rope_freq_base;
  a.rope.freq_scale = m->hp_.rope_freq_scale;
  a.rope.mode = variant.rope_mode;
  a.norm_eps = m->hp_.norm_eps;
  m->allocate_scratch();
  return std::unique_ptr<Model>(std::move(m));
}

Result<void> LlamaModel::check_backend(const Backend& backend) const {
  QRUN_TRY(check_op(backend, Op::kGetRows, tok_embd_));
  QRUN_TRY(check_op(backend, Op::kRmsNorm, output_norm_));
  QRUN_TRY(check_op(backend, Op::kMatMul, output_));
  for (const LlamaLayer& l : layers_) {
    for (const Tensor* t :
         {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.ffn.gate, &l.ffn.up, &l.ffn.down}) {
      QRUN_TRY(check_op(backend, Op::kMatMul, *t));
    }
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.attn_norm));
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.ffn_norm));
    for (const Tensor* t : {&l.attn.q_norm, &l.attn.k_norm}) {
      if (t->data != nullptr) QRUN_TRY(check_op(backend, Op::kRmsNorm, *t));
    }
  }
  return {};
}

Result<void> LlamaModel::forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                                 KvCache& kv, bool all_logits, float* logits_out) {
  QRUN_TRY(check_forward_args(hp_, tokens, pos, kv));
  forward_in_chunks(hp_, n_batch_, tokens, pos, kv, all_logits, logits_out,
                    [&](std::span<const int32_t> chunk, int64_t chunk_pos, float* logits) {
                      forward_chunk(backend, chunk, chunk_pos, kv, all_logits, logits);
                    });
  return {};
}

void LlamaModel::forward_chunk(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                               KvCache& kv, bool all_logits, float* logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = hp_.n_embd;
  const BlockScratch s{q_.data(), k_.data(), v_.data(), attn_.data(), gate_.data(), up_.data()};
  for (int64_t t = 0; t < n; ++t)
    positions_[static_cast<size_t>(t)] = static_cast<int32_t>(pos + t);
  const std::span<const int32_t> positions(positions_.data(), static_cast<size_t>(n));
  float* x = x_.data();
  float* xn = xn_.data();

  // x: [n, n_embd] token embeddings
  backend.get_rows(tok_embd_, tokens, x);

  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const LlamaLayer& l = layers_[static_cast<size_t>(il)];
    // Attention. xn: [n, n_embd] normed, then the attention output; x += xn
    backend.rms_norm(x, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    self_attention(backend, l.attn, attn_config_, kv.layer(il), xn, n, pos, positions, s, xn);
    backend.add(x, xn, n * n_embd, x);
    // Feed-forward. xn: [n, n_embd] normed, then the FFN output; x += xn
    backend.rms_norm(x, l.ffn_norm, n, n_embd, hp_.norm_eps, xn);
    gated_ffn(backend, l.ffn, FfnActivation::kSilu, xn, n, s, xn);
    backend.add(x, xn, n * n_embd, x);
  }
  if (logits == nullptr) return;

  // Output: the rows asked for (every token, or the last), normed and projected.
  // xn: [rows, n_embd]; logits: [rows, n_vocab]
  const int64_t rows = all_logits ? n : 1;
  backend.rms_norm(x + (n - rows) * n_embd, output_norm_, rows, n_embd, hp_.norm_eps, xn);
  backend.matmul(output_, xn, rows, logits);
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

}  // namespace qrun::models
