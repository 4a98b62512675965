// The op-level interface every compute backend (CPU, CUDA) implements. Models call these
// ops in order and never see a device. Activations are row-major float arrays: a batch of
// n_tokens rows, each row one token's vector. Weights are Tensor views (GGML layout, one
// row per output feature). Each op states its numerics so every backend computes the same
// function as llama.cpp's CPU backend, within rounding.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "ggml-like/dtype.h"
#include "ggml-like/tensor.h"

namespace qrun {

enum class Op {
  kMatMul,     // dtype: the weight type
  kGetRows,    // dtype: the embedding table type
  kRmsNorm,    // dtype: the norm weight type
  kRope,       // dtype: kF32 (activations)
  kKvStore,    // dtype: a KV cache type (K or V; each is asked for separately)
  kAttention,  // dtype: a KV cache type (K or V; each is asked for separately)
  kSwiglu,     // dtype: kF32
  kGeglu,      // dtype: kF32
  kAdd,        // dtype: kF32
  kScale,      // dtype: kF32
  kSoftcap,    // dtype: kF32
  kMoeRows,    // dtype: kF32 (gather_rows and weighted_row_sum, a mixture-of-experts layer's)
};
inline const char* op_name(Op op) {
  switch (op) {
    case Op::kMatMul:
      return "matmul";
    case Op::kGetRows:
      return "get_rows";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kRope:
      return "rope";
    case Op::kKvStore:
      return "kv_store";
    case Op::kAttention:
      return "attention";
    case Op::kSwiglu:
      return "swiglu";
    case Op::kGeglu:
      return "geglu";
    case Op::kAdd:
      return "add";
    case Op::kScale:
      return "scale";
    case Op::kSoftcap:
      return "softcap";
    case Op::kMoeRows:
      return "moe_rows";
  }
  return "?";
}

// How RoPE pairs the first n_rot elements of a head. kNormal: adjacent pairs (x[2i], x[2i+1])
// (llama, whose converter permutes Q and K to suit it). kNeox: halves, (x[i], x[i + n_rot/2])
// (GPT-NeoX, Qwen2, Qwen3). Pair i turns by the same angle in both modes.
enum class RopeMode { kNormal, kNeox };

// Rotary position embedding of the first n_rot elements of each head, in pairs chosen by
// `mode`. Pair i at position p turns by the angle freq_scale * p * freq_base^(-2i/n_rot) / f[i],
// with f the optional freq_factors (Llama 3.1's rope_freqs, Phi-3's LongRoPE factors), else 1,
// and is then multiplied by attn_factor (LongRoPE's attention factor, YaRN's magnitude
// correction; ggml's mscale scales cos and sin alike). Elements past n_rot are left as they
// are. With YaRN (ext_factor != 0), pair i's angle mixes that interpolated angle with the
// unscaled one, p * freq_base^(-2i/n_rot) / f[i]: weight ext_factor * ramp(i) on the unscaled,
// where ramp(i) = 1 - clamp((i - yarn_corr[0]) / max(0.001, yarn_corr[1] - yarn_corr[0]), 0, 1)
// (ggml's rope_yarn: the fast pairs keep their angles, the slow ones are interpolated).
struct RopeParams {
  int64_t n_rot = 0;  // even, <= head_dim
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // linear scaling: 1 / rope.scaling.factor
  const float* freq_factors = nullptr;  // [n_rot / 2] or null
  RopeMode mode = RopeMode::kNormal;
  float attn_factor = 1.0f;           // scales each rotated pair
  float ext_factor = 0.0f;            // YaRN's mix (1 for a yarn file); 0: plain interpolation
  float yarn_corr[2] = {0.0f, 0.0f};  // the pairs where YaRN's ramp starts and ends
};

// The angle of pair i whose unscaled angle (position times frequency, over its factor) is
// `extrap`, as ggml's rope_yarn forms it, step for step in float (the CUDA kernel repeats it).
inline float rope_angle(float extrap, int64_t i, const RopeParams& p) {
  const float interp = p.freq_scale * extrap;
  if (p.ext_factor == 0.0f) return interp;
  const float span =
      p.yarn_corr[1] - p.yarn_corr[0] > 0.001f ? p.yarn_corr[1] - p.yarn_corr[0] : 0.001f;
  const float y = (static_cast<float>(i) - p.yarn_corr[0]) / span;
  const float ramp = 1.0f - (y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y));
  const float mix = ramp * p.ext_factor;
  return interp * (1.0f - mix) + extrap * mix;
}

