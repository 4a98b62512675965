// What the AVX-512 kernels over the x16 layouts of kernels/cpu/repack.h share: the one-row
// gemv (gemv_repacked.cpp) and the multi-row one (gemv_repacked_rows.cpp) read the same
// blocks, so they decode scales and levels with the same functions. Only files in this
// folder include this header (it needs the AVX-512 compile flags).
#pragma once

#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx512/dot_kernels.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx512 {

// The 4 bytes at p, broadcast to all 16 lanes.
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// -offset * (the sum of the 32 activation levels at aq): the exact seed of the integer dot
// of levels stored as q + offset, (q + offset) . a - offset * sum(a) = q . a.
inline int32_t offset_seed(const int8_t* aq, uint8_t offset) {
  const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                        _mm256_set1_epi8(static_cast<char>(offset)), load256(aq));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
  return -_mm_cvtsi128_si32(h);
}

// The blocks of nibbles (Q4_0 and IQ4_NL, the same x16 layout): each turns a vector of
// nibbles (0 .. 15, one per byte) into the unsigned bytes that vpdpbusd meets the
// activation with, level + kOffset, so that a dot seeded with offset_seed(aq, kOffset) is
// the exact integer dot of the levels with the activation.
//   Q4_0: level q - 8, so the bytes are the nibbles themselves.
//   IQ4_NL: level kIq4Values[q] (-127 .. 113), the bytes kIq4Values[q] + 128 (1 .. 241) from
//     one vpshufb of that table; a 4-product vpdpbusd sum stays within 4 * 241 * 128.
struct Q4_0Nibbles {
  static constexpr uint8_t kOffset = 8;
  __m512i operator()(__m512i q) const { return q; }
};
struct Iq4NlNibbles {
  static constexpr uint8_t kOffset = 128;
  // The zero-masking broadcast: GCC 12's plain one trips -Werror=uninitialized (see
  // widen_f16x16 below).
  __m512i table = _mm512_maskz_broadcast_i32x4(
      0xffff, _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)),
                            _mm_set1_epi8(-128)));
  __m512i operator()(__m512i q) const { return _mm512_shuffle_epi8(table, q); }
};

// 16 fp16 values, and 16 int32 values, as floats. GCC 12 builds the plain intrinsics on an
// "undefined" vector that -Werror=uninitialized rejects once they are inlined into the
// k-quant kernels (the sanitizer build); the all-ones zero-masking forms are the same
// instructions.
inline __m512 widen_f16x16(__m256i h) {
  return _mm512_maskz_cvtph_ps(0xffff, h);
}
inline __m512 to_float(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(0xffff, v);
}

// Eight per-lane accumulators summed in hsum_f32x8's order: ((l0 + l4) + (l2 + l6)) +
// ((l1 + l5) + (l3 + l7)).
inline __m512 sum8_in_hsum_order(const __m512 l[8]) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                       _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
}

// How far ahead of the block being read a group's quants are prefetched: into L1 by the
// multi-row k-quant kernels, into L2 by the rest (gemv_repacked.cpp says why).
inline constexpr size_t kPrefetchBytes = 2048;
inline constexpr size_t kL2PrefetchBytes = 4096;

// Asks for the `lines` cache lines at kL2PrefetchBytes past p to be brought into L2.
inline void prefetch_to_l2(const uint8_t* p, int lines) {
  for (int l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kL2PrefetchBytes + 64 * l), _MM_HINT_T1);
  }
}

// The constants of the Q4_K kernels: byte masks and the vpshufb controls of repack.h.
struct Q4KConstants {
  __m512i m4 = _mm512_set1_epi8(15);
  __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f);
  __m512i low4 = _mm512_set1_epi32(0x0f0f0f0f);
  __m512i bits45 = _mm512_set1_epi32(0x30303030);
  __m512i pair01 = _mm512_load_si512(kPairControls[0].bytes);
  __m512i pair23 = _mm512_load_si512(kPairControls[1].bytes);
  __m512i dup[4] = {
      _mm512_load_si512(kDupControls[0].bytes), _mm512_load_si512(kDupControls[1].bytes),
      _mm512_load_si512(kDupControls[2].bytes), _mm512_load_si512(kDupControls[3].bytes)};
};

