// KvCache allocation and bookkeeping. The buffers are allocated without initialisation
// (new[] of bytes), so a large context costs address space, not resident memory, until used.
#include "core/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "core/kv_block_pool.h"
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
  if (paged()) {
    const KvBlockPool& pool = *blocks_.pool;
    KvLayerView view{types_.k, types_.v, pool.k(il), pool.v(il), capacity(), n_head_kv_, head_dim_};
    view.block_table = blocks_.table.data();
    view.block_rows = pool.block_rows();
    view.n_storage_rows = pool.n_blocks() * pool.block_rows();
    return view;
  }
  const Layer& l = layers_[static_cast<size_t>(il)];
  return KvLayerView{types_.k,   types_.v, k_.get() + l.k_offset, v_.get() + l.v_offset, l.rows,
                     n_head_kv_, head_dim_};
}

void KvCache::set_n_tokens(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_ctx_ && (!paged() || n <= capacity()),
             "KV cache: %lld tokens in a context of %lld (%lld reserved)",
             static_cast<long long>(n), static_cast<long long>(n_ctx_),
             static_cast<long long>(paged() ? capacity() : n_ctx_));
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
    if (l.window > 0 && first_read < l.floor) return 0;  // not restored, or shifted out
  }
  return n;
}

int64_t KvCache::first_held(int64_t il) const {
  const Layer& l = layers_[static_cast<size_t>(il)];
  if (l.window == 0) return 0;
  return std::max({int64_t{0}, n_written_ - l.rows, l.floor});
}

std::span<const uint8_t> KvCache::k_row(int64_t il, int64_t pos) const {
  if (paged()) {
    return {blocks_.pool->k(il) + k_row_bytes_ * static_cast<size_t>(paged_row(pos)), k_row_bytes_};
  }
  const Layer& l = layers_[static_cast<size_t>(il)];
  return {k_.get() + l.k_offset + k_row_bytes_ * static_cast<size_t>(pos % l.rows), k_row_bytes_};
}

std::span<const uint8_t> KvCache::v_row(int64_t il, int64_t pos) const {
  if (paged()) {
    return {blocks_.pool->v(il) + v_row_bytes_ * static_cast<size_t>(paged_row(pos)), v_row_bytes_};
  }
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
  for (Layer& l : layers_) l.floor = floor;
}

void KvCache::truncate(int64_t n) {
  QRUN_CHECK(n >= 0 && n <= n_tokens_ && keepable(n) == n,
             "KV cache: truncate to %lld of %lld tokens", static_cast<long long>(n),
             static_cast<long long>(n_tokens_));
  n_tokens_ = n;
  if (n == 0) {
    n_written_ = 0;
    for (Layer& l : layers_) l.floor = 0;
  }
  if (paged()) {
    const int64_t rows = blocks_.pool->block_rows();
    blocks_.release_from(static_cast<size_t>((n + rows - 1) / rows));
  }
}

int64_t ring_first_after_shift(int64_t held, int64_t n_past, int64_t rows, int64_t n_keep,
                               int64_t n_discard) {
  // Kept positions survive from `held` on; moved position q comes from q + n_discard, held
  // when that is at least `held` (and kept positions below n_keep are then all gone).
  const int64_t first = held < n_keep ? held : std::max(held - n_discard, n_keep);
  // Positions q and q + rows share a row: the later one wins.
  return std::max({int64_t{0}, first, n_past - n_discard - rows});
}

std::string KvCache::shift_problem(int64_t n_keep, int64_t n_discard) const {
  if (paged()) return "a paged KV cache cannot be shifted";
  const int64_t n_new = n_tokens_ - n_discard;
  for (int64_t il = 0; il < n_layer_; ++il) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    if (l.window == 0) continue;
    const int64_t first_read = std::max<int64_t>(0, n_new - l.window + 1);
    const int64_t held =
        ring_first_after_shift(first_held(il), n_tokens_, l.rows, n_keep, n_discard);
    if (first_read < held) {
      return format(
          "layer %lld's sliding window of %lld positions would read position %lld after "
          "the shift, which its ring of %lld rows no longer holds",
          static_cast<long long>(il), static_cast<long long>(l.window),
          static_cast<long long>(first_read), static_cast<long long>(l.rows));
    }
  }
  return {};
}

void KvCache::shift(int64_t n_keep, int64_t n_discard, const RotateK& rotate_k) {
  QRUN_CHECK(n_keep >= 0 && n_discard > 0 && n_keep + n_discard <= n_tokens_ &&
                 shift_problem(n_keep, n_discard).empty(),
             "KV cache: shift keeping %lld and dropping %lld of %lld tokens",
             static_cast<long long>(n_keep), static_cast<long long>(n_discard),
             static_cast<long long>(n_tokens_));
  const int64_t n_past = n_tokens_;
  const int64_t n_new = n_past - n_discard;
  const int64_t n_elems = n_head_kv_ * head_dim_;
  const ToFloatFn k_to_float = type_traits(types_.k).to_float;
  const FromFloatFn k_from_float = type_traits(types_.k).from_float_act;  // as kv_store
  constexpr int64_t kChunk = 64;  // K rows converted and turned at a time
  std::vector<float> k(static_cast<size_t>(kChunk * n_elems));
  std::vector<uint8_t> staged;
  std::vector<int64_t> floors(layers_.size());  // what each windowed layer holds afterwards
  for (int64_t il = 0; il < n_layer_; ++il) {
    const Layer& l = layers_[static_cast<size_t>(il)];
    // New positions first .. n_new - 1 take the rows of first + n_discard .. n_past - 1.
    int64_t first = n_keep;
    if (l.window > 0) {
      floors[il] = ring_first_after_shift(first_held(il), n_past, l.rows, n_keep, n_discard);
      first = std::max(first, floors[il]);
    }
    // Where the layer wraps (a ring shorter than the positions held), a destination row may
    // be the source of a later position: the sources are copied out first. Otherwise each
    // destination lies below every source still to be read.
    const bool wraps = l.rows < n_past;
    const size_t row_bytes = k_row_bytes_ + v_row_bytes_;
    if (wraps) {
      staged.resize(static_cast<size_t>(n_new - first) * row_bytes);
      for (int64_t q = first; q < n_new; ++q) {
        uint8_t* s = staged.data() + static_cast<size_t>(q - first) * row_bytes;
        std::memcpy(s, k_row(il, q + n_discard).data(), k_row_bytes_);
        std::memcpy(s + k_row_bytes_, v_row(il, q + n_discard).data(), v_row_bytes_);
      }
    }
    const auto source = [&](int64_t q, bool is_k) -> const uint8_t* {
      if (!wraps) return is_k ? k_row(il, q + n_discard).data() : v_row(il, q + n_discard).data();
      return staged.data() + static_cast<size_t>(q - first) * row_bytes + (is_k ? 0 : k_row_bytes_);
    };
    for (int64_t q0 = first; q0 < n_new; q0 += kChunk) {
      const int64_t n = std::min(kChunk, n_new - q0);
      for (int64_t t = 0; t < n; ++t) k_to_float(source(q0 + t, true), &k[t * n_elems], n_elems);
      rotate_k(il, k.data(), n);
      for (int64_t t = 0; t < n; ++t) {
        k_from_float(&k[t * n_elems], k_row(il, q0 + t).data(), n_elems);
        std::memcpy(v_row(il, q0 + t).data(), source(q0 + t, false), v_row_bytes_);
      }
    }
  }
  n_tokens_ = n_written_ = n_new;
  for (size_t il = 0; il < layers_.size(); ++il) layers_[il].floor = floors[il];
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
