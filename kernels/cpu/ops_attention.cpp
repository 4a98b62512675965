// Causal grouped-query attention over a KV cache (optionally a sliding-window ring, where
// position p lives in row p % n_rows; optionally paged, that row then found through the
// view's block table by KvRows::row), and the store into it. A work item is
// one (token, KV head) pair, or a slice of its query heads when there are fewer pairs than
// threads: the query heads that share that KV head are attended together by the ISA's
// attend kernel, so each K/V row is read once per group, and no n_tokens x n_ctx matrix
// is ever formed (the kernels use an online softmax; see ref_attention.cpp). K and V may
// be of different types; BF16, Q8_0 and Q4_0 rows are stored as llama.cpp's CPU backend
// converts them and read in place by attend_mixed (kernel_table.h: KvRowsMixed).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels {

namespace {

bool is_kv_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0;
}

// A paged view's blocks are a power of two of at least kKvBlockAlign rows, and its table
// covers its rows. Returns log2 of the block's rows (0 when not paged).
int check_paged(const KvLayerView& cache, const char* op) {
  if (!cache.paged()) return 0;
  const int64_t b = cache.block_rows;
  QRUN_CHECK(b >= kKvBlockAlign && (b & (b - 1)) == 0 && cache.n_rows % b == 0,
             "%s: paged view of %lld rows in blocks of %lld", op,
             static_cast<long long>(cache.n_rows), static_cast<long long>(b));
  int shift = 0;
  while ((int64_t{1} << shift) < b) ++shift;
  return shift;
}

}  // namespace

FromFloatFn CpuBackend::kv_row_converter(DType type) const {
  switch (type) {
    case DType::kBF16:  // the ISA's F32 -> BF16 (round to nearest even), as ggml's from_float
      return kernels_->for_type(DType::kBF16).quantize_act;
    case DType::kQ8_0:  // llama.cpp's CPU from_float for Q8_0 is its activation quantizer
      return kernels_->for_type(DType::kQ8_0).quantize_act;
    case DType::kQ4_0:  // and for Q4_0 the reference quantizer
      return type_traits(DType::kQ4_0).from_float;
    default:
      return nullptr;
  }
}

