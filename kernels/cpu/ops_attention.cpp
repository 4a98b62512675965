// Causal grouped-query attention over a KV cache (optionally a sliding-window ring, where
// position p lives in row p % n_rows; optionally paged, that row then found through the
// view's block table by KvRows::row), and the store into it. A work item is a token and
// several KV heads, read together in one pass over their rows while that leaves every
// thread two items or more; else one (token, KV head) pair, or a slice of its query heads
// when there are fewer pairs than threads. The query heads that share a KV head are
// attended together by the ISA's attend kernel, so each K/V row is read once per group,
// and no n_tokens x n_ctx matrix is ever formed (the kernels use an online softmax; see
// ref_attention.cpp). A read of more than 256 rows goes in chunks whose softmax states are
// merged, as llama.cpp's split decode merges them, so that a few tokens over a long cache
// keep every thread busy; the chunks depend on the rows read alone, never on the thread
// count or the batch. K and V may be of different types; BF16, Q8_0 and Q4_0 rows are
// stored as llama.cpp's CPU backend converts them and read in place by attend_mixed
// (kernel_table.h: KvRowsMixed).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

#include "ggml-like/result.h"
#include "kernels/cpu/attention_tiles.h"
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

// A long read is cut into chunks of kChunkRows rows, or into kMaxChunks chunks of a whole
// number of tiles once that makes them longer: a function of the row count alone.
constexpr int64_t kChunkRows = 256;
constexpr int64_t kMaxChunks = 16;
// Batches of at most this many tokens share their chunks out over the threads.
constexpr int64_t kSplitTokens = 4;

struct ChunkPlan {
  explicit ChunkPlan(int64_t n_rows) : n(n_rows) {
    if (n <= kChunkRows) {
      rows = n;
    } else {
      const int64_t even = (n + kMaxChunks - 1) / kMaxChunks;
      const int64_t tiles = (even + attention_tiles::kTile - 1) / attention_tiles::kTile;
      rows = std::max(kChunkRows, tiles * attention_tiles::kTile);
    }
    n_chunks = (n + rows - 1) / rows;
  }
  int64_t rows_of(int64_t c) const { return std::min(rows, n - c * rows); }
  int64_t n = 0;         // rows read
  int64_t rows = 0;      // rows per chunk (the last may have fewer)
  int64_t n_chunks = 0;  // at most kMaxChunks
};

// Folds one chunk's unnormalized accumulator and softmax state (acc_c, m_c, l_c) into the
// running ones (acc, m, l), rescaling both to the larger max, in float: the merge of
// llama.cpp's split flash-attention decode. The first chunk is taken as it is.
void merge_chunk(float* acc, float& m, float& l, const float* acc_c, float m_c, float l_c,
                 int64_t head_dim, bool first) {
  if (first) {
    std::memcpy(acc, acc_c, static_cast<size_t>(head_dim) * sizeof(float));
    m = m_c;
    l = l_c;
    return;
  }
  const float m_new = std::max(m, m_c);
  const float s_old = std::exp(m - m_new);
  const float s_new = std::exp(m_c - m_new);
  for (int64_t d = 0; d < head_dim; ++d) acc[d] = acc[d] * s_old + acc_c[d] * s_new;
  l = l * s_old + l_c * s_new;
  m = m_new;
}

