// AVX-512 VNNI dot products of Q4_0 and Q8_0 with Q8_0 activations, bit-identical to the
// AVX2 ones (the float order is llama.cpp's, see avx2/dot_legacy.cpp):
//   Q4_0: q . a and 8 . a by vpdpbusd (unsigned levels <= 15 times signed activations, 4
//     products per int32 lane), their difference is the exact (q - 8) . a; four block
//     sums feed the chain of scalar FMAs in block order. (Two blocks per 512-bit vector
//     need cross-lane permutes to sum, which cost more than they save.)
//   gemv_q4_0_q8_0: four rows per pass, each row's float chain in one lane (as vec_dot).
//   Q8_0: |x| . (a with x's sign) by one 256-bit vpdpbusd per block (exact: activations
//     are never -128), then the 8-lane FMA chain over blocks.
#include "ggml-like/quants.h"
#include "kernels/cpu/avx512/dot_kernels.h"

namespace qrun::kernels::avx512 {
namespace {

// The 32 levels of a Q4_0 block in element order (low nibbles, then high nibbles).
inline __m256i q4_0_levels(const BlockQ4_0& x) {
  const __m128i q = load128(x.qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

// int32 lanes of (q - 8) . a for one block: q . a - 8 . a, each by one vpdpbusd.
inline __m256i q4_0_lanes(const BlockQ4_0& x, const BlockQ8_0& y) {
  const __m256i a = load256(y.qs);
  const __m256i zero = _mm256_setzero_si256();
  return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, q4_0_levels(x), a),
                          _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), a));
}

// Sums of the 8 int32 lanes of four vectors, as 4 int32 lanes (exact).
inline __m128i hsum4_i32x8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

// The 32 levels of a Q4_0 block from one broadcast load: the high 128-bit half shifted
// right by 4 (vpsrlvw), both halves masked to 4 bits.
inline __m256i q4_0_levels_bcast(const uint8_t* qs) {
  const __m256i shifts = _mm256_setr_epi64x(0, 0, 0x0004000400040004LL, 0x0004000400040004LL);
  const __m256i v = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_srlv_epi16(v, shifts), _mm256_set1_epi8(15));
}

// The fp16 scales of 4 blocks as floats (one vcvtph2ps).
inline __m128 scales4(uint16_t d0, uint16_t d1, uint16_t d2, uint16_t d3) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(d0), static_cast<int16_t>(d1),
                                     static_cast<int16_t>(d2), static_cast<int16_t>(d3), 0, 0, 0,
                                     0));
}

inline float block_scale(uint16_t dx, uint16_t dy) {
  return fp16_load(dx) * fp16_load(dy);
}

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  __m128 acc = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m128 f = _mm_cvtepi32_ps(
        hsum4_i32x8(q4_0_lanes(x[b], y[b]), q4_0_lanes(x[b + 1], y[b + 1]),
                    q4_0_lanes(x[b + 2], y[b + 2]), q4_0_lanes(x[b + 3], y[b + 3])));
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_set_ss(block_scale(x[b + 1].d, y[b + 1].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_set_ss(block_scale(x[b + 2].d, y[b + 2].d)), acc);
    acc =
        _mm_fmadd_ss(_mm_shuffle_ps(f, f, 3), _mm_set_ss(block_scale(x[b + 3].d, y[b + 3].d)), acc);
  }
  for (; b < nb; ++b) {
    const __m256i lanes = q4_0_lanes(x[b], y[b]);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    const __m128 f = _mm_set_ss(static_cast<float>(_mm_cvtsi128_si32(s)));
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
  }
  return _mm_cvtss_f32(acc);
}

// Four rows at a time. Per block, -8 . a is formed once and each row's vpdpbusd adds
// q . a onto it: one instruction per row for the exact (q - 8) . a lanes.
void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i eight = _mm256_set1_epi8(8);
  const size_t next_group = 4 * w_stride;  // prefetched as in the AVX2 gemv
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const BlockQ4_0* x[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = reinterpret_cast<const BlockQ4_0*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i ab = load256(a[b].qs);
      const __m256i offset = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, eight, ab));
      __m256i lanes[4];
      for (int i = 0; i < 4; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + b) + next_group, _MM_HINT_T0);
        lanes[i] = _mm256_dpbusd_epi32(offset, q4_0_levels_bcast(x[i][b].qs), ab);
      }
      const __m128 sums = _mm_cvtepi32_ps(hsum4_i32x8(lanes[0], lanes[1], lanes[2], lanes[3]));
      const __m128 d = _mm_mul_ps(scales4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                  _mm_set1_ps(fp16_load(a[b].d)));
      acc = _mm_fmadd_ps(sums, d, acc);
    }
    _mm_storeu_ps(y + r, acc);
  }
  for (; r < n_rows; ++r) y[r] = vec_dot_q4_0_q8_0(n, w + static_cast<size_t>(r) * w_stride, act);
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(block_scale(x[b].d, y[b].d));
    const __m256i xs = load256(x[b].qs);
    const __m256i lanes =
        _mm256_dpbusd_epi32(zero, _mm256_abs_epi8(xs), _mm256_sign_epi8(load256(y[b].qs), xs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc);
  }
  return hsum_f32x8(acc);
}

}  // namespace qrun::kernels::avx512
