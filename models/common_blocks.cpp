// Weight binding, hyper-parameter reading, forward()'s argument checks and the shared
// attention / FFN blocks.
#include "models/common_blocks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ggml-like/dtype.h"

namespace qrun::models {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* use_name(WeightUse use) {
  switch (use) {
    case WeightUse::kMatMul:
      return "a matrix multiplication";
    case WeightUse::kGetRows:
      return "an embedding lookup";
    case WeightUse::kF32:
      return "this tensor (f32 only)";
  }
  return "?";
}

bool type_allows(DType type, WeightUse use) {
  const TypeTraits& t = type_traits(type);
  switch (use) {
    case WeightUse::kMatMul:
      return t.vec_dot != nullptr;
    case WeightUse::kGetRows:
      return t.to_float != nullptr;
    case WeightUse::kF32:
      return type == DType::kF32;
  }
  return false;
}

}  // namespace

Result<std::optional<Tensor>> WeightBinder::bind_optional(const std::string& name,
                                                          std::vector<int64_t> shape,
                                                          WeightUse use) const {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) return std::optional<Tensor>();
  std::vector<int64_t> actual(info->ne.begin(), info->ne.begin() + info->n_dims);
  // Trailing dimensions of 1 are not significant ([64] equals [64, 1]).
  while (actual.size() > shape.size() && actual.back() == 1) actual.pop_back();
  while (shape.size() > actual.size() && shape.back() == 1) shape.pop_back();
  if (actual != shape) {
    return file_.error(ErrorCode::kFormat,
                       format("tensor '%s' has shape %s, expected %s", name.c_str(),
                              shape_string(actual).c_str(), shape_string(shape).c_str()));
  }
  if (!type_allows(info->type, use)) {
    return file_.error(ErrorCode::kUnsupported,
                       format("tensor '%s' has type %s, which qrun cannot use for %s", name.c_str(),
                              dtype_name(info->type), use_name(use)));
  }
  return std::optional<Tensor>(info->view());
}

Result<Tensor> WeightBinder::bind(const std::string& name, std::vector<int64_t> shape,
                                  WeightUse use) const {
  Result<std::optional<Tensor>> t = bind_optional(name, std::move(shape), use);
  if (!t.ok()) return t.error();
  if (!t->has_value()) {
    return file_.error(ErrorCode::kFormat, format("tensor '%s' is missing", name.c_str()));
  }
  return **t;
}

Result<void> WeightBinder::bind(const std::string& name, std::vector<int64_t> shape, WeightUse use,
                                Tensor* out) const {
  Result<Tensor> t = bind(name, std::move(shape), use);
  if (!t.ok()) return t.error();
  *out = *t;
  return {};
}

Result<void> WeightBinder::bind_optional(const std::string& name, std::vector<int64_t> shape,
                                         WeightUse use, Tensor* out) const {
  Result<std::optional<Tensor>> t = bind_optional(name, std::move(shape), use);
  if (!t.ok()) return t.error();
  if (t->has_value()) *out = **t;
  return {};
}

Result<void> WeightBinder::reject_if_present(const std::string& name, const char* what) const {
  if (file_.find_tensor(name) == nullptr) return {};
  return file_.error(ErrorCode::kUnsupported,
                     format("tensor '%s': %s are not supported", name.c_str(), what));
}

Result<int64_t> read_positive(const gguf::File& file, const std::string& arch,
                              const std::string& suffix, std::optional<int64_t> fallback) {
  const std::string key = arch + "." + suffix;
  Result<int64_t> v = fallback ? file.get_int_or(key, *fallback) : file.get_int(key);
  if (!v.ok()) return v.error();
  // Upper bound keeps every product of two dimensions far from overflow.
  if (*v <= 0 || *v > (int64_t{1} << 24)) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s' is %lld, expected a positive count below 2^24", key.c_str(),
                             static_cast<long long>(*v)));
  }
  return *v;
}

