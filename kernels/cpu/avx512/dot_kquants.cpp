// AVX-512 VNNI dot products of Q3_K, Q4_K and Q6_K with Q8_K activations, bit-identical to the
// AVX2 ones (llama.cpp's float order, see avx2/dot_kquants.cpp). The AVX2 kernels form
// int32 lane k of a 32-element group as scale * (sum of the 4 products 4k .. 4k + 3);
// here vpmaddubsw forms the int16 pair sums and vpdpwssd multiplies them by the
// sub-block scales and accumulates in one step (vpdpbusd + vpmulld would be one more,
// slow, instruction). Q6_K works on 64 elements (two groups) per 512-bit vector and adds
// the halves at the end, as Q3_K does; Q4_K stays at 256 bits, where its scale broadcasts are
// single in-lane shuffles (measured faster on the Xeon host than the 512-bit cross-lane form).
// Either way the 8 int32 lanes are the AVX2 ones, hence the same floats.
#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/kquant_levels.h"
#include "kernels/cpu/avx512/dot_kernels.h"

namespace qrun::kernels::avx512 {
namespace {

// The 8 scales and 8 mins of a Q4_K super-block as bytes: sc[0..7], then m[0..7].
inline __m128i unpack_scales_mins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof(w));
  const uint32_t low6 = 0x3f3f3f3fu;
  const uint32_t low4 = 0x0f0f0f0fu;
  const uint32_t top2 = 0xc0c0c0c0u;
  return _mm_setr_epi32(
      static_cast<int>(w[0] & low6), static_cast<int>((w[2] & low4) | ((w[0] & top2) >> 2)),
      static_cast<int>(w[1] & low6), static_cast<int>(((w[2] >> 4) & low4) | ((w[1] & top2) >> 2)));
}

// Each int32 lane v (an int16 value) as the int16 pair (v, v), the form vpdpwssd needs.
inline __m512i int16_pairs(__m512i v) {
  return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(v, 16));
}

// int16 element s of each 128-bit half of v, in every int16 lane of that half.
inline __m256i broadcast_i16(__m256i v, int s) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * s)));
}

}  // namespace

float vec_dot_q4_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ4_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const float dmin = -y[b].d * fp16_load(x[b].dmin);
    const __m128i sm = unpack_scales_mins(x[b].scales);
    // Mins term: m[s] times the sum of sub-block s, as 4 int32 pair sums (exact).
    const __m256i bsums = load256(y[b].bsums);
    const __m128i sub_sums =
        _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
    const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), sub_sums);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // sc[0..7]
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      // Pairs <= 2 * 15 * 128 in int16; each int32 lane gains sc * (two pairs).
      const __m256i bits = load256(x[b].qs + 32 * j);
      const __m256i lo =
          _mm256_maddubs_epi16(_mm256_and_si256(bits, m4), load256(y[b].qs + 64 * j));
      const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                              load256(y[b].qs + 64 * j + 32));
      sumi = _mm256_dpwssd_epi32(sumi, lo, broadcast_i16(sc, 2 * j));
      sumi = _mm256_dpwssd_epi32(sumi, hi, broadcast_i16(sc, 2 * j + 1));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc) + hsum_f32x4(acc_m);
}

