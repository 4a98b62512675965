// GemmaModel: Google's Gemma 2 and Gemma 3 text decoders, as llama.cpp's gemma2 and gemma3
// graphs compute them. Against llama: the embeddings are scaled by sqrt(n_embd); each block
// is RMS-normed before and after both attention and the feed-forward network; q is scaled
// after RoPE (1/sqrt(key length), or 1/sqrt(n_embd / n_head) for the 27B models) and
// attends with scale 1; the FFN is GELU-gated; local layers attend a sliding window, every
// sliding_window_pattern-th layer the whole context; the output is tied to the embedding
// when absent and soft-capped when the file asks. Gemma 3 adds per-head RMS norms of Q and
// K, and gives its local layers their own RoPE base (10000 unless the file says) and no
// RoPE scaling. Gemma 2 has neither, soft-caps its attention logits (50 unless the file
// says) and its output (30), and alternates local and global layers (a window of 4096).
#include "models/gemma3.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/common_blocks.h"
#include "models/forward_step.h"

namespace qrun::models {
namespace {

struct GemmaLayer {
  Tensor attn_norm;  // [n_embd]
  AttentionWeights attn;
  Tensor attn_post_norm;  // [n_embd]
  Tensor ffn_norm;        // [n_embd]
  FfnWeights ffn;
  Tensor ffn_post_norm;    // [n_embd]
  AttentionConfig config;  // window and RoPE differ between local and global layers
};

// What Gemma 2 and Gemma 3 read differently (llama.cpp's gemma2 and gemma3 loaders).
struct GemmaVariant {
  bool qk_norm;                   // per-head RMS norms of q and k (Gemma 3)
  int64_t default_window;         // the local layers' window when the file has none (0: none)
  int64_t default_period;         // sliding_window_pattern's default
  bool own_local_rope;            // local layers: base freq_base_swa (else the global base)
                                  // and no RoPE scaling (else the global scaling)
  double default_attn_softcap;    // attention logit soft-cap without the key (0: none)
  double default_output_softcap;  // output soft-cap without the key (0: none)
  int64_t n_layer_27b;            // the 27B's layers: q scaled by 1/sqrt(n_embd / n_head)
};

constexpr GemmaVariant kGemma2{.qk_norm = false,
                               .default_window = 4096,
                               .default_period = 2,
                               .own_local_rope = false,
                               .default_attn_softcap = 50.0,
                               .default_output_softcap = 30.0,
                               .n_layer_27b = 46};
constexpr GemmaVariant kGemma3{.qk_norm = true,
                               .default_window = 0,
                               .default_period = 6,
                               .own_local_rope = true,
                               .default_attn_softcap = 0.0,
                               .default_output_softcap = 0.0,
                               .n_layer_27b = 62};

class GemmaModel final : public Model {
 public:
  explicit GemmaModel(const GemmaVariant& variant) : variant_(variant) {}
  static Result<std::unique_ptr<Model>> load(const gguf::File& file, const ModelOptions& options,
                                             const GemmaVariant& variant);

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
  Result<void> read_gemma_hparams(const gguf::File& file);
  Result<void> bind_weights(const gguf::File& file);
  // One step of at most n_batch tokens (models/forward_step.h).
  void forward_step(Backend& backend, const ForwardStep& step);

  const GemmaVariant& variant_;
  ModelHparams hp_;
  int64_t n_batch_ = 0;
  float embd_scale_ = 1.0f;     // sqrt(n_embd)
  float softcap_ = 0.0f;        // final logit soft-capping; 0: none
  float attn_softcap_ = 0.0f;   // attention logit soft-capping; 0: none
  float rope_base_local_ = 0;   // RoPE base of the sliding-window layers
  float rope_scale_local_ = 1;  // and their RoPE frequency scale

