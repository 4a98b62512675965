// Pieces shared by decoder-only architectures: binding weights by name with shape and
// type checks (errors name the file, tensor, expected and actual shape), reading
// "<arch>.<key>" hyper-parameters, and the two blocks every llama-like layer has, causal
// self-attention with RoPE and the SwiGLU feed-forward network, written against Backend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
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
  // kUnsupported if a tensor this architecture does not implement (biases, experts) is present.
  Result<void> reject_if_present(const std::string& name, const char* what) const;

 private:
  const gguf::File& file_;
};

// Reads "<arch>.<suffix>" as a positive integer (or `fallback` when absent, if given).
Result<int64_t> read_positive(const gguf::File& file, const std::string& arch,
                              const std::string& suffix, std::optional<int64_t> fallback);

// The weights of one attention block; shapes in GGML order, rows = output features.
// Optional tensors have data == nullptr when the architecture has none.
struct AttentionWeights {
  Tensor wq;      // [n_embd, n_head * head_dim]
  Tensor wk;      // [n_embd, n_head_kv * head_dim]
  Tensor wv;      // [n_embd, n_head_kv * head_dim]
  Tensor wo;      // [n_head * head_dim, n_embd]
  Tensor bq;      // [n_head * head_dim], F32, optional (qwen2)
  Tensor bk;      // [n_head_kv * head_dim], F32, optional (qwen2)
  Tensor bv;      // [n_head_kv * head_dim], F32, optional (qwen2)
  Tensor q_norm;  // [head_dim], F32, optional: RMS norm of each Q head before RoPE (qwen3)
  Tensor k_norm;  // [head_dim], F32, optional: RMS norm of each K head before RoPE (qwen3)
};

// The weights of a SwiGLU feed-forward block.
struct FfnWeights {
  Tensor gate;  // [n_embd, n_ff]
  Tensor up;    // [n_embd, n_ff]
  Tensor down;  // [n_ff, n_embd]
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

// out = wo * attention(rope(q), rope(k), v) for n tokens at positions pos .. pos + n - 1,
// after storing their K and V in `cache`, where q = wq xn + bq, k = wk xn + bk, v = wv xn + bv
// (biases where present), and q and k are RMS-normed per head (eps `norm_eps`) where w has
// q_norm / k_norm. out may alias xn.
void self_attention(Backend& backend, const AttentionWeights& w, const AttentionParams& shape,
                    const RopeParams& rope, float norm_eps, const KvLayerView& cache,
                    const float* xn, int64_t n, int64_t pos, std::span<const int32_t> positions,
                    const BlockScratch& s, float* out);

// out = down * (silu(gate * xn) * (up * xn)) for n tokens. out may alias xn.
void swiglu_ffn(Backend& backend, const FfnWeights& w, const float* xn, int64_t n,
                const BlockScratch& s, float* out);

}  // namespace qrun::models
