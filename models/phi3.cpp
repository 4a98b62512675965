// Phi3Model: the Phi-3 decoder as llama.cpp's phi3 graph computes it. Against llama:
// - Q, K and V come from one attn_qkv matrix [n_embd, n_q + 2 n_kv] (optionally biased);
//   its three row ranges are bound as views, so each is multiplied on its own with no copy.
//   Files with separate attn_q / attn_k / attn_v are accepted too, as llama.cpp does.
// - ffn_up [n_embd, 2 n_ff] holds the gate (rows 0 .. n_ff - 1) then the up projection;
//   there is no ffn_gate. SwiGLU: down(silu(gate x) * up x).
// - RoPE is neox. LongRoPE models carry rope_factors_long / rope_factors_short ([n_rot/2]):
//   llama.cpp uses the long ones when the context, rounded up to a multiple of 256 as its
//   context is, exceeds rope.scaling.original_context_length (default: context_length),
//   else the short ones; and scales cos and sin by rope.scaling.attn_factor (default 1)
//   at every context size.
// - q is scaled by 1/sqrt(head_dim) after RoPE and attends with scale 1.
// - An output.bias, where present, is added to the logits.
// phi3.attention.sliding_window is not applied: llama.cpp disabled it for Phi models
// (ggml-org/llama.cpp#13676; which layers use it is unclear and Phi-4 writes 0), and qrun
// computes what llama.cpp computes.
#include "models/phi3.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/common_blocks.h"
#include "models/forward_step.h"

namespace qrun::models {
namespace {

// llama.cpp rounds every context up to a multiple of this before choosing rope factors.
constexpr int64_t kLlamaCppCtxPad = 256;

struct Phi3Layer {
  Tensor attn_norm;       // [n_embd]
  AttentionWeights attn;  // wq, wk, wv (and biases): row ranges of attn_qkv when fused
  Tensor ffn_norm;        // [n_embd]
  FfnWeights ffn;         // gate, up: the two halves of ffn_up
};

// Elements first .. first + n - 1 of a vector, as a vector sharing its data.
Tensor elements(const Tensor& v, int64_t first, int64_t n) {
  Tensor t = v;
  t.n_dims = 1;
  t.ne = {n, 1, 1, 1};
  t.data = static_cast<const uint8_t*>(v.data) + row_size(v.type, first);
  return t;
}

class Phi3Model final : public Model {
 public:
  static Result<std::unique_ptr<Model>> load(const gguf::File& file, const ModelOptions& options);

  const ModelHparams& hparams() const override { return hp_; }
  int64_t n_batch() const override { return n_batch_; }
  Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                       bool all_logits, float* logits_out) override;
  Result<void> forward_batch(Backend& backend, std::span<const SeqForward> seqs) override;
  Result<void> check_backend(const Backend& backend) const override;
  std::optional<RopeParams> key_rope(int64_t il, int64_t n_ctx) const override;

 private:
  Result<void> read_phi3_hparams(const gguf::File& file);
  Result<void> bind_weights(const gguf::File& file);
  Result<void> bind_attention(const WeightBinder& b, const gguf::File& file, const std::string& p,
                              AttentionWeights* attn);
  // One step of at most n_batch tokens (models/forward_step.h).
  void forward_step(Backend& backend, const ForwardStep& step);
  // The LongRoPE factors for a cache of n_ctx positions (null when the file has none).
  const float* rope_factors(int64_t n_ctx) const;

  ModelHparams hp_;
  int64_t n_batch_ = 0;
  int64_t n_ctx_orig_ = 0;  // rope.scaling.original_context_length
  AttentionConfig attn_config_;
  const float* rope_long_ = nullptr;   // [n_rot / 2] or null
  const float* rope_short_ = nullptr;  // [n_rot / 2] or null

