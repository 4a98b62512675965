// Pieces shared by decoder-only architectures: binding weights by name with shape and
// type checks (errors name the file, tensor, expected and actual shape), reading
// "<arch>.<key>" hyper-parameters, checking forward()'s arguments, and the two blocks every
// llama-like layer has, causal self-attention with RoPE and a gated feed-forward network
// (SwiGLU or GELU), written against Backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"
#include "ggml-like/tensor.h"

namespace qrun::models {

// How a weight is used, which decides the types it may have.
enum class WeightUse {
  kMatMul,   // any type with a reference dot product
  kGetRows,  // any type with a dequantizer
  kF32,      // norm weights, rope factors: F32 only
};

class WeightBinder {
 public:
  explicit WeightBinder(const gguf::File& file) : file_(file) {}

  // The tensor `name` with GGML shape `shape` (row length first). Missing or misshapen:
  // kFormat; a type qrun cannot use this way: kUnsupported.
  Result<Tensor> bind(const std::string& name, std::vector<int64_t> shape, WeightUse use) const;
  // Same, but a missing tensor is std::nullopt rather than an error.
  Result<std::optional<Tensor>> bind_optional(const std::string& name, std::vector<int64_t> shape,
                                              WeightUse use) const;
  // The same into *out, for QRUN_TRY chains; bind_optional leaves *out alone when absent.
  Result<void> bind(const std::string& name, std::vector<int64_t> shape, WeightUse use,
                    Tensor* out) const;
  Result<void> bind_optional(const std::string& name, std::vector<int64_t> shape, WeightUse use,
                             Tensor* out) const;
  // kUnsupported if a tensor this architecture does not implement (biases, experts) is present.
  Result<void> reject_if_present(const std::string& name, const char* what) const;

 private:
  const gguf::File& file_;
};

// Reads "<arch>.<suffix>" as a positive integer (or `fallback` when absent, if given).
Result<int64_t> read_positive(const gguf::File& file, const std::string& arch,
                              const std::string& suffix, std::optional<int64_t> fallback);

// The hyper-parameters every decoder reads the same way: general.architecture, then
// "<arch>." embedding_length, block_count, feed_forward_length, attention.head_count(_kv),
// context_length, attention.key_length / value_length (default n_embd / n_head; they must be
// equal), rope.dimension_count, attention.layer_norm_rms_epsilon, rope.freq_base and rope
// scaling (rope.scaling.type linear, none or yarn, rope.scaling.factor, attn_factor, and
// YaRN's original context and betas). n_vocab is left to the weights.
Result<ModelHparams> read_decoder_hparams(const gguf::File& file);

// The RoPE of a layer with base freq_base and frequency scale freq_scale (the model's, or a
// local layer's own): hp's rotated size, attention factor and YaRN, as llama.cpp's graph
// passes them to ggml_rope_ext.
RopeParams decoder_rope(const ModelHparams& hp, RopeMode mode, float freq_base, float freq_scale);

// kUsage unless options.n_batch is in 1 .. 2^20 and options.n_seq in 1 .. 4096.
Result<void> check_model_options(const ModelOptions& options);

// kUnsupported naming `t` when `backend` cannot run `op` on it (see Model::check_backend).
Result<void> check_op(const Backend& backend, Op op, const Tensor& t);

// The argument checks of Model::forward, with their errors: tokens non-empty and in the
// vocabulary, pos <= kv.n_tokens(), pos + n within the context; and (a QRUN_CHECK) a cache
// shaped for hp.
Result<void> check_forward_args(const ModelHparams& hp, std::span<const int32_t> tokens,
                                int64_t pos, const KvCache& kv);

// The weights of one attention block; shapes in GGML order, rows = output features.
// Optional tensors have data == nullptr when the architecture has none.
struct AttentionWeights {
  Tensor wq;  // [n_embd, n_head * head_dim]
  Tensor wk;  // [n_embd, n_head_kv * head_dim]
  Tensor wv;  // [n_embd, n_head_kv * head_dim]
  Tensor wo;  // [n_head * head_dim, n_embd]
  Tensor bq;  // [n_head * head_dim], F32, optional (qwen2)
  Tensor bk;  // [n_head_kv * head_dim], F32, optional (qwen2)
  Tensor bv;  // [n_head_kv * head_dim], F32, optional (qwen2)
  // F32, optional: RMS norms of Q and K before RoPE, of each head when [head_dim] (qwen3),
  // of each token's whole row when [n_head * head_dim] and [n_head_kv * head_dim] (olmoe)
  Tensor q_norm;
  Tensor k_norm;
};

// The weights of a gated feed-forward block.
struct FfnWeights {
  Tensor gate;  // [n_embd, n_ff]
  Tensor up;    // [n_embd, n_ff]
  Tensor down;  // [n_ff, n_embd]
};

// The gate's activation: SiLU (SwiGLU: llama, qwen) or GELU, tanh approximation (GeGLU: gemma).
enum class FfnActivation { kSilu, kGelu };

// How one layer attends: the attention's shape, scale and window, its RoPE, the epsilon of
// the per-head Q/K norms, and a scale of q after RoPE (Gemma's graph scales q there and
// attends with scale 1; 1 leaves q as it is).
struct AttentionConfig {
  AttentionParams attn;
  RopeParams rope;
  bool use_rope = true;  // false: q and k are not rotated (SmolLM3's NoPE layers)
  float norm_eps = 1e-5f;
  float q_scale = 1.0f;
  // Llama 4's attention temperature (Mistral 3): q at position p is scaled by
  // 1 + temp_scale * ln(floor(p / temp_floor) + 1), as llama.cpp's attn_scale input; 0: none.
  float temp_scale = 0.0f;
  int64_t temp_floor = 0;
};

// Float buffers one block may overwrite, each sized for the model's n_batch tokens.
struct BlockScratch {
  float* q = nullptr;     // [n_batch, n_head * head_dim]
  float* k = nullptr;     // [n_batch, n_head_kv * head_dim]
  float* v = nullptr;     // [n_batch, n_head_kv * head_dim]
  float* attn = nullptr;  // [n_batch, n_head * head_dim]
  float* gate = nullptr;  // [n_batch, n_ff]
  float* up = nullptr;    // [n_batch, n_ff]
};

// The token embedding, the final norm and the output projection: the embedding again when
// the file has no output.weight (tied models).
struct EmbeddingWeights {
  Tensor tok_embd;     // [n_embd, n_vocab]
  Tensor output_norm;  // [n_embd]
  Tensor output;       // [n_embd, n_vocab]
};

// Binds them; hp.n_vocab is taken from token_embd.weight's rows.
Result<EmbeddingWeights> bind_embedding_weights(const gguf::File& file, ModelHparams& hp);

// check_op on what every decoder reads: the embedding weights, and one layer's attention and
// FFN blocks (their matrices, and the per-head Q/K norms where present; ffn null: the layer's
// feed-forward block is checked elsewhere, a mixture of experts).
Result<void> check_embedding_ops(const Backend& backend, const EmbeddingWeights& w);
Result<void> check_block_ops(const Backend& backend, const AttentionWeights& attn,
                             const FfnWeights* ffn);

// One sequence's tokens in one step of a forward pass (models/forward_step.h): rows
// offset .. offset + n - 1 of the step's activations, at positions pos .. pos + n - 1 of kv.
struct StepPiece {
  int64_t offset = 0;
  int64_t n = 0;
  int64_t pos = 0;
  KvCache* kv = nullptr;
  bool all_logits = false;  // logits for every row, else for the last
  float* logits = nullptr;  // [all_logits ? n : 1, n_vocab]; null: none
};

// What one step runs: every piece's tokens and positions, piece after piece.
struct ForwardStep {
  std::span<const int32_t> tokens;     // [n]
  std::span<const int32_t> positions;  // [n]
  std::span<const StepPiece> pieces;   // ordered by offset, covering 0 .. n - 1
  int64_t n() const { return static_cast<int64_t>(tokens.size()); }
};

// The activations of one forward step over at most n_batch tokens of at most n_seq
// sequences.
class DecoderScratch {
 public:
  // Declares the activation buffers, and at most 8 `more` of the caller's, to `backend` as
  // scratch (Backend::begin_scratch) for as long as the returned scope lives: one forward
  // chunk.
  class Scope {
   public:
    explicit Scope(Backend& backend) : backend_(backend) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { backend_.end_scratch(); }

