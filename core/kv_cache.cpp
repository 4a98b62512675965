// KvCache allocation and bookkeeping. The buffers are allocated without initialisation
// (new[] of bytes), so a large context costs address space, not resident memory, until used.
#include "core/kv_cache.h"

#include <algorithm>
#include <limits>
#include <new>
#include <utility>

#include "core/model_info.h"

namespace qrun {

bool is_kv_cache_type(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 ||
         type == DType::kQ8_0 || type == DType::kQ4_0;
}

std::string kv_head_dim_problem(DType type, int64_t head_dim) {
  const int64_t block = type_traits(type).block_elems;
  if (head_dim % block == 0) return {};
  return format("needs a head size that is a multiple of %lld; this model's is %lld",
                static_cast<long long>(block), static_cast<long long>(head_dim));
}

Result<KvCache> KvCache::create(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim,
                                KvTypes types, std::span<const int64_t> windows, int64_t n_batch) {
  for (const DType type : {types.k, types.v}) {
    if (!is_kv_cache_type(type)) {
      return make_error(ErrorCode::kUnsupported,
                        format("KV cache type %s is not supported (use f32, f16, bf16, q8_0 or "
                               "q4_0)",
                               dtype_name(type)));
    }
  }
  if (n_layer <= 0 || n_ctx <= 0 || n_head_kv <= 0 || head_dim <= 0) {
    return make_error(ErrorCode::kUsage,
                      format("KV cache needs positive sizes (n_layer %lld, n_ctx %lld, n_head_kv "
                             "%lld, head_dim %lld)",
                             static_cast<long long>(n_layer), static_cast<long long>(n_ctx),
                             static_cast<long long>(n_head_kv), static_cast<long long>(head_dim)));
  }
  for (const auto& [name, type] : {std::pair{"K", types.k}, std::pair{"V", types.v}}) {
    const std::string problem = kv_head_dim_problem(type, head_dim);
    if (!problem.empty()) {
      return make_error(ErrorCode::kUsage,
                        format("%s cache type %s %s", name, dtype_name(type), problem.c_str()));
    }
  }
  QRUN_CHECK(windows.empty() || static_cast<int64_t>(windows.size()) == n_layer,
             "KV cache: %zu windows for %lld layers", windows.size(),
             static_cast<long long>(n_layer));
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_ctx_ = n_ctx;
  c.n_head_kv_ = n_head_kv;
  c.head_dim_ = head_dim;
  c.types_ = types;
  c.k_row_bytes_ = row_size(types.k, n_head_kv * head_dim);
  c.v_row_bytes_ = row_size(types.v, n_head_kv * head_dim);
  c.layers_.resize(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    Layer& l = c.layers_[static_cast<size_t>(il)];
    l.window = windows.empty() ? 0 : windows[static_cast<size_t>(il)];
    QRUN_CHECK(l.window >= 0 && (l.window == 0 || n_batch > 0),
               "KV cache: layer %lld has window %lld with batches of %lld tokens",
               static_cast<long long>(il), static_cast<long long>(l.window),
               static_cast<long long>(n_batch));
    // A window's ring holds the window - 1 positions before a batch, and the batch.
    l.rows = l.window > 0 && l.window - 1 + n_batch < n_ctx ? l.window - 1 + n_batch : n_ctx;
    c.total_rows_ += l.rows;
  }
  const double total =
      static_cast<double>(c.k_row_bytes_ + c.v_row_bytes_) * static_cast<double>(c.total_rows_);
  if (total > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return make_error(ErrorCode::kUsage, format("KV cache of %lld tokens is too large",
                                                static_cast<long long>(n_ctx)));
  }
  size_t k_offset = 0;
  size_t v_offset = 0;
  for (Layer& l : c.layers_) {
    l.k_offset = k_offset;
    l.v_offset = v_offset;
    k_offset += c.k_row_bytes_ * static_cast<size_t>(l.rows);
    v_offset += c.v_row_bytes_ * static_cast<size_t>(l.rows);
  }
  c.k_.reset(new (std::nothrow) uint8_t[k_offset]);
  c.v_.reset(new (std::nothrow) uint8_t[v_offset]);
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
  const Layer& l = layers_[static_cast<size_t>(il)];
  return KvLayerView{types_.k,   types_.v, k_.get() + l.k_offset, v_.get() + l.v_offset, l.rows,
                     n_head_kv_, head_dim_};
}

void KvCache::set_n_tokens(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_ctx_, "KV cache: %lld tokens in a context of %lld",
             static_cast<long long>(n), static_cast<long long>(n_ctx_));
  n_tokens_ = n;
  n_written_ = std::max(n_written_, n);
}

