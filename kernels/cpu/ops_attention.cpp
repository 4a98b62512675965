// Causal grouped-query attention over a KV cache (optionally a sliding-window ring, where
// position p lives in row p % n_rows), and the store into it. A work item is
// one (token, KV head) pair, or a slice of its query heads when there are fewer pairs than
// threads: the query heads that share that KV head are attended together by the ISA's
// attend kernel, so each K/V row is read once per group, and no n_tokens x n_ctx matrix
// is ever formed (the kernels use an online softmax; see ref_attention.cpp).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels {

void CpuBackend::kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                          const float* v) {
  QRUN_CHECK(pos >= 0 && n_tokens >= 0 && n_tokens <= cache.n_rows,
             "kv_store: %lld tokens at position %lld in a cache of %lld rows",
             static_cast<long long>(n_tokens), static_cast<long long>(pos),
             static_cast<long long>(cache.n_rows));
  QRUN_CHECK(cache.type == DType::kF32 || cache.type == DType::kF16, "kv_store: cache type %s",
             dtype_name(cache.type));
  const int64_t n = cache.row_elems();
  const size_t row_bytes = row_size(cache.type, n);
  // Token t goes to row (pos + t) % n_rows: a ring wraps once at most, as n_tokens <= n_rows.
  const auto dst = [&](void* base, int64_t t) {
    return static_cast<uint8_t*>(base) + static_cast<size_t>((pos + t) % cache.n_rows) * row_bytes;
  };
  if (cache.type == DType::kF32) {
    const int64_t n_first = std::min(n_tokens, cache.n_rows - pos % cache.n_rows);
    for (const auto& [t0, count] :
         {std::pair{int64_t{0}, n_first}, std::pair{n_first, n_tokens - n_first}}) {
      if (count == 0) continue;
      const size_t bytes = row_bytes * static_cast<size_t>(count);
      std::memcpy(dst(cache.k, t0), k + t0 * n, bytes);
      std::memcpy(dst(cache.v, t0), v + t0 * n, bytes);
    }
    return;
  }
  const ToF16Fn to_f16 = kernels_->to_f16;
  pool_.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      to_f16(k + t * n, reinterpret_cast<uint16_t*>(dst(cache.k, t)), n);
      to_f16(v + t * n, reinterpret_cast<uint16_t*>(dst(cache.v, t)), n);
    }
  });
}

void CpuBackend::attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                           const AttentionParams& params, float* out) {
  const int64_t n_head = params.n_head;
  const int64_t n_head_kv = params.n_head_kv;
  const int64_t head_dim = params.head_dim;
  QRUN_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0 && n_head_kv == cache.n_head_kv &&
                 head_dim == cache.head_dim && head_dim <= ref::kMaxHeadDim,
             "attention: n_head %lld, n_head_kv %lld (cache %lld), head_dim %lld (cache %lld)",
             static_cast<long long>(n_head), static_cast<long long>(n_head_kv),
             static_cast<long long>(cache.n_head_kv), static_cast<long long>(head_dim),
             static_cast<long long>(cache.head_dim));
  // Each token reads its window (or every position before it), which must all be in the
  // cache: the first token's window and the whole batch fit in the rows together.
  const int64_t span =
      params.window > 0 ? std::min(pos0, params.window - 1) + n_tokens : pos0 + n_tokens;
  QRUN_CHECK(pos0 >= 0 && params.window >= 0 && span <= cache.n_rows,
             "attention: %lld tokens at position %lld (window %lld) in a cache of %lld rows",
             static_cast<long long>(n_tokens), static_cast<long long>(pos0),
             static_cast<long long>(params.window), static_cast<long long>(cache.n_rows));
  QRUN_CHECK(cache.type == DType::kF32 || cache.type == DType::kF16, "attention: cache type %s",
             dtype_name(cache.type));
  const int64_t group = n_head / n_head_kv;
  const int64_t stride = cache.row_elems();
  const int64_t q_row = n_head * head_dim;
  const size_t elem_bytes = cache.type == DType::kF32 ? sizeof(float) : sizeof(uint16_t);
  const AttendFn attend = cache.type == DType::kF32 ? kernels_->attend_f32 : kernels_->attend_f16;
  // Work items are (token, KV head, slice of its query heads). A whole group per item
  // reads each K/V row once for all its heads; when that leaves threads idle (decoding a
  // model with few KV heads on many cores), the group is cut into slices. Each head's
  // result is the same either way.
  int64_t n_slices = 1;
  while (n_slices < group && n_tokens * n_head_kv * n_slices < pool_.n_threads()) n_slices *= 2;
  n_slices = std::min(n_slices, group);
  const int64_t slice = (group + n_slices - 1) / n_slices;
  // Threads take items in turn, the latest tokens first: a causal token attends over as many
  // rows as its position, so a split into equal ranges would leave the thread with the first
  // tokens a third of the work; taken longest first, the short items even out the end.
  const int64_t n_items = n_tokens * n_head_kv * n_slices;
  std::atomic<int64_t> next{0};
  pool_.parallel_for(std::min<int64_t>(pool_.n_threads(), n_items), [&](int64_t, int64_t) {
    for (int64_t taken = next.fetch_add(1); taken < n_items; taken = next.fetch_add(1)) {
      const int64_t item = n_items - 1 - taken;
      const int64_t t = item / (n_head_kv * n_slices);
      const int64_t hk = item / n_slices % n_head_kv;
      const int64_t first = item % n_slices * slice;
      const int64_t n_q = std::min(slice, group - first);
      if (n_q <= 0) continue;
      const size_t kv_offset = static_cast<size_t>(hk * head_dim) * elem_bytes;
      const int64_t pos = pos0 + t;
      const int64_t oldest = params.window > 0 ? std::max<int64_t>(0, pos - params.window + 1) : 0;
      const KvRows rows{static_cast<const uint8_t*>(cache.k) + kv_offset,
                        static_cast<const uint8_t*>(cache.v) + kv_offset,
                        stride,
                        oldest % cache.n_rows,
                        pos - oldest + 1,
                        cache.n_rows};
      const int64_t h0 = hk * group + first;
      attend(q + t * q_row + h0 * head_dim, head_dim, n_q, rows, head_dim, params.scale,
             out + t * q_row + h0 * head_dim, head_dim);
    }
  });
}

}  // namespace qrun::kernels