  EmbeddingWeights embd_;
  std::vector<GemmaLayer> layers_;
  DecoderScratch scratch_;
};

// Which layers attend a sliding window: "<arch>.attention.sliding_window_pattern" is either
// a period p (layers il with il % p < p - 1 are local, so every p-th is global)
// or one boolean per layer (true: local).
Result<std::vector<bool>> read_swa_layers(const gguf::File& file, const std::string& arch,
                                          int64_t n_layer, int64_t default_period) {
  const std::string key = arch + ".attention.sliding_window_pattern";
  std::vector<bool> local(static_cast<size_t>(n_layer));
  const gguf::Value* v = file.find(key);
  if (v != nullptr && v->type() == gguf::ValueType::kArray) {
    const gguf::Array& a = v->as_array();
    if (static_cast<int64_t>(a.items.size()) != n_layer ||
        !(a.elem_type == gguf::ValueType::kBool || gguf::is_integer_type(a.elem_type))) {
      return file.error(ErrorCode::kFormat, format("key '%s' must be %lld booleans, one per layer",
                                                   key.c_str(), static_cast<long long>(n_layer)));
    }
    for (size_t il = 0; il < local.size(); ++il) local[il] = a.items[il].as_int() != 0;
    return local;
  }
  Result<int64_t> period =
      read_positive(file, arch, "attention.sliding_window_pattern", default_period);
  if (!period.ok()) return period.error();
  for (int64_t il = 0; il < n_layer; ++il) {
    local[static_cast<size_t>(il)] = il % *period < *period - 1;
  }
  return local;
}

Result<void> GemmaModel::read_gemma_hparams(const gguf::File& file) {
  const std::string& a = hp_.arch;
  embd_scale_ = std::sqrt(static_cast<float>(hp_.n_embd));

  Result<int64_t> window =
      file.get_int_or(a + ".attention.sliding_window", variant_.default_window);
  if (!window.ok()) return window.error();
  if (*window < 0 || *window > (int64_t{1} << 24)) {
    return file.error(ErrorCode::kFormat, format("key '%s.attention.sliding_window' is %lld",
                                                 a.c_str(), static_cast<long long>(*window)));
  }
  hp_.attn_window.assign(static_cast<size_t>(hp_.n_layer), 0);
  if (*window > 0) {
    Result<std::vector<bool>> local =
        read_swa_layers(file, a, hp_.n_layer, variant_.default_period);
    if (!local.ok()) return local.error();
    for (size_t il = 0; il < local->size(); ++il) {
      if ((*local)[il]) hp_.attn_window[il] = *window;
    }
  }

  const double base_default = variant_.own_local_rope ? 10000.0 : hp_.rope_freq_base;
  rope_scale_local_ = variant_.own_local_rope ? 1.0f : hp_.rope_freq_scale;
  // Each a finite float >= 0 (the base > 0), or the variant's default when absent.
  const auto read = [&](const char* key, double fallback, bool positive,
                        float* out) -> Result<void> {
    Result<double> v = file.get_float_or(a + "." + key, fallback);
    if (!v.ok()) return v.error();
    if (!std::isfinite(*v) || *v < 0.0 || (positive && *v == 0.0)) {
      return file.error(ErrorCode::kFormat, format("key '%s.%s' is %g", a.c_str(), key, *v));
    }
    *out = static_cast<float>(*v);
    return {};
  };
  QRUN_TRY(read("rope.freq_base_swa", base_default, true, &rope_base_local_));
  QRUN_TRY(read("final_logit_softcapping", variant_.default_output_softcap, false, &softcap_));
  if (variant_.default_attn_softcap > 0.0) {  // (llama.cpp reads the key for Gemma 2 only)
    QRUN_TRY(read("attn_logit_softcapping", variant_.default_attn_softcap, false, &attn_softcap_));
  }
  return {};
}

Result<void> GemmaModel::bind_weights(const gguf::File& file) {
  const WeightBinder b(file);
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_head * hp_.head_dim;
  const int64_t n_kv = hp_.n_head_kv * hp_.head_dim;

  Result<EmbeddingWeights> embd = bind_embedding_weights(file, hp_);
  if (!embd.ok()) return embd.error();
  embd_ = *embd;

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    GemmaLayer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    QRUN_TRY(b.bind(p + "attn_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_norm));
    QRUN_TRY(b.bind(p + "attn_q.weight", {n_embd, n_q}, WeightUse::kMatMul, &l.attn.wq));
    QRUN_TRY(b.bind(p + "attn_k.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wk));
    QRUN_TRY(b.bind(p + "attn_v.weight", {n_embd, n_kv}, WeightUse::kMatMul, &l.attn.wv));
    QRUN_TRY(b.bind(p + "attn_output.weight", {n_q, n_embd}, WeightUse::kMatMul, &l.attn.wo));
    if (variant_.qk_norm) {
      QRUN_TRY(b.bind(p + "attn_q_norm.weight", {hp_.head_dim}, WeightUse::kF32, &l.attn.q_norm));
      QRUN_TRY(b.bind(p + "attn_k_norm.weight", {hp_.head_dim}, WeightUse::kF32, &l.attn.k_norm));
    }
    QRUN_TRY(
        b.bind(p + "post_attention_norm.weight", {n_embd}, WeightUse::kF32, &l.attn_post_norm));
    QRUN_TRY(b.bind(p + "ffn_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_norm));
    QRUN_TRY(b.bind(p + "ffn_gate.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.gate));
    QRUN_TRY(b.bind(p + "ffn_up.weight", {n_embd, hp_.n_ff}, WeightUse::kMatMul, &l.ffn.up));
    QRUN_TRY(b.bind(p + "ffn_down.weight", {hp_.n_ff, n_embd}, WeightUse::kMatMul, &l.ffn.down));
    QRUN_TRY(b.bind(p + "post_ffw_norm.weight", {n_embd}, WeightUse::kF32, &l.ffn_post_norm));
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"})
      QRUN_TRY(b.reject_if_present(p + bias, "attention biases"));
  }
  return {};
}

Result<std::unique_ptr<Model>> GemmaModel::load(const gguf::File& file, const ModelOptions& options,
                                                const GemmaVariant& variant) {
  QRUN_TRY(check_model_options(options));
  auto m = std::make_unique<GemmaModel>(variant);
  m->n_batch_ = options.n_batch;
  Result<ModelHparams> hp = read_decoder_hparams(file);
  if (!hp.ok()) return hp.error();
  m->hp_ = std::move(*hp);
  QRUN_TRY(m->read_gemma_hparams(file));
  QRUN_TRY(m->bind_weights(file));

  const ModelHparams& h = m->hp_;
  // llama.cpp follows gemma_pytorch: the 27B (46 layers for Gemma 2, 62 for Gemma 3) scales
  // by its query_pre_attn_scalar, n_embd / n_head, every other size by the key length.
  const float q_scale = h.n_layer == variant.n_layer_27b
                            ? 1.0f / std::sqrt(static_cast<float>(h.n_embd / h.n_head))
                            : 1.0f / std::sqrt(static_cast<float>(h.head_dim));
  for (size_t il = 0; il < m->layers_.size(); ++il) {
    AttentionConfig& c = m->layers_[il].config;
    const int64_t window = h.attn_window[il];
    c.attn = AttentionParams{h.n_head, h.n_head_kv, h.head_dim, 1.0f, window, m->attn_softcap_};
    c.rope = decoder_rope(h, RopeMode::kNeox, window > 0 ? m->rope_base_local_ : h.rope_freq_base,
                          window > 0 ? m->rope_scale_local_ : h.rope_freq_scale);
    c.norm_eps = h.norm_eps;
    c.q_scale = q_scale;
  }

  m->scratch_.allocate(h, m->n_batch_, options.n_seq);
  return std::unique_ptr<Model>(std::move(m));
}

Result<void> GemmaModel::check_backend(const Backend& backend) const {
  QRUN_TRY(check_embedding_ops(backend, embd_));
  for (const GemmaLayer& l : layers_) {
    QRUN_TRY(check_block_ops(backend, l.attn, &l.ffn));
    for (const Tensor* t : {&l.attn_norm, &l.attn_post_norm, &l.ffn_norm, &l.ffn_post_norm}) {
      QRUN_TRY(check_op(backend, Op::kRmsNorm, *t));
    }
  }
  return {};
}

Result<void> GemmaModel::forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                                 KvCache& kv, bool all_logits, float* logits_out) {
  const SeqForward seq{tokens, pos, &kv, all_logits, logits_out};
  return forward_batch(backend, std::span<const SeqForward>(&seq, 1));
}

Result<void> GemmaModel::forward_batch(Backend& backend, std::span<const SeqForward> seqs) {
  return forward_in_steps(hp_, scratch_, seqs,
                          [&](const ForwardStep& step) { forward_step(backend, step); });
}

void GemmaModel::forward_step(Backend& backend, const ForwardStep& step) {
  const int64_t n = step.n();
  const int64_t n_embd = hp_.n_embd;
  const DecoderScratch::Scope scope = scratch_.use(backend);
  const BlockScratch s = scratch_.blocks();
  float* x = scratch_.x();
  float* xn = scratch_.xn();

  // x: [n, n_embd] token embeddings, every sequence's rows together, scaled by sqrt(n_embd)
  backend.get_rows(embd_.tok_embd, step.tokens, x);
  backend.scale(x, n * n_embd, embd_scale_, x);

  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    const GemmaLayer& l = layers_[static_cast<size_t>(il)];
    // Attention. x += xn (the last layer's FFN output) normed by its post-norm, xn: [n,
    // n_embd] x normed, then the attention output
    if (il == 0) {
      backend.rms_norm(x, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    } else {
      const Tensor& post_norm = layers_[static_cast<size_t>(il - 1)].ffn_post_norm;
      backend.norm_add_rms_norm(x, xn, post_norm, l.attn_norm, n, n_embd, hp_.norm_eps, xn);
    }
    self_attention(backend, l.attn, l.config, il, step, xn, s, xn);
    // Feed-forward. x += xn normed by the attention's post-norm, xn: x normed, then the
    // FFN output
    backend.norm_add_rms_norm(x, xn, l.attn_post_norm, l.ffn_norm, n, n_embd, hp_.norm_eps, xn);
    gated_ffn(backend, l.ffn, FfnActivation::kGelu, xn, n, s, xn);
  }
  backend.rms_norm(xn, layers_.back().ffn_post_norm, n, n_embd, hp_.norm_eps, xn);
  backend.add(x, xn, n * n_embd, x);

  // Output: the rows each sequence asks for (every token, or its last), normed, projected,
  // soft-capped. logits: [rows, n_vocab] per piece
  step_logits(backend, hp_, embd_, scratch_, step);
  if (softcap_ <= 0.0f) return;
  for (const StepPiece& p : step.pieces) {
    if (p.logits != nullptr)
      backend.softcap(p.logits, logit_rows(p) * hp_.n_vocab, softcap_, p.logits);
  }
}

}  // namespace

Result<std::unique_ptr<Model>> load_gemma2(const gguf::File& file, const ModelOptions& options) {
  return GemmaModel::load(file, options, kGemma2);
}

Result<std::unique_ptr<Model>> load_gemma3(const gguf::File& file, const ModelOptions& options) {
  return GemmaModel::load(file, options, kGemma3);
}

}  // namespace qrun::models
