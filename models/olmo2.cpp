// Olmo2Model: AI2's OLMo 2 (and OLMo 3), as llama.cpp's olmo2 graph computes it. Against
// llama: a layer's input goes to Q, K and V and to the FFN without a norm; Q and K are
// RMS-normed over each token's whole row before RoPE (neox); the attention's and the FFN's
// outputs are RMS-normed (post_attention_norm, post_ffw_norm) before their residual adds.
// With "olmo2.attention.sliding_window" (OLMo 3), sliding_window_pattern - 1 of every
// sliding_window_pattern layers (default 4) attend that window, with the global RoPE base
// (or rope.freq_base_swa) and neither RoPE scaling nor YaRN; the others attend the whole
// context with the file's RoPE.
#include "models/olmo2.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/common_blocks.h"
#include "models/forward_step.h"

namespace qrun::models {
namespace {

struct Olmo2Layer {
  AttentionWeights attn;  // with whole-row q_norm and k_norm
  Tensor attn_post_norm;  // [n_embd]
  FfnWeights ffn;
  Tensor ffn_post_norm;    // [n_embd]
  AttentionConfig config;  // window and RoPE differ between local and global layers
};

class Olmo2Model final : public Model {
 public:
  static Result<std::unique_ptr<Model>> load(const gguf::File& file, const ModelOptions& options);

  const ModelHparams& hparams() const override { return hp_; }
  int64_t n_batch() const override { return n_batch_; }
  Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                       bool all_logits, float* logits_out) override;
  Result<void> forward_batch(Backend& backend, std::span<const SeqForward> seqs) override;
  Result<void> check_backend(const Backend& backend) const override;
  std::optional<RopeParams> key_rope(int64_t il, int64_t /*n_ctx*/) const override {
    return layers_[static_cast<size_t>(il)].config.rope;
  }

 private:
  Result<void> read_windows(const gguf::File& file);
  Result<void> bind_weights(const gguf::File& file);
  void forward_step(Backend& backend, const ForwardStep& step);

  ModelHparams hp_;
  int64_t n_batch_ = 0;
  float rope_base_local_ = 0.0f;
  EmbeddingWeights embd_;
  std::vector<Olmo2Layer> layers_;
  DecoderScratch scratch_;
};

Result<void> Olmo2Model::read_windows(const gguf::File& file) {
  const std::string& a = hp_.arch;
  hp_.attn_window.assign(static_cast<size_t>(hp_.n_layer), 0);
  Result<int64_t> window = file.get_int_or(a + ".attention.sliding_window", 0);
  if (!window.ok()) return window.error();
  if (*window < 0 || *window > (int64_t{1} << 24)) {
    return file.error(ErrorCode::kFormat, format("key '%s.attention.sliding_window' is %lld",
                                                 a.c_str(), static_cast<long long>(*window)));
  }
  Result<double> base = file.get_float_or(a + ".rope.freq_base_swa", hp_.rope_freq_base);
  if (!base.ok()) return base.error();
  if (!(*base > 0.0 && *base < 1e30)) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s.rope.freq_base_swa' is %g", a.c_str(), *base));
  }
  rope_base_local_ = static_cast<float>(*base);
  if (*window == 0) return {};
  Result<int64_t> period = read_positive(file, a, "attention.sliding_window_pattern", 4);
  if (!period.ok()) return period.error();
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (il % *period < *period - 1) hp_.attn_window[static_cast<size_t>(il)] = *window;
  }
  return {};
}

