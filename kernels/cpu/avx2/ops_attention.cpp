// AVX2 attention for one token over a KV cache: the n_q query heads that share a KV head
// walk the cache together in tiles of 32 rows (each K and V row loaded, and for F16
// widened, once per group): all scores of the tile, then each head's online-softmax
// weights (running max m, sum l, rescale factor when m grows, as ref_attention.cpp does
// row by row), then V added to every head's accumulator, held in registers per chunk.
// F16 cache: the steps of llama.cpp's AVX2 flash attention, like the reference: q and the
// accumulator rounded to F16, q.k as 4 x 8 float lanes over 32-element steps (exact F16
// products, float sums, reduced pairwise), the tail in double, V added with an FMA.
// F32 cache: float q.k in 4 x 8 lanes, float accumulator.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx2/ops_kernels.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

constexpr int64_t kGroup = 8;  // query heads walked together; larger groups go in chunks
constexpr int64_t kTile = 32;  // cache rows per tile (scores, weights, then V)

// x[0] + x[1] + ... of four 8-lane accumulators: (x0 + x2) + (x1 + x3), then the two
// 128-bit halves, then two horizontal adds (llama.cpp's reduction order).
inline float reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// q.k over n floats: 32-element steps in four accumulators, the rest summed in double.
inline float dot_f32(const float* q, const float* k, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(k + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(k + i + 24), a3);
  }
  double sum = reduce4(a0, a1, a2, a3);
  for (; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

inline __m256 round_f16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
inline float round_f16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

// n F16 values widened to float.
inline void widen_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// The online softmax of one head over one tile of scores: for each row, the rescale factor
// ms of the accumulator so far (1 unless the max grows; 0 on the very first row) and the
// weight vs of the row, as the reference computes them row by row. Returns whether any
// ms differs from 1.
template <bool kF16>
inline bool softmax_weights(const float* s, int64_t n, float& m, float& l, float* ms, float* vs) {
  bool rescale = false;
  for (int64_t j = 0; j < n; ++j) {
    if (s[j] > m) {
      ms[j] = std::exp(m - s[j]);
      vs[j] = 1.0f;
      m = s[j];
      rescale |= ms[j] != 1.0f;
    } else {
      ms[j] = 1.0f;
      vs[j] = std::exp(s[j] - m);
    }
    l = kF16 ? std::fma(l, ms[j], vs[j]) : l * ms[j] + vs[j];
  }
  return rescale;
}

// acc[h] = acc[h] * ms[h][j] (when kRescale), then acc[h] += v_j * vs[h][j], for the rows j of
// a tile in order, every head of the group at once: each 8-float chunk of a V row is loaded
// once and added to kNq accumulators held in registers. With kF16 each result is rounded
// to F16. Multiplying by ms = 1 (and rounding an F16 value) changes nothing, so the
// per-row skips of the reference need no branch here.
template <bool kF16, bool kRescale, int kNq>
void accumulate_tile(float (*acc)[ref::kMaxHeadDim], const float* const* vr, int64_t n_rows,
                     int64_t head_dim, const float (*ms)[kTile], const float (*vs)[kTile]) {
  int64_t c = 0;
  for (; c + 8 <= head_dim; c += 8) {
    __m256 a[kNq];
    for (int h = 0; h < kNq; ++h) a[h] = _mm256_loadu_ps(acc[h] + c);
    for (int64_t j = 0; j < n_rows; ++j) {
      const __m256 x = _mm256_loadu_ps(vr[j] + c);
      for (int h = 0; h < kNq; ++h) {
        if constexpr (kRescale) {
          a[h] = _mm256_mul_ps(a[h], _mm256_broadcast_ss(&ms[h][j]));
          if constexpr (kF16) a[h] = round_f16(a[h]);
        }
        a[h] = _mm256_fmadd_ps(x, _mm256_broadcast_ss(&vs[h][j]), a[h]);
        if constexpr (kF16) a[h] = round_f16(a[h]);
      }
    }
    for (int h = 0; h < kNq; ++h) _mm256_storeu_ps(acc[h] + c, a[h]);
  }
  for (; c < head_dim; ++c) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int h = 0; h < kNq; ++h) {
        float a = acc[h][c];
        if constexpr (kRescale) {
          a *= ms[h][j];
          if constexpr (kF16) a = round_f16(a);
        }
        a = std::fma(vr[j][c], vs[h][j], a);
        if constexpr (kF16) a = round_f16(a);
        acc[h][c] = a;
      }
    }
  }
}