// The 6-bit scales and mins of one super-block of a group of 16 Q4_K rows (at blk),
// vec_dot_q4_k_q8_k's unpack_scales_mins lane-wise: sc03 and sc47 hold sc[0..3] and
// sc[4..7] as bytes; m_pairs[p] holds (m[2p], m[2p + 1]) as the int16 pair that vpmaddwd
// meets with the activation's sub-block sums S[2p], S[2p + 1].
struct Q4KScales {
  __m512i sc03;
  __m512i sc47;
  __m512i m_pairs[4];
};
inline Q4KScales q4_k_scales(const uint8_t* blk, const Q4KConstants& k) {
  const __m512i w0 = load512(blk + 64);
  const __m512i w1 = load512(blk + 128);
  const __m512i w2 = load512(blk + 192);
  const __m512i m03 = _mm512_and_si512(w1, k.low6);
  const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), k.low4),
                                      _mm512_and_si512(_mm512_srli_epi32(w1, 2), k.bits45));
  return {_mm512_and_si512(w0, k.low6),
          _mm512_or_si512(_mm512_and_si512(w2, k.low4),
                          _mm512_and_si512(_mm512_srli_epi32(w0, 2), k.bits45)),
          {_mm512_shuffle_epi8(m03, k.pair01), _mm512_shuffle_epi8(m03, k.pair23),
           _mm512_shuffle_epi8(m47, k.pair01), _mm512_shuffle_epi8(m47, k.pair23)}};
}

// (sc[s], sc[s]) int16 pairs of a Q4K super-block for its low (s = 2j, high = false) or
// high (s = 2j + 1) nibbles of 64-element part j.
inline __m512i q4_k_scale_pair(const Q4KScales& s, int j, bool high, const Q4KConstants& k) {
  return _mm512_shuffle_epi8(j < 2 ? s.sc03 : s.sc47, k.dup[(2 * j + (high ? 1 : 0)) % 4]);
}

// The activation's sub-block sums S[2p] and S[2p + 1] of a super-block (its bsums added in
// wrapping int16, as vec_dot_q4_k_q8_k's vphaddw adds them) as one int16 pair.
inline int32_t q4_k_mins_pair(const BlockQ8_K& ab, int p) {
  const auto s0 = static_cast<int16_t>(ab.bsums[4 * p] + ab.bsums[4 * p + 1]);
  const auto s1 = static_cast<int16_t>(ab.bsums[4 * p + 2] + ab.bsums[4 * p + 3]);
  return static_cast<int32_t>(static_cast<uint16_t>(s0) |
                              static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16);
}

// The mins' float sums of 16 rows of Q4_K, as vec_dot_q4_k_q8_k keeps them: one chain per
// pair p of sub-blocks, += dmin * (m[2p] * S[2p] + m[2p + 1] * S[2p + 1]) per super-block,
// summed in hsum_f32x4's order at the end. `pairs` holds q4_k_mins_pair(ab, p) for p < 4.
struct Q4KMins {
  __m512 pair[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
  void add(__m512 dmin, const Q4KScales& sm, const int32_t pairs[4]) {
    for (int p = 0; p < 4; ++p) {
      const __m512i m = _mm512_madd_epi16(sm.m_pairs[p], _mm512_set1_epi32(pairs[p]));
      pair[p] = _mm512_fmadd_ps(dmin, to_float(m), pair[p]);
    }
  }
  __m512 total() const {
    return _mm512_add_ps(_mm512_add_ps(pair[0], pair[2]), _mm512_add_ps(pair[1], pair[3]));
  }
};

// The same for Q5_K, as vec_dot_q5_k_q8_k keeps them: the integer m . S of a super-block
// (exact: any order), then one chain per row, sum_min = fma(dmin, float(m . S), sum_min)
// (vec_dot's scalar chain, which GCC contracts to that FMA).
struct Q5KMins {
  __m512 sum_min = _mm512_setzero_ps();
  void add(__m512 dmin, const Q4KScales& sm, const int32_t pairs[4]) {
    __m512i m = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      m = _mm512_add_epi32(m, _mm512_madd_epi16(sm.m_pairs[p], _mm512_set1_epi32(pairs[p])));
    }
    sum_min = _mm512_fmadd_ps(dmin, to_float(m), sum_min);
  }
  __m512 total() const { return sum_min; }
};