  EmbeddingWeights embd_;
  std::vector<Phi3Layer> layers_;
  Tensor output_bias_;  // [n_vocab], F32, optional
  DecoderScratch scratch_;
};

Result<void> Phi3Model::read_phi3_hparams(const gguf::File& file) {
  const std::string& a = hp_.arch;
  Result<int64_t> orig =
      read_positive(file, a, "rope.scaling.original_context_length", hp_.n_ctx_train);
  if (!orig.ok()) return orig.error();
  n_ctx_orig_ = *orig;
  Result<double> attn_factor = file.get_float_or(a + ".rope.scaling.attn_factor", 1.0);
  if (!attn_factor.ok()) return attn_factor.error();
  if (!(*attn_factor > 0.0 && *attn_factor < 100.0)) {
    return file.error(ErrorCode::kFormat, format("key '%s.rope.scaling.attn_factor' is %g, "
                                                 "expected a positive factor below 100",
                                                 a.c_str(), *attn_factor));
  }
  attn_config_.rope.attn_factor = static_cast<float>(*attn_factor);
  return {};
}

Result<void> Phi3Model::bind_attention(const WeightBinder& b, const gguf::File& file,
                                       const std::string& p, AttentionWeights* attn) {
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;
  const int64_t n_kv = hp_.n_head_kv * hp_.head_dim;
  const std::string qkv_name = p + "attn_qkv.weight";
  if (file.find_tensor(qkv_name) != nullptr) {
    // Fused: rows [0, n_q) are Q, then n_kv rows of K, then n_kv rows of V.
    Result<Tensor> qkv = b.bind(qkv_name, {n_embd, n_q + 2 * n_kv}, WeightUse::kMatMul);
    if (!qkv.ok()) return qkv.error();
    attn->wq = qkv->rows(0, n_q);
    attn->wk = qkv->rows(n_q, n_kv);
    attn->wv = qkv->rows(n_q + n_kv, n_kv);
    Result<std::optional<Tensor>> bias =
        b.bind_optional(p + "attn_qkv.bias", {n_q + 2 * n_kv}, WeightUse::kF32);
    if (!bias.ok()) return bias.error();
    if (bias->has_value()) {
      attn->bq = elements(**bias, 0, n_q);
      attn->bk = elements(**bias, n_q, n_kv);
      attn->bv = elements(**bias, n_q + n_kv, n_kv);
    }
    for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"})
      QRUN_TRY(b.reject_if_present(p + part, "separate Q/K/V next to a fused attn_qkv"));
    return {};
  }
  if (file.find_tensor(p + "attn_q.weight") == nullptr) {
    return file.error(ErrorCode::kFormat,
                      format("tensor '%s' is missing (and there is no separate '%sattn_q.weight')",
                             qkv_name.c_str(), p.c_str()));
  }
  QRUN_TRY(b.bind(p + "attn_q.weight", {n_embd, n_q}, WeightUse::kMatMul, &attn->wq));
  QRUN_TRY(b.bind(p + "attn_k.weight", {n_embd, n_kv}, WeightUse::kMatMul, &attn->wk));
  QRUN_TRY(b.bind(p + "attn_v.weight", {n_embd, n_kv}, WeightUse::kMatMul, &attn->wv));
  QRUN_TRY(b.bind_optional(p + "attn_q.bias", {n_q}, WeightUse::kF32, &attn->bq));
  QRUN_TRY(b.bind_optional(p + "attn_k.bias", {n_kv}, WeightUse::kF32, &attn->bk));
  QRUN_TRY(b.bind_optional(p + "attn_v.bias", {n_kv}, WeightUse::kF32, &attn->bv));
  return {};
}

Result<void> Phi3Model::bind_weights(const gguf::File& file) {
  const WeightBinder b(file);
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;

  Result<EmbeddingWeights> embd = bind_embedding_weights(file, hp_);
  if (!embd.ok()) return embd.error();
  embd_ = *embd;
  QRUN_TRY(b.bind_optional("output.bias", {hp_.n_vocab}, WeightUse::kF32, &output_bias_));
  Tensor rope_long, rope_short;
  QRUN_TRY(
      b.bind_optional("rope_factors_long.weight", {hp_.n_rot / 2}, WeightUse::kF32, &rope_long));
  QRUN_TRY(
      b.bind_optional("rope_factors_short.weight", {hp_.n_rot / 2}, WeightUse::kF32, &rope_short));
  rope_long_ = static_cast<const float*>(rope_long.data);
  rope_short_ = static_cast<const float*>(rope_short.data);
  hp_.has_rope_freqs = rope_long_ != nullptr || rope_short_ != nullptr;

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    Phi3Layer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    QRUN_TRY(b.bind(p + "attn_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_norm));
    QRUN_TRY(bind_attention(b, file, p, &l.attn));
    QRUN_TRY(b.bind(p + "attn_output.weight", {n_q, n_embd}, WeightUse::kMatMul, &l.attn.wo));
    QRUN_TRY(b.bind(p + "ffn_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_norm));
    // Gate first, then up, as llama.cpp's SwiGLU splits the fused product.
    Tensor up;
    QRUN_TRY(b.bind(p + "ffn_up.weight", {n_embd, 2 * hp_.n_ff}, WeightUse::kMatMul, &up));
    l.ffn.gate = up.rows(0, hp_.n_ff);
    l.ffn.up = up.rows(hp_.n_ff, hp_.n_ff);
    QRUN_TRY(b.bind(p + "ffn_down.weight", {hp_.n_ff, n_embd}, WeightUse::kMatMul, &l.ffn.down));
    QRUN_TRY(b.reject_if_present(p + "ffn_gate.weight", "separate FFN gates (phi3 fuses them)"));
    QRUN_TRY(b.reject_if_present(p + "attn_output.bias", "attention output biases"));
    QRUN_TRY(b.reject_if_present(p + "ffn_gate_inp.weight", "mixture-of-experts layers"));
  }
  return {};
}

Result<std::unique_ptr<Model>> Phi3Model::load(const gguf::File& file,
                                               const ModelOptions& options) {
  QRUN_TRY(check_model_options(options));
  auto m = std::make_unique<Phi3Model>();
  m->n_batch_ = options.n_batch;
  Result<ModelHparams> hp = read_decoder_hparams(file);
  if (!hp.ok()) return hp.error();
  m->hp_ = std::move(*hp);
  if (m->hp_.rope_yarn) {
    return file.error(ErrorCode::kUnsupported,
                      "rope scaling type 'yarn' is not supported for phi3 (LongRoPE is)");
  }
  QRUN_TRY(m->read_phi3_hparams(file));
  QRUN_TRY(m->bind_weights(file));

  const ModelHparams& h = m->hp_;
  AttentionConfig& a = m->attn_config_;
  a.attn = AttentionParams{h.n_head, h.n_head_kv, h.head_dim, 1.0f};
  a.rope.n_rot = h.n_rot;
  a.rope.freq_base = h.rope_freq_base;
  a.rope.freq_scale = h.rope_freq_scale;
  a.rope.mode = RopeMode::kNeox;
  a.norm_eps = h.norm_eps;
  a.q_scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));

  m->scratch_.allocate(h, m->n_batch_, options.n_seq);
  return std::unique_ptr<Model>(std::move(m));
}

Result<void> Phi3Model::check_backend(const Backend& backend) const {
  QRUN_TRY(check_embedding_ops(backend, embd_));
  for (const Phi3Layer& l : layers_) {
    QRUN_TRY(check_block_ops(backend, l.attn, &l.ffn));
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.attn_norm));
    QRUN_TRY(check_op(backend, Op::kRmsNorm, l.ffn_norm));
  }
  return {};
}