// One layer of a KV cache: k holds n_rows rows of n_head_kv * head_dim elements of k_type,
// v the same of v_type (each kF32, kF16, kBF16, kQ8_0 or kQ4_0; a quantized row is GGML
// blocks, one KV head after the other, so head_dim is a multiple of the block size). Row
// p % n_rows holds position p: a cache as long as the context is never wrapped, and a
// sliding-window layer keeps a ring of fewer rows, which must hold every position a token
// attends to (window - 1 before the first token of a batch, then the batch). Owned by the
// caller (core/kv_cache).
// Paged (block_table not null): k and v point at a pool of blocks of block_rows rows each
// (block b holds pool rows b * block_rows .. (b + 1) * block_rows - 1), and row r of the
// view (the row p % n_rows above) lives in pool row
// block_table[r / block_rows] * block_rows + r % block_rows; the table has
// n_rows / block_rows entries. block_rows is a power of two and a multiple of
// kKvBlockAlign. n_storage_rows is the pool's rows (all its blocks), which the table's
// entries index; a backend that mirrors the layer elsewhere mirrors that many. Backends
// that cannot read a paged view say so in supports_paged_kv().
inline constexpr int64_t kKvBlockAlign = 16;
struct KvLayerView {
  DType k_type = DType::kF16;
  DType v_type = DType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_rows = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  const int32_t* block_table = nullptr;  // null: rows are contiguous from k and v
  int64_t block_rows = 0;                // rows per block when paged
  int64_t n_storage_rows = 0;            // rows behind k and v when paged (0: n_rows)
  int64_t row_elems() const { return n_head_kv * head_dim; }
  int64_t storage_rows() const { return paged() ? n_storage_rows : n_rows; }
  size_t k_row_bytes() const { return row_size(k_type, row_elems()); }
  size_t v_row_bytes() const { return row_size(v_type, row_elems()); }
  bool paged() const { return block_table != nullptr; }
  // Where row r (0 <= r < n_rows) of the view is stored, in rows from k and v.
  int64_t storage_row(int64_t r) const {
    if (block_table == nullptr) return r;
    return static_cast<int64_t>(block_table[r / block_rows]) * block_rows + r % block_rows;
  }
};

// Causal self-attention, grouped-query: query head h reads KV head h / (n_head / n_head_kv).
// With a sliding window, the token at position p attends positions p - window + 1 .. p
// only (llama.cpp's standard SWA mask: p - p0 >= window is masked). With a soft-cap c > 0
// (Gemma 2's attention logit soft-capping), the logit of q.k is c * tanh(q.k * scale / c),
// formed as llama.cpp's flash attention forms it: scale / c in float once, then
// c * tanhf(q.k * (scale / c)).
struct AttentionParams {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // divides n_head
  int64_t head_dim = 0;
  float scale = 1.0f;    // applied to q.k before the softmax, usually 1/sqrt(head_dim)
  int64_t window = 0;    // sliding window in positions; 0: the whole context
  float softcap = 0.0f;  // attention logit soft-cap; 0: none
  // The factor q.k is multiplied by before the soft-cap's tanh (scale itself when none).
  float score_scale() const { return softcap > 0.0f ? scale / softcap : scale; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // Whether `op` runs on this backend with operands of `type` (see Op for which operand).
  virtual bool supports(Op op, DType type) const = 0;
  // Whether kv_store and attention take paged views (KvLayerView::block_table); a backend
  // that does not stops with a check when given one.
  virtual bool supports_paged_kv() const { return false; }

  // y[t][o] = sum_i w[o][i] * x[t][i]; w: [n_in, n_out], x: [n_tokens, n_in],
  // y: [n_tokens, n_out]. x is first converted to w's vec_dot_type (quantized with that
  // type's from_float, as llama.cpp does), then dotted with the type's vec_dot.
  // A backend may keep its own copy of w (a faster layout, device memory), found again by
  // w.data: weights must stay mapped and unchanged while the backend lives.
  virtual void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) = 0;