Result<void> Olmo2Model::bind_weights(const gguf::File& file) {
  const WeightBinder b(file);
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;
  const int64_t n_kv = hp_.n_head_kv * hp_.head_dim;
  Result<EmbeddingWeights> embd = bind_embedding_weights(file, hp_);
  if (!embd.ok()) return embd.error();
  embd_ = *embd;
  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    Olmo2Layer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    QRUN_TRY(b.bind(p + "attn_q.weight", {n_embd, n_q}, WeightUse::kMatMul, &l.attn.wq));
    QRUN_TRY(b.bind(p + "attn_k.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wk));
    QRUN_TRY(b.bind(p + "attn_v.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wv));
    QRUN_TRY(b.bind(p + "attn_output.weight", {n_q, n_embd}, WeightUse::kMatMul, &l.attn.wo));
    QRUN_TRY(b.bind(p + "attn_q_norm.weight", {n_q}, WeightUse::kF32, &l.attn.q_norm));
    QRUN_TRY(b.bind(p + "attn_k_norm.weight", {n_kv}, WeightUse::kF32, &l.attn.k_norm));
    QRUN_TRY(
        b.bind(p + "post_attention_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_post_norm));
    QRUN_TRY(b.bind(p + "ffn_gate.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.gate));
    QRUN_TRY(b.bind(p + "ffn_up.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.up));
    QRUN_TRY(b.bind(p + "ffn_down.weight", {hp_.n_ff, n_embd}, WeightUse::kMatMul, &l.ffn.down));
    QRUN_TRY(b.bind(p + "post_ffw_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_post_norm));
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"})
      QRUN_TRY(b.reject_if_present(p + bias, "attention biases"));
  }
  return {};
}

Result<std::unique_ptr<Model>> Olmo2Model::load(const gguf::File& file,
                                                const ModelOptions& options) {
  QRUN_TRY(check_model_options(options));
  auto m = std::make_unique<Olmo2Model>();
  m->n_batch_ = options.n_batch;
  Result<ModelHparams> hp = read_decoder_hparams(file);
  if (!hp.ok()) return hp.error();
  m->hp_ = std::move(*hp);
  QRUN_TRY(m->read_windows(file));
  QRUN_TRY(m->bind_weights(file));
  const ModelHparams& h = m->hp_;
  // The local layers: the global base (or their own) and no scaling at all (llama.cpp passes
  // freq_scale 1, ext_factor 0, attn_factor 1 for them).
  ModelHparams local_hp = h;
  local_hp.rope_yarn = false;
  local_hp.rope_attn_factor = 1.0f;
  for (size_t il = 0; il < m->layers_.size(); ++il) {
    AttentionConfig& c = m->layers_[il].config;
    const int64_t window = h.attn_window[il];
    c.attn = AttentionParams{h.n_head, h.n_head_kv, h.head_dim,
                             1.0f / std::sqrt(static_cast<float>(h.head_dim)), window};
    c.rope = window > 0 ? decoder_rope(local_hp, RopeMode::kNeox, m->rope_base_local_, 1.0f)
                        : decoder_rope(h, RopeMode::kNeox, h.rope_freq_base, h.rope_freq_scale);
    c.norm_eps = h.norm_eps;
  }
  m->scratch_.allocate(h, m->n_batch_, options.n_seq);
  return std::unique_ptr<Model>(std::move(m));
}

Result<void> Olmo2Model::check_backend(const Backend& backend) const {
  QRUN_TRY(check_embedding_ops(backend, embd_));
  for (const Olmo2Layer& l : layers_) {
    QRUN_TRY(check_block_ops(backend, l.attn, &l.ffn));
    for (const Tensor* t : {&l.attn_post_norm, &l.ffn_post_norm}) {
      QRUN_TRY(check_op(backend, Op::kRmsNorm, *t));
    }
  }
  return {};
}

Result<void> Olmo2Model::forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                                 KvCache& kv, bool all_logits, float* logits_out) {
  const SeqForward seq{tokens, pos, &kv, all_logits, logits_out};
  return forward_batch(backend, std::span<const SeqForward>(&seq, 1));
}

Result<void> Olmo2Model::forward_batch(Backend& backend, std::span<const SeqForward> seqs) {
  return forward_in_steps(hp_, scratch_, seqs,
                          [&](const ForwardStep& step) { forward_step(backend, step); });
}

void Olmo2Model::forward_step(Backend& backend, const ForwardStep& step) {
  const int64_t n = step.n();
  const int64_t n_embd = hp_.n_embd;
  const DecoderScratch::Scope scope = scratch_.use(backend);
  const BlockScratch s = scratch_.blocks();
  float* x = scratch_.x();
  float* xn = scratch_.xn();

  // x: [n, n_embd] token embeddings, every sequence's rows together
  backend.get_rows(embd_.tok_embd, step.tokens, x);
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const Olmo2Layer& l = layers_[static_cast<size_t>(il)];
    // x += post_norm(attention(x)); x += post_norm(ffn(x))
    self_attention(backend, l.attn, l.config, il, step, x, s, xn);
    backend.rms_norm(xn, l.attn_post_norm, n, n_embd, hp_.norm_eps, xn);
    backend.add(x, xn, n * n_embd, x);
    gated_ffn(backend, l.ffn, FfnActivation::kSilu, x, n, s, xn);
    backend.rms_norm(xn, l.ffn_post_norm, n, n_embd, hp_.norm_eps, xn);
    backend.add(x, xn, n * n_embd, x);
  }
  // Output: the rows each sequence asks for (every token, or its last), normed and projected.
  step_logits(backend, hp_, embd_, scratch_, step);
}

}  // namespace

Result<std::unique_ptr<Model>> load_olmo2(const gguf::File& file, const ModelOptions& options) {
  return Olmo2Model::load(file, options);
}

}  // namespace qrun::models