namespace {

// A float key, finite and in (lo, hi], or `fallback` when absent.
Result<float> read_float_in(const gguf::File& file, const std::string& key, double fallback,
                            double lo, double hi) {
  Result<double> v = file.get_float_or(key, fallback);
  if (!v.ok()) return v.error();
  if (!(std::isfinite(*v) && *v > lo && *v <= hi)) {
    return file.error(ErrorCode::kFormat, format("key '%s' is %g", key.c_str(), *v));
  }
  return static_cast<float>(*v);
}

// rope.scaling.attn_factor, and for YaRN its original context, betas and llama.cpp's
// magnitude correction (llama_context's yarn_attn_factor: get_mscale of the factor, over
// the kernel's own 1 + 0.1 ln(factor), which decoder_rope multiplies back), in float as
// llama.cpp computes them.
Result<void> read_yarn(const gguf::File& file, const std::string& a, bool yarn, ModelHparams& hp) {
  Result<float> attn_factor = read_float_in(file, a + ".rope.scaling.attn_factor", 1.0, 0.0, 100.0);
  if (!attn_factor.ok()) return attn_factor.error();
  hp.rope_attn_factor = *attn_factor;
  hp.rope_yarn = yarn;
  Result<int64_t> orig =
      read_positive(file, a, "rope.scaling.original_context_length", hp.n_ctx_train);
  if (!orig.ok()) return orig.error();
  hp.rope_yarn_orig_ctx = *orig;
  if (!yarn) return {};
  Result<float> fast = read_float_in(file, a + ".rope.scaling.yarn_beta_fast", 32.0, 0.0, 1e6);
  if (!fast.ok()) return fast.error();
  Result<float> slow = read_float_in(file, a + ".rope.scaling.yarn_beta_slow", 1.0, 0.0, 1e6);
  if (!slow.ok()) return slow.error();
  Result<double> log_mul = file.get_float_or(a + ".rope.scaling.yarn_log_multiplier", 0.0);
  if (!log_mul.ok()) return log_mul.error();
  if (!std::isfinite(*log_mul) || *log_mul < 0.0 || *log_mul > 100.0) {
    return file.error(ErrorCode::kFormat, format("key '%s.rope.scaling.yarn_log_multiplier' is %g",
                                                 a.c_str(), *log_mul));
  }
  hp.rope_yarn_beta_fast = *fast;
  hp.rope_yarn_beta_slow = *slow;
  const float factor = 1.0f / hp.rope_freq_scale;
  const auto get_mscale = [](float scale, float mscale) {
    return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
  };
  float y = *log_mul != 0.0
                ? get_mscale(factor, 1.0f) / get_mscale(factor, static_cast<float>(*log_mul))
                : get_mscale(factor, 1.0f);
  y *= 1.0f / (1.0f + 0.1f * std::log(factor));
  hp.rope_attn_factor = y * hp.rope_attn_factor;
  return {};
}

}  // namespace