// The 5-bit levels of Q5_K column vector q[8g + l] (w) of a group, as vec_dot_q5_k_q8_k
// forms them: h is qh column l shifted down by 2g, so its bits 0 and 1 are the fifth bits of
// the low and high nibbles; each goes to bit 4 and is merged by one vpternlogd.
inline void q5_k_levels(__m512i w, __m512i h, const Q4KConstants& k, __m512i& lo, __m512i& hi) {
  constexpr int kOrAnd = 0xf8;  // vpternlogd: a | (b & c)
  const __m512i bit4 = _mm512_set1_epi8(16);
  lo = _mm512_ternarylogic_epi32(_mm512_and_si512(w, k.m4), _mm512_slli_epi16(h, 4), bit4, kOrAnd);
  hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(w, 4), k.m4),
                                 _mm512_slli_epi16(h, 3), bit4, kOrAnd);
}

// The constants of the Q6_K kernels.
struct Q6KConstants {
  __m512i m4 = _mm512_set1_epi8(15);
  __m512i bits45 = _mm512_set1_epi8(0x30);
  __m512i sc_control[4] = {
      _mm512_load_si512(kHighDupControls[0].bytes), _mm512_load_si512(kHighDupControls[1].bytes),
      _mm512_load_si512(kHighDupControls[2].bytes), _mm512_load_si512(kHighDupControls[3].bytes)};
};

// scale[s]: (sc[s], sc[s]) as sign-extended int16 pairs, for the 16-element sub-block s of
// a Q6_K super-block of a group (its scale columns at sc).
inline void q6_k_scales(const uint8_t* sc, const Q6KConstants& k, __m512i scale[16]) {
  for (int s = 0; s < 16; ++s) {
    scale[s] =
        _mm512_srai_epi16(_mm512_shuffle_epi8(load512(sc + 64 * (s / 4)), k.sc_control[s % 4]), 8);
  }
}

// The 6-bit levels of ql column 16h + m of a Q6_K super-block (w), whose low nibbles are
// column 32h + m and high ones column 32h + m + 16: bits 4-5 are bit pairs m / 8 and
// 2 + m / 8 of qh column 8h + m % 8 (t), moved within each byte (16-bit shifts: what crosses
// bytes is masked off) and merged with the nibble by one vpternlogd.
inline void q6_k_levels(__m512i w, __m512i t, int m, const Q6KConstants& k, __m512i& lev_lo,
                        __m512i& lev_hi) {
  constexpr int kOrAnd = 0xf8;  // vpternlogd: a | (b & c)
  const __m512i t_lo = m < 8 ? _mm512_slli_epi16(t, 4) : _mm512_slli_epi16(t, 2);
  const __m512i t_hi = m < 8 ? t : _mm512_srli_epi16(t, 2);
  lev_lo = _mm512_ternarylogic_epi32(_mm512_and_si512(w, k.m4), t_lo, k.bits45, kOrAnd);
  lev_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(w, 4), k.m4), t_hi,
                                     k.bits45, kOrAnd);
}

}  // namespace qrun::kernels::avx512
