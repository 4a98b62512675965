// KvCache allocation and bookkeeping. The buffers are allocated without initialisation
// (new[] of bytes), so a large context costs address space, not resident memory, until used.
#include "core/kv_cache.h"

#include <limits>
#include <new>

namespace qrun {

Result<KvCache> KvCache::create(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim,
                                DType type) {
  if (type != DType::kF16 && type != DType::kF32) {
    return make_error(
        ErrorCode::kUnsupported,
        format("KV cache type %s is not supported (use f16 or f32)", dtype_name(type)));
  }
  if (n_layer <= 0 || n_ctx <= 0 || n_head_kv <= 0 || head_dim <= 0) {
    return make_error(ErrorCode::kUsage,
                      format("KV cache needs positive sizes (n_layer %lld, n_ctx %lld, n_head_kv "
                             "%lld, head_dim %lld)",
                             static_cast<long long>(n_layer), static_cast<long long>(n_ctx),
                             static_cast<long long>(n_head_kv), static_cast<long long>(head_dim)));
  }
  const size_t elem = type == DType::kF16 ? 2 : 4;
  const double total = 2.0 * static_cast<double>(elem) * static_cast<double>(n_layer) *
                       static_cast<double>(n_ctx) * static_cast<double>(n_head_kv * head_dim);
  if (total > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return make_error(ErrorCode::kUsage, format("KV cache of %lld tokens is too large",
                                                static_cast<long long>(n_ctx)));
  }
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_ctx_ = n_ctx;
  c.n_head_kv_ = n_head_kv;
  c.head_dim_ = head_dim;
  c.type_ = type;
  c.layer_bytes_ = elem * static_cast<size_t>(n_ctx) * static_cast<size_t>(n_head_kv * head_dim);
  const size_t bytes = c.layer_bytes_ * static_cast<size_t>(n_layer);
  c.k_.reset(new (std::nothrow) uint8_t[bytes]);
  c.v_.reset(new (std::nothrow) uint8_t[bytes]);
  if (!c.k_ || !c.v_) {
    return make_error(ErrorCode::kRuntime,
                      format("cannot allocate a KV cache of %.1f MiB for %lld tokens",
                             total / (1024.0 * 1024.0), static_cast<long long>(n_ctx)));
  }
  return c;
}

KvLayerView KvCache::layer(int64_t il) {
  QRUN_CHECK(il >= 0 && il < n_layer_, "KV cache layer %lld of %lld", static_cast<long long>(il),
             static_cast<long long>(n_layer_));
  const size_t off = layer_bytes_ * static_cast<size_t>(il);
  return KvLayerView{type_, k_.get() + off, v_.get() + off, n_ctx_, n_head_kv_, head_dim_};
}

void KvCache::set_n_tokens(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_ctx_, "KV cache: %lld tokens in a context of %lld",
             static_cast<long long>(n), static_cast<long long>(n_ctx_));
  n_tokens_ = n;
}

void KvCache::truncate(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_tokens_, "KV cache: truncate to %lld of %lld tokens",
             static_cast<long long>(n), static_cast<long long>(n_tokens_));
  n_tokens_ = n;
}

}  // namespace qrun