RopeParams decoder_rope(const ModelHparams& hp, RopeMode mode, float freq_base, float freq_scale) {
  RopeParams r;
  r.n_rot = hp.n_rot;
  r.freq_base = freq_base;
  r.freq_scale = freq_scale;
  r.mode = mode;
  r.attn_factor = hp.rope_attn_factor;
  if (!hp.rope_yarn) return r;
  r.ext_factor = 1.0f;
  // ggml's rope_yarn scales cos and sin by attn_factor * (1 + 0.1 ln(1 / freq_scale)).
  r.attn_factor *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  // ggml_rope_yarn_corr_dims: the pairs whose wavelength fits beta_fast and beta_slow
  // times in the original context, floored and ceiled, within 0 .. n_rot - 1.
  const auto corr_dim = [&](float n_turns) {
    return static_cast<float>(hp.n_rot) *
           std::log(static_cast<float>(hp.rope_yarn_orig_ctx) /
                    (n_turns * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  r.yarn_corr[0] = std::max(0.0f, std::floor(corr_dim(hp.rope_yarn_beta_fast)));
  r.yarn_corr[1] =
      std::min(static_cast<float>(hp.n_rot - 1), std::ceil(corr_dim(hp.rope_yarn_beta_slow)));
  return r;
}

Result<ModelHparams> read_decoder_hparams(const gguf::File& file) {
  ModelHparams hp;
  Result<std::string> arch = file.get_string("general.architecture");
  if (!arch.ok()) return arch.error();
  hp.arch = *arch;
  const std::string& a = hp.arch;

  const auto positive = [&](const char* suffix, std::optional<int64_t> fallback,
                            int64_t* out) -> Result<void> {
    Result<int64_t> v = read_positive(file, a, suffix, fallback);
    if (!v.ok()) return v.error();
    *out = *v;
    return {};
  };
  QRUN_TRY(positive("embedding_length", std::nullopt, &hp.n_embd));
  QRUN_TRY(positive("block_count", std::nullopt, &hp.n_layer));
  QRUN_TRY(positive("feed_forward_length", std::nullopt, &hp.n_ff));
  QRUN_TRY(positive("attention.head_count", std::nullopt, &hp.n_head));
  QRUN_TRY(positive("attention.head_count_kv", hp.n_head, &hp.n_head_kv));
  QRUN_TRY(positive("context_length", std::nullopt, &hp.n_ctx_train));
  // Without attention.key_length the head size is n_embd / n_head (Qwen3 sets it apart).
  const bool has_key_length = file.find(a + ".attention.key_length") != nullptr;
  if (!has_key_length && hp.n_embd % hp.n_head != 0) {
    return file.error(ErrorCode::kFormat,
                      format("embedding length %lld is not a multiple of the head count %lld",
                             static_cast<long long>(hp.n_embd), static_cast<long long>(hp.n_head)));
  }
  QRUN_TRY(positive("attention.key_length", hp.n_embd / hp.n_head, &hp.head_dim));
  int64_t value_length = 0;
  QRUN_TRY(positive("attention.value_length", hp.head_dim, &value_length));
  if (value_length != hp.head_dim) {
    return file.error(
        ErrorCode::kUnsupported,
        format("key length %lld differs from value length %lld",
               static_cast<long long>(hp.head_dim), static_cast<long long>(value_length)));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return file.error(
        ErrorCode::kFormat,
        format("head count %lld is not a multiple of the KV head count %lld",
               static_cast<long long>(hp.n_head), static_cast<long long>(hp.n_head_kv)));
  }
  QRUN_TRY(positive("rope.dimension_count", hp.head_dim, &hp.n_rot));
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim) {
    return file.error(
        ErrorCode::kFormat,
        format("key '%s.rope.dimension_count' is %lld; it must be even and at most "
               "the head size %lld",
               a.c_str(), static_cast<long long>(hp.n_rot), static_cast<long long>(hp.head_dim)));
  }

  Result<double> eps = file.get_float(a + ".attention.layer_norm_rms_epsilon");
  if (!eps.ok()) return eps.error();
  Result<double> base = file.get_float_or(a + ".rope.freq_base", 10000.0);
  if (!base.ok()) return base.error();
  if (!(*eps >= 0.0 && *eps < 1.0) || !(*base > 0.0 && std::isfinite(*base))) {
    return file.error(ErrorCode::kFormat,
                      format("bad rms epsilon %g or rope base %g", *eps, *base));
  }
  hp.norm_eps = static_cast<float>(*eps);
  hp.rope_freq_base = static_cast<float>(*base);

  // Rope scaling: linear (positions divided by the factor; llama.cpp's default type), none
  // (the factor ignored) or yarn; others (longrope: phi3 reads its own) are not built here.
  Result<std::string> scaling = file.get_string_or(a + ".rope.scaling.type", "linear");
  if (!scaling.ok()) return scaling.error();
  Result<double> factor = file.get_float_or(a + ".rope.scaling.factor", 0.0);
  if (!factor.ok()) return factor.error();
  if (*factor == 0.0) {
    factor = file.get_float_or(a + ".rope.scale_linear", 0.0);
    if (!factor.ok()) return factor.error();
  }
  if (*scaling != "none" && *scaling != "linear" && *scaling != "yarn") {
    return file.error(
        ErrorCode::kUnsupported,
        format("rope scaling type '%s' is not supported (none, linear, yarn)", scaling->c_str()));
  }
  if (*factor < 0.0 || !std::isfinite(*factor)) {
    return file.error(ErrorCode::kFormat, format("bad rope scaling factor %g", *factor));
  }
  // As llama.cpp: 1 / factor in float, and no scaling at all for type none.
  const float ropescale = static_cast<float>(*factor);
  hp.rope_freq_scale = *scaling == "none" || ropescale == 0.0f ? 1.0f : 1.0f / ropescale;
  QRUN_TRY(read_yarn(file, a, *scaling == "yarn", hp));
  return hp;
}

Result<void> check_model_options(const ModelOptions& options) {
  if (options.n_batch <= 0 || options.n_batch > (int64_t{1} << 20)) {
    return make_error(ErrorCode::kUsage, format("batch size %lld must be in 1 .. 1048576",
                                                static_cast<long long>(options.n_batch)));
  }
  if (options.n_seq <= 0 || options.n_seq > 4096) {
    return make_error(ErrorCode::kUsage, format("%lld sequences per step must be in 1 .. 4096",
                                                static_cast<long long>(options.n_seq)));
  }
  return {};
}

Result<void> check_op(const Backend& backend, Op op, const Tensor& t) {
  if (backend.supports(op, t.type)) return {};
  return make_error(
      ErrorCode::kUnsupported,
      format("the %.*s backend cannot run %s on tensor '%.*s' (%s)",
             static_cast<int>(backend.name().size()), backend.name().data(), op_name(op),
             static_cast<int>(t.name.size()), t.name.data(), dtype_name(t.type)));
}

Result<EmbeddingWeights> bind_embedding_weights(const gguf::File& file, ModelHparams& hp) {
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) {
    return file.error(ErrorCode::kFormat, "tensor 'token_embd.weight' is missing");
  }
  hp.n_vocab = embd->ne[1];
  const WeightBinder b(file);
  EmbeddingWeights w;
  QRUN_TRY(b.bind("token_embd.weight", {hp.n_embd, hp.n_vocab}, WeightUse::kGetRows, &w.tok_embd));
  QRUN_TRY(b.bind("output_norm.weight", {hp.n_embd}, WeightUse::kF32, &w.output_norm));
  const bool tied = file.find_tensor("output.weight") == nullptr;
  QRUN_TRY(b.bind(tied ? "token_embd.weight" : "output.weight", {hp.n_embd, hp.n_vocab},
                  WeightUse::kMatMul, &w.output));
  return w;
}

Result<void> check_embedding_ops(const Backend& backend, const EmbeddingWeights& w) {
  QRUN_TRY(check_op(backend, Op::kGetRows, w.tok_embd));
  QRUN_TRY(check_op(backend, Op::kRmsNorm, w.output_norm));
  return check_op(backend, Op::kMatMul, w.output);
}

Result<void> check_block_ops(const Backend& backend, const AttentionWeights& attn,
                             const FfnWeights* ffn) {
  for (const Tensor* t : {&attn.wq, &attn.wk, &attn.wv, &attn.wo}) {
    QRUN_TRY(check_op(backend, Op::kMatMul, *t));
  }
  if (ffn != nullptr) {
    for (const Tensor* t : {&ffn->gate, &ffn->up, &ffn->down})
      QRUN_TRY(check_op(backend, Op::kMatMul, *t));
  }
  for (const Tensor* t : {&attn.q_norm, &attn.k_norm}) {
    if (t->data != nullptr) QRUN_TRY(check_op(backend, Op::kRmsNorm, *t));
  }
  return {};
}

void DecoderScratch::allocate(const ModelHparams& hp, int64_t n_batch, int64_t n_seq) {
  const auto n = static_cast<size_t>(n_batch);
  const auto n_q = static_cast<size_t>(hp.n_head * hp.head_dim);
  const auto n_kv = static_cast<size_t>(hp.n_head_kv * hp.head_dim);
  x_.resize(n * static_cast<size_t>(hp.n_embd));
  xn_.resize(n * static_cast<size_t>(hp.n_embd));
  q_.resize(n * n_q);
  k_.resize(n * n_kv);
  v_.resize(n * n_kv);
  attn_.resize(n * n_q);
  gate_.resize(n * static_cast<size_t>(hp.n_ff));
  up_.resize(n * static_cast<size_t>(hp.n_ff));
  tokens_.resize(n);
  positions_.resize(n);
  pieces_.resize(static_cast<size_t>(n_seq));
  logits_.resize(n_seq > 1 ? static_cast<size_t>(n_seq * hp.n_vocab) : 0);
}

DecoderScratch::Scope DecoderScratch::use(Backend& backend,
                                          std::span<const std::span<float>> more) {
  // On the stack: a forward step allocates nothing (tests/decode_alloc_test.cpp). Empty
  // buffers are left out, so a dense model declares the same list as before.
  std::array<std::span<float>, 16> buffers = {x_, xn_, q_, k_, v_, attn_, gate_, up_};
  size_t n = 8;
  for (const std::span<float> b : more) {
    if (b.empty()) continue;
    QRUN_CHECK(n < buffers.size(), "more than %zu scratch buffers", buffers.size());
    buffers[n++] = b;
  }
  backend.begin_scratch(std::span<const std::span<float>>(buffers.data(), n));
  return Scope(backend);
}

BlockScratch DecoderScratch::blocks() {
  return BlockScratch{q_.data(), k_.data(), v_.data(), attn_.data(), gate_.data(), up_.data()};
}

Result<void> check_forward_args(const ModelHparams& hp, std::span<const int32_t> tokens,
                                int64_t pos, const KvCache& kv) {
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens == 0) return make_error(ErrorCode::kUsage, "forward: no tokens");
  if (pos < 0 || pos > kv.n_tokens()) {
    return make_error(ErrorCode::kUsage,
                      format("forward: position %lld is past the %lld cached tokens",
                             static_cast<long long>(pos), static_cast<long long>(kv.n_tokens())));
  }
  if (pos + n_tokens > kv.n_ctx()) {
    return make_error(ErrorCode::kContextOverflow,
                      format("%lld tokens at position %lld do not fit in a context of %lld",
                             static_cast<long long>(n_tokens), static_cast<long long>(pos),
                             static_cast<long long>(kv.n_ctx())));
  }
  for (const int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) {
      return make_error(ErrorCode::kUsage,
                        format("token id %d is outside the vocabulary of %lld tokens", t,
                               static_cast<long long>(hp.n_vocab)));
    }
  }
  QRUN_CHECK(
      kv.n_layer() == hp.n_layer && kv.n_head_kv() == hp.n_head_kv && kv.head_dim() == hp.head_dim,
      "KV cache shaped [%lld layers, %lld x %lld] for a model of [%lld, %lld x %lld]",
      static_cast<long long>(kv.n_layer()), static_cast<long long>(kv.n_head_kv()),
      static_cast<long long>(kv.head_dim()), static_cast<long long>(hp.n_layer),
      static_cast<long long>(hp.n_head_kv), static_cast<long long>(hp.head_dim));
  return {};
}