void CpuBackend::kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                          const float* v) {
  QRUN_CHECK(pos >= 0 && n_tokens >= 0 && n_tokens <= cache.n_rows,
             "kv_store: %lld tokens at position %lld in a cache of %lld rows",
             static_cast<long long>(n_tokens), static_cast<long long>(pos),
             static_cast<long long>(cache.n_rows));
  QRUN_CHECK(is_kv_type(cache.k_type) && is_kv_type(cache.v_type), "kv_store: cache types %s, %s",
             dtype_name(cache.k_type), dtype_name(cache.v_type));
  check_paged(cache, "kv_store");
  QRUN_CHECK(!cache.paged() || pos + n_tokens <= cache.n_rows,
             "kv_store: %lld tokens at position %lld past the %lld rows of a paged view",
             static_cast<long long>(n_tokens), static_cast<long long>(pos),
             static_cast<long long>(cache.n_rows));
  const int64_t n = cache.row_elems();
  // Token t goes to row (pos + t) % n_rows: a ring wraps once at most, as n_tokens <= n_rows.
  // A paged view stores that row in its block.
  const auto dst = [&](void* base, size_t row_bytes, int64_t t) {
    return static_cast<uint8_t*>(base) +
           static_cast<size_t>(cache.storage_row((pos + t) % cache.n_rows)) * row_bytes;
  };
  const ToF16Fn to_f16 = kernels_->to_f16;
  // One of K or V: rows of src converted to `type` (each row whole: a quantized row is
  // blocks of the whole n_head_kv * head_dim, which every head's blocks tile).
  const auto store = [&](void* base, DType type, const float* src, int64_t begin, int64_t end) {
    const size_t row_bytes = row_size(type, n);
    const FromFloatFn convert = kv_row_converter(type);
    for (int64_t t = begin; t < end; ++t) {
      uint8_t* d = dst(base, row_bytes, t);
      if (type == DType::kF32) {
        std::memcpy(d, src + t * n, row_bytes);
      } else if (type == DType::kF16) {
        to_f16(src + t * n, reinterpret_cast<uint16_t*>(d), n);
      } else {
        convert(src + t * n, d, n);
      }
    }
  };
  if (cache.k_type == DType::kF32 && cache.v_type == DType::kF32) {
    store(cache.k, DType::kF32, k, 0, n_tokens);
    store(cache.v, DType::kF32, v, 0, n_tokens);
    return;
  }
  pool_.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    store(cache.k, cache.k_type, k, begin, end);
    store(cache.v, cache.v_type, v, begin, end);
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
  QRUN_CHECK(is_kv_type(cache.k_type) && is_kv_type(cache.v_type), "attention: cache types %s, %s",
             dtype_name(cache.k_type), dtype_name(cache.v_type));
  const int block_shift = check_paged(cache, "attention");
  const int64_t group = n_head / n_head_kv;
  const int64_t q_row = n_head * head_dim;
  // Both F32 or both F16: the kernels of those caches; any other pair: attend_mixed with
  // the table's row functions for the two types (q in K's dot type, V widened per row).
  const bool same =
      cache.k_type == cache.v_type && (cache.k_type == DType::kF32 || cache.k_type == DType::kF16);
  const AttendFn attend = cache.k_type == DType::kF32 ? kernels_->attend_f32 : kernels_->attend_f16;
  const size_t k_head_bytes = row_size(cache.k_type, head_dim);
  const size_t v_head_bytes = row_size(cache.v_type, head_dim);
  KvRowsMixed mixed;
  if (!same) {
    const MatmulKernels& kk = kernels_->for_type(cache.k_type);
    mixed.k_stride = cache.k_row_bytes();
    mixed.v_stride = cache.v_row_bytes();
    mixed.v_type = cache.v_type;
    mixed.k_quantize = kk.act_type == DType::kF32 ? nullptr : kk.quantize_act;
    mixed.k_dot = kk.vec_dot;
    mixed.v_to_float = kernels_->to_float[static_cast<size_t>(cache.v_type)];
    QRUN_CHECK(mixed.k_dot != nullptr && mixed.v_to_float != nullptr &&
                   (kk.act_type == DType::kF32 || mixed.k_quantize != nullptr) &&
                   row_size(kk.act_type, head_dim) <= ref::kMaxQueryBytes,
               "attention: no row kernels for K %s, V %s", dtype_name(cache.k_type),
               dtype_name(cache.v_type));
  }
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
      const int64_t pos = pos0 + t;
      const int64_t oldest = params.window > 0 ? std::max<int64_t>(0, pos - params.window + 1) : 0;
      const int64_t h0 = hk * group + first;
      const uint8_t* k =
          static_cast<const uint8_t*>(cache.k) + static_cast<size_t>(hk) * k_head_bytes;
      const uint8_t* v =
          static_cast<const uint8_t*>(cache.v) + static_cast<size_t>(hk) * v_head_bytes;
      if (same) {
        const KvRows rows{k,
                          v,
                          cache.row_elems(),
                          oldest % cache.n_rows,
                          pos - oldest + 1,
                          cache.n_rows,
                          cache.block_table,
                          block_shift};
        attend(q + t * q_row + h0 * head_dim, head_dim, n_q, rows, head_dim, params.scale,
               out + t * q_row + h0 * head_dim, head_dim);
      } else {
        KvRowsMixed rows = mixed;
        rows.k = k;
        rows.v = v;
        rows.first = oldest % cache.n_rows;
        rows.n = pos - oldest + 1;
        rows.n_ring = cache.n_rows;
        rows.table = cache.block_table;
        rows.block_shift = block_shift;
        kernels_->attend_mixed(q + t * q_row + h0 * head_dim, head_dim, n_q, rows, head_dim,
                               params.scale, out + t * q_row + h0 * head_dim, head_dim);
      }
    }
  });
}

}  // namespace qrun::kernels
