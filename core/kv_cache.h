// The KV cache of one sequence: per layer, K and V rows for positions 0 .. n_ctx - 1,
// allocated once (F16 by default, F32 on request). n_tokens() positions hold valid rows;
// models append at n_tokens() (or overwrite from an earlier position) and advance it, and
// truncate() drops a tail so a chat can rewind. Memory is not touched until written.
#pragma once

#include <cstdint>
#include <memory>

#include "ggml-like/backend.h"
#include "ggml-like/dtype.h"
#include "ggml-like/result.h"

namespace qrun {

class KvCache {
 public:
  // n_layer layers of n_ctx rows of n_head_kv * head_dim elements. type: kF16 or kF32
  // (anything else is ErrorCode::kUnsupported); sizes must be positive (kUsage).
  static Result<KvCache> create(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim,
                                DType type = DType::kF16);

  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  int64_t head_dim() const { return head_dim_; }
  DType type() const { return type_; }
  // Positions that hold valid K/V rows.
  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_free() const { return n_ctx_ - n_tokens_; }
  // Bytes of K and V storage together.
  size_t n_bytes() const { return 2 * layer_bytes_ * static_cast<size_t>(n_layer_); }

  // The storage of layer il, for the backend's kv_store and attention.
  KvLayerView layer(int64_t il);
  // Marks positions 0 .. n - 1 valid (after a model wrote rows up to n). n <= n_ctx.
  void set_n_tokens(int64_t n);
  // Forgets positions n and beyond (n <= n_tokens()).
  void truncate(int64_t n);
  void clear() { n_tokens_ = 0; }

 private:
  KvCache() = default;
  int64_t n_layer_ = 0;
  int64_t n_ctx_ = 0;
  int64_t n_head_kv_ = 0;
  int64_t head_dim_ = 0;
  DType type_ = DType::kF16;
  int64_t n_tokens_ = 0;
  size_t layer_bytes_ = 0;        // bytes of K (or V) of one layer
  std::unique_ptr<uint8_t[]> k_;  // [n_layer][n_ctx][n_head_kv * head_dim]
  std::unique_ptr<uint8_t[]> v_;
};

}  // namespace qrun