namespace {

// y[t] += bias for each of n rows of y: [n, bias.ne[0]]; nothing when bias is absent.
void add_bias(Backend& backend, const Tensor& bias, int64_t n, float* y) {
  if (bias.data == nullptr) return;
  const int64_t width = bias.ne[0];
  const auto* b = static_cast<const float*>(bias.data);
  for (int64_t t = 0; t < n; ++t) backend.add(y + t * width, b, width, y + t * width);
}

// q rows of the step's tokens times their attention temperature (AttentionConfig), in
// float as llama.cpp computes its attn_scale input (the logarithm in double). The factor is
// 1 below temp_floor and the same over each run of temp_floor positions, so a step scales a
// few runs of rows at most.
void scale_by_temperature(Backend& backend, const AttentionConfig& c, const ForwardStep& step,
                          int64_t n_q, float* q) {
  const auto factor = [&](int64_t pos) {
    const float p = static_cast<float>(pos);
    return static_cast<float>(
        std::log(std::floor(p / static_cast<float>(c.temp_floor)) + 1.0) * c.temp_scale + 1.0);
  };
  for (const StepPiece& piece : step.pieces) {
    for (int64_t t = 0; t < piece.n;) {
      const float f = factor(piece.pos + t);
      int64_t end = t + 1;
      while (end < piece.n && factor(piece.pos + end) == f) ++end;
      float* rows = q + (piece.offset + t) * n_q;
      if (f != 1.0f) backend.scale(rows, (end - t) * n_q, f, rows);
      t = end;
    }
  }
}

}  // namespace