void normalize(float* acc, float l, int64_t head_dim) {
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < head_dim; ++d) acc[d] *= inv;
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
  QRUN_CHECK(params.softcap >= 0.0f, "attention: soft-cap %g", static_cast<double>(params.softcap));
  const KqScale kq(params.scale, params.softcap);
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
    mixed.k_head_bytes = k_head_bytes;
    mixed.v_head_bytes = v_head_bytes;
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
  // Token t reads the n_read(t) rows from position oldest(t) to its own.
  const auto oldest = [&](int64_t t) {
    return params.window > 0 ? std::max<int64_t>(0, pos0 + t - params.window + 1) : int64_t{0};
  };
  const auto n_read = [&](int64_t t) { return pos0 + t - oldest(t) + 1; };
  // Query heads h0 .. h0 + n_q - 1 of token t (KV heads hk .. hk + n_hk - 1) over its rows
  // j0 .. j0 + n - 1.
  const auto attend_rows = [&](int64_t t, int64_t hk, int64_t n_hk, int64_t h0, int64_t n_q,
                               int64_t j0, int64_t n, float* o, int64_t o_stride, float* partial) {
    const uint8_t* k =
        static_cast<const uint8_t*>(cache.k) + static_cast<size_t>(hk) * k_head_bytes;
    const uint8_t* v =
        static_cast<const uint8_t*>(cache.v) + static_cast<size_t>(hk) * v_head_bytes;
    const int64_t first = (oldest(t) + j0) % cache.n_rows;
    const float* qh = q + t * q_row + h0 * head_dim;
    if (same) {
      const KvRows rows{.k = k,
                        .v = v,
                        .stride = cache.row_elems(),
                        .first = first,
                        .n = n,
                        .n_ring = cache.n_rows,
                        .table = cache.block_table,
                        .block_shift = block_shift,
                        .n_heads = n_hk,
                        .head_stride = head_dim};
      attend(qh, head_dim, n_q, rows, head_dim, kq, o, o_stride, partial);
    } else {
      KvRowsMixed rows = mixed;
      rows.k = k;
      rows.v = v;
      rows.first = first;
      rows.n = n;
      rows.n_ring = cache.n_rows;
      rows.table = cache.block_table;
      rows.block_shift = block_shift;
      rows.n_heads = n_hk;
      kernels_->attend_mixed(qh, head_dim, n_q, rows, head_dim, kq, o, o_stride, partial);
    }
  };
  // A read of more than kChunkRows rows goes in chunks (ChunkPlan), each head's chunks
  // merged in order: the same arithmetic whether one thread walks them in turn (many
  // tokens) or the threads share them (a few tokens over a long cache, where there may be
  // fewer (token, KV head) pairs than threads), so the result depends on neither the
  // thread count nor the batch.
  // (The chunk count is not monotonic in the rows read: 4096 rows are 16 chunks of 256,
  // 4097 are 15 of 288.)
  int64_t max_chunks = 1;
  for (int64_t t = 0; t < n_tokens && n_tokens <= kSplitTokens; ++t) {
    max_chunks = std::max(max_chunks, ChunkPlan(n_read(t)).n_chunks);
  }
  const size_t split_floats =
      static_cast<size_t>(kSplitTokens * kMaxChunks * n_head) * static_cast<size_t>(head_dim + 2);
  if (chunk_buf_.size() < split_floats) chunk_buf_.resize(split_floats);  // once per shape
  const bool split = max_chunks > 1;
  // Work items are (token, KV heads, slice of their query heads[, chunk]). An item of
  // several KV heads reads its rows whole, in storage order (attention_tiles.h), where
  // one head's slice of each row after another would leave the core waiting on memory; it
  // takes as many as the kernels walk together while each thread still gets two items or
  // more. A whole group per item reads each K/V row once for all its heads; when that
  // leaves threads idle (decoding a model with few KV heads on many cores), the group is
  // cut into slices. Each head's result is the same bits however the items are cut.
  const int64_t per_pair = split ? ChunkPlan(n_read(0)).n_chunks : 1;
  int64_t kv_batch = n_head_kv;
  while (kv_batch > 1 && (n_head_kv % kv_batch != 0 ||
                          !attend_reads_heads_together(kv_batch * group, kv_batch, head_dim) ||
                          n_tokens * (n_head_kv / kv_batch) * per_pair < 2 * pool_.n_threads())) {
    --kv_batch;
  }
  const int64_t n_batches = n_head_kv / kv_batch;
  int64_t n_slices = 1;
  while (kv_batch == 1 && n_slices < group &&
         n_tokens * n_head_kv * n_slices * per_pair < pool_.n_threads()) {
    n_slices *= 2;
  }
  n_slices = std::min(n_slices, group);
  const int64_t slice = (group + n_slices - 1) / n_slices;
  const int64_t n_chunk_slots = split ? max_chunks : 1;
  const int64_t n_items = n_tokens * n_batches * n_slices * n_chunk_slots;
  // Chunk c of token t, head h: its accumulator and (m, l) in chunk_buf_ (split only).
  float* const split_acc = chunk_buf_.data();
  float* const split_ml = split_acc + kSplitTokens * kMaxChunks * n_head * head_dim;
  const auto slot = [&](int64_t t, int64_t c, int64_t h) {
    return (t * kMaxChunks + c) * n_head + h;
  };
  // Threads take items in turn, the latest tokens first: a causal token attends over as many
  // rows as its position, so a split into equal ranges would leave the thread with the first
  // tokens a third of the work; taken longest first, the short items even out the end.
  std::atomic<int64_t> next{0};
  pool_.parallel_for(std::min<int64_t>(pool_.n_threads(), n_items), [&](int64_t, int64_t) {
    for (int64_t taken = next.fetch_add(1); taken < n_items; taken = next.fetch_add(1)) {
      const int64_t item = n_items - 1 - taken;
      const int64_t c = item % n_chunk_slots;
      const int64_t pair = item / n_chunk_slots;
      const int64_t t = pair / (n_batches * n_slices);
      const int64_t hk = pair / n_slices % n_batches * kv_batch;
      const int64_t first = pair % n_slices * slice;
      const int64_t n_q = kv_batch > 1 ? kv_batch * group : std::min(slice, group - first);
      const ChunkPlan plan(n_read(t));
      if (n_q <= 0 || c >= plan.n_chunks) continue;
      const int64_t h0 = hk * group + first;
      float* o = out + t * q_row + h0 * head_dim;
      if (plan.n_chunks == 1) {
        attend_rows(t, hk, kv_batch, h0, n_q, 0, plan.n, o, head_dim, nullptr);
      } else if (split) {
        attend_rows(t, hk, kv_batch, h0, n_q, c * plan.rows, plan.rows_of(c),
                    split_acc + slot(t, c, h0) * head_dim, head_dim, split_ml + 2 * slot(t, c, h0));
      } else {
        // Every chunk in turn, into a buffer, merged into out: all the item's heads at once
        // when it has several KV heads, else kGroup heads at a time.
        using attention_tiles::kMaxWalkHeads;
        alignas(64) float acc[kAttendWalkFloats];
        float ml[2 * kMaxWalkHeads];
        float m[kMaxWalkHeads];
        float l[kMaxWalkHeads];
        const int64_t per_call = kv_batch > 1 ? n_q : attention_tiles::kGroup;
        for (int64_t g0 = 0; g0 < n_q; g0 += per_call) {
          const int64_t n_g = std::min(per_call, n_q - g0);
          for (int64_t cc = 0; cc < plan.n_chunks; ++cc) {
            attend_rows(t, hk, kv_batch, h0 + g0, n_g, cc * plan.rows, plan.rows_of(cc), acc,
                        head_dim, ml);
            for (int64_t h = 0; h < n_g; ++h) {
              merge_chunk(o + (g0 + h) * head_dim, m[h], l[h], acc + h * head_dim, ml[2 * h],
                          ml[2 * h + 1], head_dim, cc == 0);
            }
          }
          for (int64_t h = 0; h < n_g; ++h) normalize(o + (g0 + h) * head_dim, l[h], head_dim);
        }
      }
    }
  });
  if (!split) return;
  // Each head's chunks merged in order, as the unsplit walk above merges them.
  pool_.parallel_for(
      n_tokens * n_head,
      [&](int64_t begin, int64_t end) {
        for (int64_t th = begin; th < end; ++th) {
          const int64_t t = th / n_head;
          const int64_t n_chunks = ChunkPlan(n_read(t)).n_chunks;
          if (n_chunks == 1) continue;  // a short read, already in out
          const int64_t h = th % n_head;
          float* o = out + t * q_row + h * head_dim;
          float m = 0.0f;
          float l = 0.0f;
          for (int64_t c = 0; c < n_chunks; ++c) {
            const int64_t i = slot(t, c, h);
            merge_chunk(o, m, l, split_acc + i * head_dim, split_ml[2 * i], split_ml[2 * i + 1],
                        head_dim, c == 0);
          }
          normalize(o, l, head_dim);
        }
      },
      4);
}

}  // namespace qrun::kernels
