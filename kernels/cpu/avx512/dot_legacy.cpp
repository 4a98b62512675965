// AVX-512 VNNI dot products of Q4_0 and Q8_0 with Q8_0 activations, bit-identical to the
// AVX2 ones (the float order is llama.cpp's, see avx2/dot_legacy.cpp):
//   Q4_0: two blocks per 512-bit vector; q . a and 8 . a by vpdpbusd (unsigned levels
//     <= 15 times signed activations, 4 products per int32 lane), their difference is the
//     exact (q - 8) . a; four block sums feed the chain of scalar FMAs in block order.
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

// int32 lanes of (q - 8) . a for blocks b (low half) and b + 1 (high half).
inline __m512i q4_0_pair_lanes(const BlockQ4_0* x, const BlockQ8_0* y) {
  const __m512i q = join256(q4_0_levels(x[0]), q4_0_levels(x[1]));
  const __m512i a = join256(load256(y[0].qs), load256(y[1].qs));
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q, a),
                          _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), a));
}

// The four block sums of two pair-lane vectors, as [b, b + 1, b + 2, b + 3].
inline __m128i block_sums4(__m512i p01, __m512i p23) {
  // Pairwise lane sums: after two rounds of adding neighbours each 128-bit quarter holds
  // its block's partial sums; the halves of each block are then added.
  const __m512i idx_even =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i idx_odd =
      _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // s1 lanes 0-7: block b, 8-15: b+1 ... as 4 lanes each, in order b, b+1, b+2, b+3.
  const __m512i s1 = _mm512_add_epi32(_mm512_permutex2var_epi32(p01, idx_even, p23),
                                      _mm512_permutex2var_epi32(p01, idx_odd, p23));
  const __m512i s2 = _mm512_add_epi32(_mm512_permutexvar_epi32(idx_even, s1),
                                      _mm512_permutexvar_epi32(idx_odd, s1));
  // s2 lanes 0-7 hold 2 partial sums per block, in order.
  const __m256i s2lo = _mm512_castsi512_si256(s2);
  const __m256i s3 = _mm256_add_epi32(
      _mm256_permutevar8x32_epi32(s2lo, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)),
      _mm256_permutevar8x32_epi32(s2lo, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7)));
  return _mm256_castsi256_si128(s3);
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
        block_sums4(q4_0_pair_lanes(x + b, y + b), q4_0_pair_lanes(x + b + 2, y + b + 2)));
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_set_ss(block_scale(x[b + 1].d, y[b + 1].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_set_ss(block_scale(x[b + 2].d, y[b + 2].d)), acc);
    acc =
        _mm_fmadd_ss(_mm_shuffle_ps(f, f, 3), _mm_set_ss(block_scale(x[b + 3].d, y[b + 3].d)), acc);
  }
  for (; b < nb; ++b) {
    const __m256i q = q4_0_levels(x[b]);
    const __m256i a = load256(y[b].qs);
    const __m256i zero = _mm256_setzero_si256();
    __m256i lanes = _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, q, a),
                                     _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), a));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    const __m128 f = _mm_set_ss(static_cast<float>(_mm_cvtsi128_si32(s)));
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
  }
  return _mm_cvtss_f32(acc);
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