void self_attention(Backend& backend, const AttentionWeights& w, const AttentionConfig& c,
                    int64_t il, const ForwardStep& step, const float* xn, const BlockScratch& s,
                    float* out) {
  const AttentionParams& shape = c.attn;
  const int64_t n = step.n();
  const int64_t n_q = shape.n_head * shape.head_dim;
  const int64_t n_kv = shape.n_head_kv * shape.head_dim;
  // q: [n, n_head, head_dim]; k, v: [n, n_head_kv, head_dim]
  const Backend::Product qkv[] = {{&w.wq, s.q}, {&w.wk, s.k}, {&w.wv, s.v}};
  backend.matmuls(xn, n, qkv);
  add_bias(backend, w.bq, n, s.q);
  add_bias(backend, w.bk, n, s.k);
  add_bias(backend, w.bv, n, s.v);
  // Whole-row RMS norms (each token's q and k rows, all heads together) first; then
  // per-head ones (each head_dim row on its own), then RoPE, which turns each token by its
  // own position, whichever sequence it belongs to, then q's scale. One sequence's step
  // does the per-head part and stores its keys and values in one op (a backend may fuse
  // them). A norm as wide as one head is per head (with one head the two are the same).
  const auto per_head = [&](const Tensor& norm) {
    return norm.data != nullptr && norm.ne[0] == shape.head_dim ? &norm : nullptr;
  };
  if (w.q_norm.data != nullptr && per_head(w.q_norm) == nullptr)
    backend.rms_norm(s.q, w.q_norm, n, n_q, c.norm_eps, s.q);
  if (w.k_norm.data != nullptr && per_head(w.k_norm) == nullptr)
    backend.rms_norm(s.k, w.k_norm, n, n_kv, c.norm_eps, s.k);
  const Backend::HeadNorms norms{per_head(w.q_norm), per_head(w.k_norm), c.norm_eps, c.q_scale};
  const bool one_piece = step.pieces.size() == 1 && step.pieces[0].n == n;
  // Whether the pieces' keys and values are stored below (not with RoPE).
  const bool store_apart = !one_piece || !c.use_rope;
  if (!c.use_rope) {  // a NoPE layer: the norms and q's scale only
    if (norms.q != nullptr)
      backend.rms_norm(s.q, *norms.q, n * shape.n_head, shape.head_dim, c.norm_eps, s.q);
    if (norms.k != nullptr)
      backend.rms_norm(s.k, *norms.k, n * shape.n_head_kv, shape.head_dim, c.norm_eps, s.k);
    if (c.q_scale != 1.0f) backend.scale(s.q, n * n_q, c.q_scale, s.q);
  } else if (one_piece) {
    const StepPiece& p = step.pieces[0];
    backend.norm_rope_qk_store(s.q, shape.n_head, s.k, s.v, shape.n_head_kv, n, shape.head_dim,
                               step.positions, c.rope, norms, p.kv->layer(il), p.pos);
  } else {
    if (norms.q != nullptr)
      backend.rms_norm(s.q, *norms.q, n * shape.n_head, shape.head_dim, c.norm_eps, s.q);
    if (norms.k != nullptr)
      backend.rms_norm(s.k, *norms.k, n * shape.n_head_kv, shape.head_dim, c.norm_eps, s.k);
    backend.rope_qk(s.q, shape.n_head, s.k, shape.n_head_kv, n, shape.head_dim, step.positions,
                    c.rope);
    if (c.q_scale != 1.0f) backend.scale(s.q, n * n_q, c.q_scale, s.q);
  }
  if (c.temp_scale != 0.0f) scale_by_temperature(backend, c, step, n_q, s.q);
  for (const StepPiece& p : step.pieces) {
    const KvLayerView cache = p.kv->layer(il);
    if (store_apart)
      backend.kv_store(cache, p.pos, p.n, s.k + p.offset * n_kv, s.v + p.offset * n_kv);
    // attn: [n, n_head * head_dim], each token over its cache's positions 0 .. its own (its
    // window)
    backend.attention(s.q + p.offset * n_q, p.n, p.pos, cache, shape, s.attn + p.offset * n_q);
  }
  // out: [n, n_embd]
  backend.matmul(w.wo, s.attn, n, out);
}

void gated_ffn(Backend& backend, const FfnWeights& w, FfnActivation act, const float* xn, int64_t n,
               const BlockScratch& s, float* out) {
  const int64_t n_ff = w.gate.ne[1];
  // gate, up: [n, n_ff]
  const Backend::Product gate_up[] = {{&w.gate, s.gate}, {&w.up, s.up}};
  backend.matmuls(xn, n, gate_up);
  if (act == FfnActivation::kSilu) {
    backend.swiglu(s.gate, s.up, n * n_ff, s.gate);
  } else {
    backend.geglu(s.gate, s.up, n * n_ff, s.gate);
  }
  // out: [n, n_embd]
  backend.matmul(w.down, s.gate, n, out);
}

}  // namespace qrun::models