   private:
    Backend& backend_;
  };
  [[nodiscard]] Scope use(Backend& backend, std::span<const std::span<float>> more = {});

  void allocate(const ModelHparams& hp, int64_t n_batch, int64_t n_seq);
  int64_t n_batch() const { return static_cast<int64_t>(positions_.size()); }
  int64_t n_seq() const { return static_cast<int64_t>(pieces_.size()); }
  float* x() { return x_.data(); }    // [n_batch, n_embd] the residual stream
  float* xn() { return xn_.data(); }  // [n_batch, n_embd] a normed input, a block's output
  BlockScratch blocks();
  int32_t* tokens() { return tokens_.data(); }        // [n_batch] a step's tokens
  int32_t* positions() { return positions_.data(); }  // [n_batch] their positions
  StepPiece* pieces() { return pieces_.data(); }      // [n_seq]
  // [n_seq, n_vocab] the last-row logits of a step with several sequences, before they go
  // to each sequence's buffer; empty when n_seq is 1.
  float* logits() { return logits_.data(); }

 private:
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, logits_;
  std::vector<int32_t> tokens_, positions_;
  std::vector<StepPiece> pieces_;
};

// out = wo * attention(q_scale * rope(q), rope(k), v) for the step's n tokens, where
// q = wq xn + bq, k = wk xn + bk, v = wv xn + bv (biases where present), and q and k are
// RMS-normed per head (eps c.norm_eps) where w has q_norm / k_norm. The projections, norms
// and RoPE run over all n rows at once; each piece stores its K and V in layer il of its own
// cache and attends there. out may alias xn.
void self_attention(Backend& backend, const AttentionWeights& w, const AttentionConfig& c,
                    int64_t il, const ForwardStep& step, const float* xn, const BlockScratch& s,
                    float* out);

// out = down * (act(gate * xn) * (up * xn)) for n tokens. out may alias xn.
void gated_ffn(Backend& backend, const FfnWeights& w, FfnActivation act, const float* xn, int64_t n,
               const BlockScratch& s, float* out);

}  // namespace qrun::models