// kNq heads over all n_kv rows, tile by tile: the scores of every head and row of the
// tile, then each head's softmax weights, then the V rows into the accumulators. Elem is
// float (F32 cache) or uint16_t (F16 cache, rows widened to float once per tile).
template <class Elem, int kNq>
void attend_group(const float* q, int64_t q_stride, const Elem* k, const Elem* v, int64_t kv_stride,
                  int64_t n_kv, int64_t head_dim, float scale, float* out, int64_t out_stride) {
  constexpr bool kF16 = sizeof(Elem) == 2;
  alignas(32) float qs[kNq][ref::kMaxHeadDim];
  alignas(32) float acc[kNq][ref::kMaxHeadDim];
  alignas(32) float rows[kF16 ? kTile * ref::kMaxHeadDim : 1];  // widened K, then V rows
  const float* rp[kTile];
  float s[kNq][kTile];
  float ms[kNq][kTile];
  float vs[kNq][kTile];
  float m[kNq];
  float l[kNq];
  for (int h = 0; h < kNq; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const float x = q[h * q_stride + d];
      qs[h][d] = kF16 ? round_f16(x) : x;
      acc[h][d] = 0.0f;
    }
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  // Points rp at rows j0 .. j0 + n - 1 of `src` as floats.
  const auto load_rows = [&](const Elem* src, int64_t j0, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      if constexpr (kF16) {
        widen_f16(src + (j0 + j) * kv_stride, rows + j * head_dim, head_dim);
        rp[j] = rows + j * head_dim;
      } else {
        rp[j] = src + (j0 + j) * kv_stride;
      }
    }
  };
  for (int64_t j0 = 0; j0 < n_kv; j0 += kTile) {
    const int64_t n = n_kv - j0 < kTile ? n_kv - j0 : kTile;
    load_rows(k, j0, n);
    for (int h = 0; h < kNq; ++h) {
      for (int64_t j = 0; j < n; ++j) s[h][j] = dot_f32(qs[h], rp[j], head_dim) * scale;
    }
    bool rescale = false;
    for (int h = 0; h < kNq; ++h) {
      rescale |= softmax_weights<kF16>(s[h], n, m[h], l[h], ms[h], vs[h]);
    }
    load_rows(v, j0, n);
    if (rescale) {
      accumulate_tile<kF16, true, kNq>(acc, rp, n, head_dim, ms, vs);
    } else {
      accumulate_tile<kF16, false, kNq>(acc, rp, n, head_dim, ms, vs);
    }
  }
  for (int h = 0; h < kNq; ++h) {
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < head_dim; ++d) out[h * out_stride + d] = acc[h][d] * inv;
  }
}

// Groups of up to kGroup heads, each with its register count fixed at compile time.
template <class Elem>
void attend_heads(const float* q, int64_t q_stride, int64_t n_q, const Elem* k, const Elem* v,
                  int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                  int64_t out_stride) {
  const auto run = [&]<int kNq>() {
    attend_group<Elem, kNq>(q, q_stride, k, v, kv_stride, n_kv, head_dim, scale, out, out_stride);
  };
  switch (n_q) {
    case 1:
      return run.template operator()<1>();
    case 2:
      return run.template operator()<2>();
    case 3:
      return run.template operator()<3>();
    case 4:
      return run.template operator()<4>();
    case 5:
      return run.template operator()<5>();
    case 6:
      return run.template operator()<6>();
    case 7:
      return run.template operator()<7>();
    default:
      return run.template operator()<8>();
  }
}

template <class Elem>
void attend(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
            int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
            int64_t out_stride) {
  for (int64_t h0 = 0; h0 < n_q; h0 += kGroup) {
    const int64_t n = n_q - h0 < kGroup ? n_q - h0 : kGroup;
    attend_heads(q + h0 * q_stride, q_stride, n, static_cast<const Elem*>(k),
                 static_cast<const Elem*>(v), kv_stride, n_kv, head_dim, scale,
                 out + h0 * out_stride, out_stride);
  }
}

}  // namespace

void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
                int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                int64_t out_stride) {
  attend<float>(q, q_stride, n_q, k, v, kv_stride, n_kv, head_dim, scale, out, out_stride);
}

void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
                int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                int64_t out_stride) {
  attend<uint16_t>(q, q_stride, n_q, k, v, kv_stride, n_kv, head_dim, scale, out, out_stride);
}

}  // namespace qrun::kernels::avx2