int64_t KvCache::keepable(int64_t n) const {
  if (n <= 0 || n >= n_tokens_) return n;
  for (const Layer& l : layers_) {
    // The ring holds positions n_written - rows and later; the token at n reads from
    // n - window + 1.
    const int64_t first_read = std::max<int64_t>(0, n - l.window + 1);
    if (l.rows < n_ctx_ && first_read < n_written_ - l.rows) return 0;
    if (l.window > 0 && first_read < n_floor_) return 0;  // not restored
  }
  return n;
}

int64_t KvCache::first_held(int64_t il) const {
  const Layer& l = layers_[static_cast<size_t>(il)];
  if (l.window == 0) return 0;
  return std::max({int64_t{0}, n_written_ - l.rows, n_floor_});
}

std::span<const uint8_t> KvCache::k_row(int64_t il, int64_t pos) const {
  const Layer& l = layers_[static_cast<size_t>(il)];
  return {k_.get() + l.k_offset + k_row_bytes_ * static_cast<size_t>(pos % l.rows), k_row_bytes_};
}

std::span<const uint8_t> KvCache::v_row(int64_t il, int64_t pos) const {
  const Layer& l = layers_[static_cast<size_t>(il)];
  return {v_.get() + l.v_offset + v_row_bytes_ * static_cast<size_t>(pos % l.rows), v_row_bytes_};
}

std::span<uint8_t> KvCache::k_row(int64_t il, int64_t pos) {
  const std::span<const uint8_t> row = std::as_const(*this).k_row(il, pos);
  return {const_cast<uint8_t*>(row.data()), row.size()};
}

std::span<uint8_t> KvCache::v_row(int64_t il, int64_t pos) {
  const std::span<const uint8_t> row = std::as_const(*this).v_row(il, pos);
  return {const_cast<uint8_t*>(row.data()), row.size()};
}

void KvCache::restore(int64_t n, int64_t floor) {
  QRUN_CHECK(n_tokens_ == 0 && n >= 0 && n <= n_ctx_ && floor >= 0 && floor <= n,
             "KV cache: restore %lld tokens (floor %lld) into a cache of %lld holding %lld",
             static_cast<long long>(n), static_cast<long long>(floor),
             static_cast<long long>(n_ctx_), static_cast<long long>(n_tokens_));
  n_tokens_ = n;
  n_written_ = n;
  n_floor_ = floor;
}

void KvCache::truncate(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_tokens_ && keepable(n) == n,
             "KV cache: truncate to %lld of %lld tokens", static_cast<long long>(n),
             static_cast<long long>(n_tokens_));
  n_tokens_ = n;
  if (n == 0) n_written_ = n_floor_ = 0;
}

std::string kv_memory_summary(const KvCache& kv) {
  std::string s = human_bytes(static_cast<double>(kv.n_bytes())) + " KV";
  if (kv.k_type() != kv.v_type()) {
    const int64_t elems = kv.n_head_kv() * kv.head_dim();
    const double rows =
        static_cast<double>(kv.n_bytes()) /
        static_cast<double>(row_size(kv.k_type(), elems) + row_size(kv.v_type(), elems));
    s += format(" (K %s %s, V %s %s)", dtype_name(kv.k_type()),
                human_bytes(rows * static_cast<double>(row_size(kv.k_type(), elems))).c_str(),
                dtype_name(kv.v_type()),
                human_bytes(rows * static_cast<double>(row_size(kv.v_type(), elems))).c_str());
  }
  if (kv.n_bytes() < kv.n_bytes_full()) {
    s += ", " + human_bytes(static_cast<double>(kv.n_bytes_full() - kv.n_bytes())) +
         " less than full layers";
  }
  return s;
}

}  // namespace qrun