// Levels q in [0, 63]: q . a - 32 . a by two vpmaddubsw is the exact (q - 32) . a per
// pair of elements (pairs <= 2 * 63 * 128 before, 2 * 32 * 128 after the subtraction);
// each 16-element sub-block covers 4 int32 lanes and takes its int8 scale.
float vec_dot_q6_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ6_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i m2 = _mm512_set1_epi8(3);
  const __m512i m32 = _mm512_set1_epi8(32);
  const __m512i zero = _mm512_setzero_si512();
  // Lanes 0-15 -> sub-blocks 4i + lane / 4 for vector i (64 elements = 4 sub-blocks).
  const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const __m512i scales = int16_pairs(_mm512_cvtepi8_epi32(load128(x[b].scales)));
    __m512i sumi = zero;
    for (int h = 0; h < 2; ++h) {
      // ql0 | ql1 (64 bytes) hold the low nibbles of elements 0-63 and (>> 4) of 64-127
      // of this half; qh bit pairs 0-1, 2-3 go with 0-63 and 4-5, 6-7 with 64-127.
      const __m512i ql = load512(x[b].ql + 64 * h);
      const __m256i qh = load256(x[b].qh + 32 * h);
      const __m512i qh01 = join256(qh, _mm256_srli_epi16(qh, 2));
      const __m512i qh23 = _mm512_srli_epi16(qh01, 4);
      const __m512i q[2] = {_mm512_or_si512(_mm512_and_si512(ql, m4),
                                            _mm512_slli_epi16(_mm512_and_si512(qh01, m2), 4)),
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                            _mm512_slli_epi16(_mm512_and_si512(qh23, m2), 4))};
      for (int k = 0; k < 2; ++k) {
        const __m512i a = load512(y[b].qs + 128 * h + 64 * k);
        const __m512i pairs =
            _mm512_sub_epi16(_mm512_maddubs_epi16(q[k], a), _mm512_maddubs_epi16(m32, a));
        const __m512i sel = _mm512_add_epi32(quad, _mm512_set1_epi32(8 * h + 4 * k));
        sumi = _mm512_dpwssd_epi32(sumi, pairs, _mm512_permutexvar_epi32(sel, scales));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold512(sumi)), acc);
  }
  return hsum_f32x8(acc);
}

// Q3_K: AVX2's (q - 4) . a per pair of elements is the low two bits times a minus 4 times
// a where the hmask bit is clear; here the level q = (low bits) + 4 * (hmask bit), 0 .. 7,
// goes through one vpmaddubsw and 4 . a through another (pairs <= 2 * 7 * 128), the same
// int16 pair exactly. 64 elements per vector as Q6_K: vector (h, k) holds AVX2's 32-byte
// steps 2k and 2k + 1 of half h, its 128-bit lanes sub-blocks 8h + 4k .. + 3, and the
// halves are folded into AVX2's 8 int32 lanes at the end (exact).
float vec_dot_q3_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ3_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const __m512i scales =
        int16_pairs(_mm512_cvtepi8_epi32(kquant_levels::q3_k_scales(x[b].scales)));
    // Bit 4h + k of hmask[l] is bit 2 of the level of element 128h + 32k + l.
    const __m256i hmask = load256(x[b].hmask);
    const __m512i hm = join256(hmask, hmask);
    __m512i sumi = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m256i bits = load256(x[b].qs + 32 * h);
      const __m512i q01 = join256(bits, _mm256_srli_epi16(bits, 2));
      const __m512i q23 = _mm512_srli_epi16(q01, 4);
      for (int k = 0; k < 2; ++k) {
        const int bit = 4 * h + 2 * k;
        const __mmask64 high =
            _mm512_test_epi8_mask(hm, join256(_mm256_set1_epi8(static_cast<char>(1 << bit)),
                                              _mm256_set1_epi8(static_cast<char>(1 << (bit + 1)))));
        const __m512i low = _mm512_and_si512(k == 0 ? q01 : q23, m3);
        const __m512i q = _mm512_mask_add_epi8(low, high, low, four);
        const __m512i a = load512(y[b].qs + 128 * h + 64 * k);
        const __m512i pairs =
            _mm512_sub_epi16(_mm512_maddubs_epi16(q, a), _mm512_maddubs_epi16(four, a));
        const __m512i sel = _mm512_add_epi32(quad, _mm512_set1_epi32(8 * h + 4 * k));
        sumi = _mm512_dpwssd_epi32(sumi, pairs, _mm512_permutexvar_epi32(sel, scales));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold512(sumi)), acc);
  }
  return hsum_f32x8(acc);
}

}  // namespace qrun::kernels::avx512
