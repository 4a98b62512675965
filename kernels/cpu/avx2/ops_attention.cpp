// AVX2 attention for one token over a KV cache: the query heads walk the cache together in
// tiles of rows (attention_tiles.h; each K and V row loaded, and for F16 widened, once per
// KV head): all scores of the tile, then each head's online-softmax
// weights (running max m, sum l, rescale factor when m grows, as ref_attention.cpp does
// row by row), then V added to every head's accumulator, held in registers per chunk.
// F16 cache: the steps of llama.cpp's AVX2 flash attention, like the reference: q and the
// accumulator rounded to F16, q.k as 4 x 8 float lanes over 32-element steps (exact F16
// products, float sums, reduced pairwise), the tail in double, V added with an FMA.
// F32 cache: float q.k in 4 x 8 lanes, float accumulator.
// Other K/V pairs (BF16, Q8_0, Q4_0, mixes): attention_tiles::attend_mixed with these ops,
// and the KV rows widened to float here (exact: each value is d * q as the reference forms it).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/avx2/ops_kernels.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

using attention_tiles::kTile;

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

// acc[h] += ... (see accumulate_tile) for the kC 8-float chunks at column c, kNq * kC
// accumulators held in registers: kNq * kC independent chains of dependent steps (an FMA
// and, for F16, two conversions per row), so that each step's latency is hidden by the
// others'. Every element's own chain of steps is the same whatever the grouping.
template <bool kF16, bool kRescale, int kNq, int kC>
void accumulate_chunks(float* acc, int64_t acc_stride, const float* const* vr, int64_t n_rows,
                       int64_t c, const float (*ms)[kTile], const float (*vs)[kTile],
                       uint32_t rescale_rows) {
  __m256 a[kNq][kC];
  for (int h = 0; h < kNq; ++h) {
    for (int col = 0; col < kC; ++col)
      a[h][col] = _mm256_loadu_ps(acc + h * acc_stride + c + 8 * col);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    for (int col = 0; col < kC; ++col) {
      const __m256 x = _mm256_loadu_ps(vr[j] + c + 8 * col);
      for (int h = 0; h < kNq; ++h) {
        __m256 y = a[h][col];
        if (kRescale && (rescale_rows >> j & 1)) {
          y = _mm256_mul_ps(y, _mm256_broadcast_ss(&ms[h][j]));
          if constexpr (kF16) y = round_f16(y);
        }
        y = _mm256_fmadd_ps(x, _mm256_broadcast_ss(&vs[h][j]), y);
        if constexpr (kF16) y = round_f16(y);
        a[h][col] = y;
      }
    }
  }
  for (int h = 0; h < kNq; ++h) {
    for (int col = 0; col < kC; ++col)
      _mm256_storeu_ps(acc + h * acc_stride + c + 8 * col, a[h][col]);
  }
}

// acc[h] = acc[h] * ms[h][j] (when kRescale), then acc[h] += v_j * vs[h][j], for the rows j of
// a tile in order, every head of the group at once: each 8-float chunk of a V row is loaded
// once and added to the accumulators of every head. With kF16 each result is rounded to
// F16. Multiplying by ms = 1 (and rounding an F16 value) changes nothing, so the rescale
// runs only on the rows rescale_rows marks, where some head's max grew. Chunks go kCols at
// a time (16 registers hold up to 8 accumulators besides the row and the weights), the
// last whole ones one by one.
template <bool kF16, bool kRescale, int kNq>
void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr, int64_t n_rows,
                     int64_t head_dim, const float (*ms)[kTile], const float (*vs)[kTile],
                     uint32_t rescale_rows) {
  constexpr int kCols = kNq <= 2 ? 4 : kNq <= 4 ? 2 : 1;
  int64_t c = 0;
  for (; c + 8 * kCols <= head_dim; c += 8 * kCols) {
    accumulate_chunks<kF16, kRescale, kNq, kCols>(acc, acc_stride, vr, n_rows, c, ms, vs,
                                                  rescale_rows);
  }
  for (; c + 8 <= head_dim; c += 8) {
    accumulate_chunks<kF16, kRescale, kNq, 1>(acc, acc_stride, vr, n_rows, c, ms, vs, rescale_rows);
  }
  for (; c < head_dim; ++c) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int h = 0; h < kNq; ++h) {
        float a = acc[h * acc_stride + c];
        if (kRescale && (rescale_rows >> j & 1)) {
          a *= ms[h][j];
          if constexpr (kF16) a = round_f16(a);
        }
        a = std::fma(vr[j][c], vs[h][j], a);
        if constexpr (kF16) a = round_f16(a);
        acc[h * acc_stride + c] = a;
      }
    }
  }
}

// The vector ops of the shared tile walk (kernels/cpu/attention_tiles.h).
struct Ops {
  static constexpr int kAlign = 32;
  static float dot_f32(const float* q, const float* k, int64_t n) { return avx2::dot_f32(q, k, n); }
  static float round_f16(float x) { return avx2::round_f16(x); }
  static void widen_f16(const uint16_t* src, float* dst, int64_t n) {
    avx2::widen_f16(src, dst, n);
  }
  template <bool kF16, bool kRescale, int kNq>
  static void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr,
                              int64_t n_rows, int64_t head_dim, const float (*ms)[kTile],
                              const float (*vs)[kTile], uint32_t rescale_rows) {
    avx2::accumulate_tile<kF16, kRescale, kNq>(acc, acc_stride, vr, n_rows, head_dim, ms, vs,
                                               rescale_rows);
  }
};

}  // namespace

void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend<Ops, float>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                      partial);
}

void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend<Ops, uint16_t>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                         partial);
}

void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend_mixed<Ops>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                     partial);
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  widen_f16(static_cast<const uint16_t*>(src), dst, n);
}

// BF16 is the top half of an F32: shift each value into place.
void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(x[i]);
}

// d * q for the 32 values of each block (q as int8, d the block's F16 scale).
void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    for (int c = 0; c < kQK; c += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + c));
      _mm256_storeu_ps(dst + c, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
    }
  }
}

// d * (q - 8): the low nibbles are values 0-15 of a block, the high nibbles 16-31.
void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const __m128i lo_mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i halves[2] = {_mm_sub_epi8(_mm_and_si128(x, lo_mask), eight),
                               _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), lo_mask), eight)};
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 16; c += 8) {
        const __m128i q8 = _mm_srli_si128(halves[h], c);
        _mm256_storeu_ps(dst + 16 * h + c,
                         _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
      }
    }
  }
}

}  // namespace qrun::kernels::avx2
