// AVX-512 attention for one token over a KV cache: avx2/ops_attention.cpp with 16-lane
// vectors (a 64- or 128-element head is 4 or 8 vectors; other sizes end in a masked one).
// The query heads walk the cache in tiles of rows (attention_tiles.h): scores, then each
// head's online-softmax weights, then V added to each KV head's group of accumulators in
// registers.
// F16 cache: as llama.cpp's AVX-512 flash attention steps: q and the accumulator rounded
// to F16, q.k as 4 x 16 float lanes over 64-element steps ((x0 + x2) + (x1 + x3), then a
// lane reduction), the tail in double, V added with an FMA. F32 cache: float throughout.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/avx512/avx512_ops.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::avx512 {
namespace {

using attention_tiles::kTile;

// The maskz forms with a full mask: GCC 12 warns (maybe-uninitialized) on the plain
// intrinsics, which pass an undefined vector as the merge source.
constexpr __mmask16 kAll = 0xffff;

inline __m512 widen_f16(__m256i h) {
  return _mm512_maskz_cvtph_ps(kAll, h);
}

inline __m512 round_f16(__m512 x) {
  return widen_f16(_mm512_maskz_cvtps_ph(kAll, x, _MM_FROUND_TO_NEAREST_INT));
}

// Sum of the 16 lanes: the 256-bit halves, the 128-bit halves, then two horizontal adds.
inline float reduce_add(__m512 x) {
  const __m512d xd = _mm512_castps_pd(x);
  const __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, xd, 0)),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, xd, 1)));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// q.k over n floats: 64-element steps in four accumulators, the rest summed in double.
inline float dot_f32(const float* q, const float* k, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 32), _mm512_loadu_ps(k + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 48), _mm512_loadu_ps(k + i + 48), a3);
  }
  double sum = reduce_add(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

inline float round_f16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

inline void widen_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i,
                     widen_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// acc[h] = acc[h] * ms[h][j] (when kRescale), then acc[h] += v_j * vs[h][j], for the rows j of
// a tile in order, every head of the group at once: each 16-float chunk of a V row is loaded
// once and added to kNq accumulators held in registers. With kF16 each result is rounded
// to F16. Multiplying by ms = 1 (and rounding an F16 value) changes nothing, so the
// rescale runs only on the rows rescale_rows marks, where some head's max grew. A pass
// takes up to kCols chunks of the row together: each accumulator is a chain of dependent
// steps (an FMA and, for F16, two conversions per row), so kNq * kCols independent chains
// keep the vector units busy where one chunk's kNq chains would leave them waiting on each
// step's latency. Every element's own chain of steps is the same whatever the grouping.
template <bool kF16, bool kRescale, int kNq>
void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr, int64_t n_rows,
                     int64_t head_dim, const float (*ms)[kTile], const float (*vs)[kTile],
                     uint32_t rescale_rows) {
  static_assert(kNq >= 1 && kNq <= attention_tiles::kGroup);
  constexpr int kCols = 16 / kNq;
  for (int64_t c0 = 0; c0 < head_dim; c0 += 16 * kCols) {
    __mmask16 mask[kCols];
    for (int col = 0; col < kCols; ++col) {
      const int64_t left = head_dim - c0 - 16 * col;
      mask[col] = left >= 16 ? kAll : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    }
    // Columns past the row (mask 0) are neither read nor written.
    __m512 a[kNq][kCols];
    for (int h = 0; h < kNq; ++h) {
      for (int col = 0; col < kCols; ++col) {
        a[h][col] = mask[col] == 0
                        ? _mm512_setzero_ps()
                        : _mm512_maskz_loadu_ps(mask[col], acc + h * acc_stride + c0 + 16 * col);
      }
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int col = 0; col < kCols; ++col) {
        if (mask[col] == 0) break;
        const __m512 x = _mm512_maskz_loadu_ps(mask[col], vr[j] + c0 + 16 * col);
        for (int h = 0; h < kNq; ++h) {
          __m512 y = a[h][col];
          if (kRescale && (rescale_rows >> j & 1)) {
            y = _mm512_mul_ps(y, _mm512_set1_ps(ms[h][j]));
            if constexpr (kF16) y = round_f16(y);
          }
          y = _mm512_fmadd_ps(x, _mm512_set1_ps(vs[h][j]), y);
          if constexpr (kF16) y = round_f16(y);
          a[h][col] = y;
        }
      }
    }
    for (int h = 0; h < kNq; ++h) {
      for (int col = 0; col < kCols; ++col) {
        if (mask[col] != 0)
          _mm512_mask_storeu_ps(acc + h * acc_stride + c0 + 16 * col, mask[col], a[h][col]);
      }
    }
  }
}

// The vector ops of the shared tile walk (kernels/cpu/attention_tiles.h).
struct Ops {
  static constexpr int kAlign = 64;
  static float dot_f32(const float* q, const float* k, int64_t n) {
    return avx512::dot_f32(q, k, n);
  }
  static float round_f16(float x) { return avx512::round_f16(x); }
  static void widen_f16(const uint16_t* src, float* dst, int64_t n) {
    avx512::widen_f16(src, dst, n);
  }
  template <bool kF16, bool kRescale, int kNq>
  static void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr,
                              int64_t n_rows, int64_t head_dim, const float (*ms)[kTile],
                              const float (*vs)[kTile], uint32_t rescale_rows) {
    avx512::accumulate_tile<kF16, kRescale, kNq>(acc, acc_stride, vr, n_rows, head_dim, ms, vs,
                                                 rescale_rows);
  }
};

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

}  // namespace

// The KV rows are widened by the AVX2 functions the table already holds (a row of 64 to
// 256 values is no wider task for 16 lanes).
void fill_op_kernels(CpuKernels& k) {
  k.attend_f32 = attend_f32;
  k.attend_f16 = attend_f16;
  k.attend_mixed = attend_mixed;
}

}  // namespace qrun::kernels::avx512