  // out[t] = row ids[t] of table, dequantized; table: [n, n_rows], out: [ids.size(), n].
  // Ids are in range (callers validate user input).
  virtual void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) = 0;

  // y[r] = (x[r] * 1/sqrt(mean(x[r]^2) + eps)) * weight, for n_rows rows of n elements;
  // the sum of squares is accumulated in double. weight: [n]. y may alias x.
  virtual void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                        float* y) = 0;

  // Rotates x: [n_tokens, n_head, head_dim] in place; token t is at positions[t].
  virtual void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                    std::span<const int32_t> positions, const RopeParams& params) = 0;

  // rope on q: [n_tokens, n_head, head_dim] and on k: [n_tokens, n_head_kv, head_dim] (a
  // layer's queries and keys, at the same positions). The default runs rope on each; a
  // backend may rotate both at once, with the same results. q and k must not overlap.
  virtual void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                       int64_t head_dim, std::span<const int32_t> positions,
                       const RopeParams& params) {
    rope(q, n_tokens, n_head, head_dim, positions, params);
    rope(k, n_tokens, n_head_kv, head_dim, positions, params);
  }

  // Writes k, v: [n_tokens, n_head_kv * head_dim] to cache rows pos .. pos + n_tokens - 1,
  // converting to the cache types (quantized rows as llama.cpp's CPU backend writes them).
  virtual void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                        const float* v) = 0;

  // rope_qk, then kv_store(cache, pos, n_tokens, k, v): one sequence's queries and keys
  // rotated, and its keys and values stored. The default runs the two; a backend may do
  // both at once, with the same results (k holds the rotated keys either way).
  virtual void rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                             int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                             const RopeParams& params, const KvLayerView& cache, int64_t pos) {
    rope_qk(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params);
    kv_store(cache, pos, n_tokens, k, v);
  }

  // What comes around RoPE in Qwen 3's and Gemma 3's attention: per-head RMS norms of q and
  // k before it (each head_dim row on its own, with weights of head_dim; none where null),
  // and q scaled after it (1: not scaled).
  struct HeadNorms {
    const Tensor* q = nullptr;
    const Tensor* k = nullptr;
    float eps = 0.0f;
    float q_scale = 1.0f;
  };
  // rms_norm of q's and k's heads as `norms` asks, rope_qk_store, then q *= norms.q_scale.
  // The default runs the ops one by one; a backend may fuse them, with the same results.
  virtual void norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v,
                                  int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                  std::span<const int32_t> positions, const RopeParams& params,
                                  const HeadNorms& norms, const KvLayerView& cache, int64_t pos) {
    if (norms.q != nullptr) rms_norm(q, *norms.q, n_tokens * n_head, head_dim, norms.eps, q);
    if (norms.k != nullptr) rms_norm(k, *norms.k, n_tokens * n_head_kv, head_dim, norms.eps, k);
    rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params, cache, pos);
    if (norms.q_scale != 1.0f) scale(q, n_tokens * n_head * head_dim, norms.q_scale, q);
  }

  // out[t] = softmax(scale * q[t] K^T) V over cache positions 0 .. pos0 + t for each head
  // (the last `window` of them with a sliding window), in position order;
  // q, out: [n_tokens, n_head, head_dim]. Online softmax: no n_tokens x n_ctx matrix.
  virtual void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                         const AttentionParams& params, float* out) = 0;

  // Products of several weights with the same x (a layer's Q, K and V; gate and up): as
  // matmul(*p.w, x, n_tokens, p.y) for each product, which is what the default does. A
  // product with an x of its own uses that instead (the down projections of a token's
  // experts; x may then be null if every product has one). A backend may run them together
  // (one pass over the weights, one launch); the results are the same. The outputs must not
  // overlap any x or each other.
  struct Product {
    const Tensor* w;
    float* y;
    const float* x = nullptr;  // this product's activations; null: the call's x
  };
  virtual void matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) {
    for (const Product& p : products) matmul(*p.w, p.x != nullptr ? p.x : x, n_tokens, p.y);
  }

  // x += delta, then y = rms_norm(x) with `weight` as rms_norm (a decoder's residual add
  // and the norm before its next block), for n_rows rows of n. y may alias x or delta. The
  // default runs add then rms_norm; a backend may fuse them, with the same results.
  virtual void add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows,
                            int64_t n, float eps, float* y) {
    add(x, delta, n_rows * n, x);
    rms_norm(x, weight, n_rows, n, eps, y);
  }

  // delta = rms_norm(delta) with delta_weight, then add_rms_norm(x, delta, weight, ..., y):
  // a block's output normed once more (Gemma's post-norms) before the residual add and the
  // next block's norm. y may alias x or delta; delta holds its normed rows afterwards
  // unless y aliases it. The default runs the two; a backend may fuse them, with the same
  // results.
  virtual void norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight,
                                 const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                                 float* y) {
    rms_norm(delta, delta_weight, n_rows, n, eps, delta);
    add_rms_norm(x, delta, weight, n_rows, n, eps, y);
  }

  // out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)). out may alias gate or up.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;

  // out[i] = gelu(gate[i]) * up[i], GELU in its tanh approximation
  // 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) evaluated as llama.cpp's CPU backend
  // does: gate rounded to F16 and GELU's result rounded to F16 for |gate| < 10, gate itself
  // at or above 10 and 0 at or below -10. out may alias gate or up.
  virtual void geglu(const float* gate, const float* up, int64_t n, float* out) = 0;

  // out[i] = a[i] + b[i]. out may alias a or b.
  virtual void add(const float* a, const float* b, int64_t n, float* out) = 0;

  // out[i] = x[i] * s. out may alias x.
  virtual void scale(const float* x, int64_t n, float s, float* out) = 0;

  // out[i] = cap * tanh(x[i] * (1 / cap)) (Gemma's logit soft-capping). out may alias x.
  virtual void softcap(const float* x, int64_t n, float cap, float* out) = 0;

  // The row moves of a mixture-of-experts layer, whose tokens are grouped by expert so that
  // each expert's matrices run once over all of its tokens. gather_rows:
  // out[i] = x[rows[i]] for rows of n floats (out: [rows.size(), n]; out must not overlap x).
  // weighted_row_sum: out[t] = sum over j < k of weights[t k + j] * src[rows[t k + j]] for
  // t < rows.size() / k, rows of n floats, summed as llama.cpp sums its experts' outputs:
  // each product rounded to float, then added in j order, ((p0 + p1) + p2) + ...
  // (out must not overlap src). The defaults work in host memory.
  virtual void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out);
  virtual void weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                                std::span<const float> weights, int64_t k, float* out);

  // A backend may keep a KV cache layer in memory of its own (CUDA), which kv_store writes
  // and attention reads, leaving the host rows of the view stale. kv_to_host copies the
  // backend's rows of `cache` into the view's host memory; kv_from_host makes the host rows
  // the layer's content again (read back before the backend next stores to the layer).
  // Code that reads or edits cached rows on the host (prompt cache files, a context shift)
  // brackets that with them. The defaults do nothing: there the host memory is the cache.
  virtual void kv_to_host(const KvLayerView& cache) {}
  virtual void kv_from_host(const KvLayerView& cache) {}

  // Copies storage rows from .. from + n - 1 of the layer's K and V to rows to .. to + n - 1
  // (rows of k and v as storage_row() gives them, not positions; the two ranges do not
  // overlap), wherever the backend keeps the layer: a paged cache giving a sequence its own
  // copy of a shared block. The default copies the host memory.
  virtual void kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n);

  // Declares whether the rows of the matmuls that follow are decode rows, each to be computed
  // as it would be alone: one token of each of several sequences (a batched decode step), or
  // the tokens a speculative pass verifies, rather than the tokens of prompts. A backend may
  // then compute each row as a matmul of that row alone would (the CPU does where its gemm
  // tiles cost more for a few rows than one pass over the weights per row), so that batching
  // changes no sequence's numbers. Until it is set again. Default: ignored.
  virtual void set_decode_rows(bool on) {}

  // Declares that until end_scratch() the caller reads and writes `buffers` only through
  // this backend's ops, so a backend with memory of its own (CUDA) may keep their contents
  // there rather than copy each op's inputs in and its outputs out. What the buffers hold
  // after end_scratch() is unspecified. Memory outside them keeps the contract above: an
  // op's output is in host memory when the op returns. Scopes do not nest.
  virtual void begin_scratch(std::span<const std::span<float>> buffers) {}
  virtual void end_scratch() {}
};

inline void Backend::kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) {
  const auto copy = [&](void* base, size_t row_bytes) {
    auto* rows = static_cast<uint8_t*>(base);
    std::memcpy(rows + static_cast<size_t>(to) * row_bytes,
                rows + static_cast<size_t>(from) * row_bytes, static_cast<size_t>(n) * row_bytes);
  };
  copy(cache.k, cache.k_row_bytes());
  copy(cache.v, cache.v_row_bytes());
}

}  // namespace qrun