// LongRoPE: the long factors past the original context, as llama.cpp decides it.
const float* Phi3Model::rope_factors(int64_t n_ctx) const {
  const int64_t n_ctx_padded = (n_ctx + kLlamaCppCtxPad - 1) / kLlamaCppCtxPad * kLlamaCppCtxPad;
  return n_ctx_padded > n_ctx_orig_ ? rope_long_ : rope_short_;
}

std::optional<RopeParams> Phi3Model::key_rope(int64_t /*il*/, int64_t n_ctx) const {
  RopeParams rope = attn_config_.rope;
  rope.freq_factors = rope_factors(n_ctx);
  return rope;
}

Result<void> Phi3Model::forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                                KvCache& kv, bool all_logits, float* logits_out) {
  const SeqForward seq{tokens, pos, &kv, all_logits, logits_out};
  return forward_batch(backend, std::span<const SeqForward>(&seq, 1));
}

Result<void> Phi3Model::forward_batch(Backend& backend, std::span<const SeqForward> seqs) {
  // The RoPE factors follow each cache's context length; sequences whose caches pick
  // different ones (short and long) cannot share a step's RoPE, and go one at a time.
  if (seqs.empty()) return {};
  const float* factors = rope_factors(seqs.front().kv != nullptr ? seqs.front().kv->n_ctx() : 0);
  for (const SeqForward& s : seqs) {
    if (s.kv != nullptr && rope_factors(s.kv->n_ctx()) != factors) {
      for (const SeqForward& one : seqs) {
        QRUN_TRY(forward_batch(backend, std::span<const SeqForward>(&one, 1)));
      }
      return {};
    }
  }
  attn_config_.rope.freq_factors = factors;
  return forward_in_steps(hp_, scratch_, seqs,
                          [&](const ForwardStep& step) { forward_step(backend, step); });
}

void Phi3Model::forward_step(Backend& backend, const ForwardStep& step) {
  const int64_t n = step.n();
  const int64_t n_embd = hp_.n_embd;
  const DecoderScratch::Scope scope = scratch_.use(backend);
  const BlockScratch s = scratch_.blocks();
  float* x = scratch_.x();
  float* xn = scratch_.xn();

  // x: [n, n_embd] token embeddings, every sequence's rows together
  backend.get_rows(embd_.tok_embd, step.tokens, x);

  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const Phi3Layer& l = layers_[static_cast<size_t>(il)];
    // Attention. x += xn (the last layer's FFN output), xn: [n, n_embd] x normed, then the
    // attention output
    if (il == 0) {
      backend.rms_norm(x, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    } else {
      backend.add_rms_norm(x, xn, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    }
    self_attention(backend, l.attn, attn_config_, il, step, xn, s, xn);
    // Feed-forward. x += xn, xn: x normed, then the FFN output
    backend.add_rms_norm(x, xn, l.ffn_norm, n, n_embd, hp_.norm_eps, xn);
    gated_ffn(backend, l.ffn, FfnActivation::kSilu, xn, n, s, xn);
  }
  backend.add(x, xn, n * n_embd, x);

  // Output: the rows each sequence asks for (every token, or its last), normed, projected,
  // biased. logits: [rows, n_vocab] per piece
  step_logits(backend, hp_, embd_, scratch_, step);
  if (output_bias_.data == nullptr) return;
  const auto* bias = static_cast<const float*>(output_bias_.data);
  for (const StepPiece& p : step.pieces) {
    for (int64_t r = 0; r < logit_rows(p); ++r) {
      float* row = p.logits + r * hp_.n_vocab;
      backend.add(row, bias, hp_.n_vocab, row);
    }
  }
}

}  // namespace

Result<std::unique_ptr<Model>> load_phi3(const gguf::File& file, const ModelOptions& options) {
  return Phi3Model::load(file, options);
}

}  // namespace qrun::models
