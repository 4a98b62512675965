// AVX2 decode gemv over the x16 layouts of kernels/cpu/repack.h, bit-identical to this
// table's vec_dot (dot_legacy.cpp, dot_kquants.cpp). A ymm holds 4 bytes of 8 rows, the
// first or second half of a 64-byte x16 vector; row j's int32 and float lanes are lane
// j mod 8 of half j / 8, so nothing is summed across rows. Without VNNI the byte products
// go through vpmaddubsw (unsigned x signed bytes -> saturating int16 pairs) and vpmaddwd.
//   Q4_0: levels 0..15 against activations in [-128, 127]: one vpmaddubsw pair is at most
//     2 * 15 * 128 = 3840 in magnitude, so the 8 pair vectors of a block (4 columns, low
//     and high nibbles) sum in int16 to at most 30720 < 32767: exact. vpmaddwd widens them,
//     -8 * sum(a) is added in int32, and each row's float chain is vec_dot_q4_0_q8_0's:
//     acc = fma(float(block sum), d_x * d_y, acc), block after block.
//   IQ4_NL: Q4_0's bytes and float chain (vec_dot_iq4_nl_q8_0's); the nibbles become the
//     signed table levels (-127 .. 113) by one vpshufb, which would saturate vpmaddubsw as
//     unsigned bytes, so they meet the activation through dot_s8s8 (|l| times a with l's
//     sign, pairs within 2 * 127 * 127), widened per vector: exact int32 sums, no seed.
//   Q8_0: q + 128 reaches 255 and would saturate vpmaddubsw, so the bytes are xored back to
//     q and go through dot_s8s8 (|q| times a with q's sign), the very pairs vec_dot forms:
//     int32 lane k of a row is vec_dot's lane k for every input, saturating or not. Each
//     row keeps vec_dot's 8 lane accumulators, acc_k = fma(d_x * d_y, float(lane_k), acc_k),
//     reduced in hsum_f32x8's order at the end.
//   Q5_0: vec_dot_q5_0_q8_0 keeps 8 int32 lanes per block, lane 4s + c summing (q - 16) . a
//     over elements 16s + 4c .. + 3 (column c's low nibbles for s = 0, high for s = 1), and
//     8 float accumulators, as Q8_0. Each row keeps those lanes: the levels (<= 31) are the
//     nibbles with the regrouped high bit shifted to bit 4, vpmaddubsw with the 4 activation
//     bytes gives pairs of at most 2 * 31 * 128 (no saturation), vpmaddwd widens them and
//     -16 * (the group's sum of a) is added in int32: the exact lane. Float steps are
//     vec_dot's, acc_k = fma(d_x * d_y, float(lane_k), acc_k), hsum_f32x8's order at the end.
//   Q4_K: vec_dot_q4_k_q8_k (dot_kquants.cpp) keeps 8 int32 lanes per super-block, lane l
//     of its 32-byte load j being qs bytes 32j + 4l .. + 3, and those are exactly column
//     vector q[8j + l] of the layout. So each row carries 8 int32 sums sumi[l] in its lane
//     of 8 ymm, built with vec_dot's own instructions on the same bytes: vpmaddubsw of the
//     nibbles (<= 15) with the 4 activation bytes (pairs <= 2 * 15 * 128, never saturating),
//     vpmaddwd by the broadcast 6-bit scale, vpaddd. Integer sums are exact (below
//     8 * 63 * 2 * 3840 per lane), so the order of the additions is free; every sumi[l] is
//     vec_dot's lane l for every input. The float steps are then vec_dot's per row:
//     d = d_y * d_x and dmin = -d_y * dmin_x (one rounding each), acc[l] = fma(d,
//     float(sumi[l]), acc[l]) per super-block; the mins term m[2p] * S[2p] + m[2p + 1] *
//     S[2p + 1] (S the sub-block sums of bsums, added in wrapping int16 as vphaddw does) goes
//     through vpmaddwd into acc_m[p] = fma(dmin, float(.), acc_m[p]); the end is
//     hsum_f32x8(acc) + hsum_f32x4(acc_m) in their association order. One group at a time,
//     the two 8-row halves of each super-block one after the other (8 sumi + constants
//     fill the 16 ymm; the 24 float accumulators live in memory, touched once per block).
//   Q5_K: Q4_K's steps with vec_dot_q5_k_q8_k's fifth bit, bit 2j (2j + 1) of qh column l
//     moved to bit 4 of the low (high) nibbles' levels of column q[8j + l] (<= 31, pairs <=
//     2 * 31 * 128); its mins go into one chain per row, sum_min = fma(dmin, float(m . S),
//     sum_min) per super-block (vec_dot's scalar chain, contracted by GCC to that FMA), and
//     the end is hsum_f32x8(acc) + sum_min.
//   Q6_K: vec_dot_q6_k_q8_k's step (h, k) loads elements 128h + 32k .. + 31, so its int32
//     lane l sums column c = 32h + 8k + l (elements 4c .. 4c + 3): lane l gathers the columns
//     c = l mod 8 over the whole super-block. ql column 16h + m of the layout holds columns
//     32h + m (low nibbles) and 32h + m + 16 (high), both c = m mod 8, so each row keeps 8
//     int32 sums sumi[m % 8] in its lane, as for Q4_K. The int16 pairs are vec_dot's: levels
//     (<= 63, bits 4-5 from qh column 8h + m % 8) times the 4 activation bytes by vpmaddubsw
//     (|pair| <= 2 * 63 * 128), minus vec_dot's vpmaddubsw(32, a) (the same for every row,
//     formed once per super-block), so |p| <= 24320, no saturation; vpmaddwd by the int8
//     sub-block scale (column c / 4) widens it. Integer sums stay below 2^31 (8 columns *
//     2 * 24320 * 128 per lane), so sumi[l] is vec_dot's lane l whatever the order. Float
//     steps per row: d = d_y * d_x, acc[l] = fma(d, float(sumi[l]), acc[l]) per
//     super-block, hsum_f32x8(acc) at the end. Halves and layout as for Q4_K.
// For Q4_0, Q5_0 and Q8_0 two groups go side by side and each prefetches its quants 2 KiB ahead
// (x86 prefetches never fault): on the 2-core Xeon host, over an 850 MB matrix, that
// streamed best of 1, 2 or 4 groups and 0, 512, 1024 or 2048 bytes (Q4_0 ~1.6x, Q8_0 ~1.4x
// the row-wise AVX2 gemv). On the 2-core EPYC (Zen 4) guest, asking for those lines 4 KiB
// ahead into L2 (prefetcht1) instead of L1 made Gemma 3 270M's decode (Q8_0 output, Q5_0
// q/k/gate/up) 1.2x as fast on these kernels, with TinyLlama Q4_0 unchanged; the k-quants
// keep their L1 prefetches, which the same change made 1.6x slower there.
#include <type_traits>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/dot_common.h"
#include "kernels/cpu/avx2/dot_kernels.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx2 {
namespace {

// The 4 bytes at p, broadcast to all 8 lanes.
inline __m256i bcast32(const void* p) {
  return _mm256_set1_epi32(static_cast<int32_t>(load_u32(p)));
}

// The fp16 scales of rows 8h .. 8h + 7 of block b (d[b][16] at the group's start) times da.
inline __m256 row_scales(const uint8_t* group, int64_t b, int h, __m256 da) {
  const auto* d = reinterpret_cast<const uint16_t*>(group) + b * kRepackRows + 8 * h;
  return _mm256_mul_ps(_mm256_cvtph_ps(load128(d)), da);
}

// Eight per-lane accumulators summed in hsum_f32x8's order: ((l0 + l4) + (l2 + l6)) +
// ((l1 + l5) + (l3 + l7)).
inline __m256 sum8_in_hsum_order(const __m256 l[8]) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                       _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
}

// How far ahead of the block being read each group prefetches its quants.
constexpr size_t kPrefetchBytes = 2048;

// Prefetches the `lines` cache lines at kPrefetchBytes past p.
inline void prefetch_ahead(const uint8_t* p, int lines) {
  for (int l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * l), _MM_HINT_T0);
  }
}

// How far ahead the Q4_0, Q5_0 and Q8_0 groups prefetch into L2 (see the header comment).
constexpr size_t kL2PrefetchBytes = 4096;

// Asks for the `lines` cache lines at kL2PrefetchBytes past p to be brought into L2.
inline void prefetch_to_l2(const uint8_t* p, int lines) {
  for (int l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kL2PrefetchBytes + 64 * l), _MM_HINT_T1);
  }
}

// kG groups side by side (kG memory streams, which keeps more loads in flight than one).
template <int kG>
void q4_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m256i corr = _mm256_set1_epi32(-hsum_i32x8(dot_u8s8(eight, load256(aq))));
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 4 * 64;
      prefetch_to_l2(qb, 4);
      for (int h = 0; h < 2; ++h) {
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i w = load256(qb + 64 * k + 32 * h);
          s = _mm256_add_epi16(s, pairs_u8s8(low_nibbles(w), bcast32(aq + 4 * k)));
          s = _mm256_add_epi16(s, pairs_u8s8(high_nibbles(w), bcast32(aq + 16 + 4 * k)));
        }
        const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s, ones), corr);
        acc[i][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), row_scales(gbase, b, h, da), acc[i][h]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    _mm256_storeu_ps(y + i * kRepackRows, acc[i][0]);
    _mm256_storeu_ps(y + i * kRepackRows + 8, acc[i][1]);
  }
}

// IQ4_NL, kG groups side by side as q4_0_groups: the levels come from the table by vpshufb,
// signed (-127 .. 113), and meet the activation through dot_s8s8 (|l| times a with l's
// sign; pairs within 2 * 127 * 127), widened per vector: int32 sums exact, no seed.
template <int kG>
void iq4_nl_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                   float* y) {
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4Values));
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 4 * 64;
      prefetch_to_l2(qb, 4);
      for (int h = 0; h < 2; ++h) {
        __m256i sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i w = load256(qb + 64 * k + 32 * h);
          const __m256i lo = _mm256_shuffle_epi8(table, low_nibbles(w));
          const __m256i hi = _mm256_shuffle_epi8(table, high_nibbles(w));
          sum = _mm256_add_epi32(sum, dot_s8s8(lo, bcast32(aq + 4 * k)));
          sum = _mm256_add_epi32(sum, dot_s8s8(hi, bcast32(aq + 16 + 4 * k)));
        }
        acc[i][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), row_scales(gbase, b, h, da), acc[i][h]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    _mm256_storeu_ps(y + i * kRepackRows, acc[i][0]);
    _mm256_storeu_ps(y + i * kRepackRows + 8, acc[i][1]);
  }
}

template <int kG>
void q8_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2][8];
  for (auto& g : acc) {
    for (auto& half : g) {
      for (auto& v : half) v = _mm256_setzero_ps();
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 8 * 64;
      prefetch_to_l2(qb, 8);
      for (int h = 0; h < 2; ++h) {
        const __m256 ds = row_scales(gbase, b, h, da);
        for (int k = 0; k < 8; ++k) {
          const __m256i q = _mm256_xor_si256(load256(qb + 64 * k + 32 * h), bias);
          const __m256i lanes = dot_s8s8(q, bcast32(aq + 4 * k));
          acc[i][h][k] = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(lanes), acc[i][h][k]);
        }
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_ps(y + i * kRepackRows + 8 * h, sum8_in_hsum_order(acc[i][h]));
    }
  }
}

// The high bits of a Q5_0 group's column c, nibbles s, at bit 4 of every byte of h (the
// regrouped bits of repack.h: bit 2c + s of each byte; 16-bit shifts keep every bit that
// lands on bit 4 within its byte, the rest is masked off by the caller).
inline __m256i q5_0_high_at_bit4(__m256i h, int bit) {
  if (bit < 4) return _mm256_slli_epi16(h, 4 - bit);
  if (bit > 4) return _mm256_srli_epi16(h, bit - 4);
  return h;
}

template <int kG>
void q5_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i sixteen = _mm256_set1_epi8(16);  // the offset, and bit 4 of the levels
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2][8];
  for (auto& g : acc) {
    for (auto& half : g) {
      for (auto& v : half) v = _mm256_setzero_ps();
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    // -16 * (sum of each 4-byte group of the activation), one int32 per group.
    alignas(32) int32_t corr[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(corr),
                       _mm256_sub_epi32(_mm256_setzero_si256(), dot_u8s8(sixteen, load256(aq))));
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* hb = gbase + q_offset + static_cast<size_t>(b) * kQ5_0GroupBlockBytes;
      const uint8_t* qb = hb + kRepackRows * 4;
      prefetch_to_l2(hb, 5);
      for (int half = 0; half < 2; ++half) {
        const __m256 ds = row_scales(gbase, b, half, da);
        const __m256i h = load256(hb + 32 * half);
        for (int c = 0; c < 4; ++c) {
          const __m256i w = load256(qb + 64 * c + 32 * half);
          for (int s = 0; s < 2; ++s) {
            const __m256i nib = s == 0 ? low_nibbles(w) : high_nibbles(w);
            const __m256i lev =
                _mm256_or_si256(nib, _mm256_and_si256(q5_0_high_at_bit4(h, 2 * c + s), sixteen));
            const int k = 4 * s + c;
            const __m256i lanes =
                _mm256_add_epi32(_mm256_madd_epi16(pairs_u8s8(lev, bcast32(aq + 4 * k)), ones),
                                 _mm256_set1_epi32(corr[k]));
            acc[i][half][k] = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(lanes), acc[i][half][k]);
          }
        }
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_ps(y + i * kRepackRows + 8 * h, sum8_in_hsum_order(acc[i][h]));
    }
  }
}

// One group of 16 Q4_K or Q5_K rows; rows 8h .. 8h + 7 are half h (see the file comment).
template <class Block>
void k_super_group(int64_t nb, const uint8_t* group, size_t /*group_bytes: one group*/,
                   const BlockQ8_K* a, float* y) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  const __m256i bit4 = _mm256_set1_epi8(16);
  const __m256i low6 = _mm256_set1_epi32(0x3f3f3f3f);
  const __m256i low4 = _mm256_set1_epi32(0x0f0f0f0f);
  const __m256i bits45 = _mm256_set1_epi32(0x30303030);
  const __m256i pair01 = load256(kPairControls[0].bytes);
  const __m256i pair23 = load256(kPairControls[1].bytes);
  __m256i dup[4];
  for (int s = 0; s < 4; ++s) dup[s] = load256(kDupControls[s].bytes);
  constexpr size_t kSuperBytes = kRepackRows * sizeof(Block);
  __m256 acc[2][8];
  __m256 acc_m[2][4];                                              // Q4_K's mins chains
  __m256 sum_min[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // Q5_K's
  for (auto& half : acc) {
    for (auto& v : half) v = _mm256_setzero_ps();
  }
  for (auto& half : acc_m) {
    for (auto& v : half) v = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_K& ab = a[b];
    const uint8_t* blk = group + static_cast<size_t>(b) * kSuperBytes;
    const uint8_t* qh = blk + 64 + 3 * 64;  // Q5_K
    const uint8_t* q = qh + (kQ5 ? 8 * 64 : 0);
    // (S[2p], S[2p + 1]) as the int16 halves of every int32 lane, S[s] = bsums[2s] +
    // bsums[2s + 1] in wrapping int16 (vec_dot's vphaddw).
    __m256i sums[4];
    for (int p = 0; p < 4; ++p) {
      const auto s0 = static_cast<int16_t>(ab.bsums[4 * p] + ab.bsums[4 * p + 1]);
      const auto s1 = static_cast<int16_t>(ab.bsums[4 * p + 2] + ab.bsums[4 * p + 3]);
      sums[p] = _mm256_set1_epi32(static_cast<int32_t>(
          static_cast<uint16_t>(s0) | static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(ab.d), _mm256_cvtph_ps(load128(blk + 16 * h)));
      const __m256 dmin =
          _mm256_mul_ps(_mm256_set1_ps(-ab.d), _mm256_cvtph_ps(load128(blk + 32 + 16 * h)));
      // unpack_scales_mins, lane-wise: sc[0..3], sc[4..7], m[0..3], m[4..7] as bytes.
      const __m256i w0 = load256(blk + 64 + 32 * h);
      const __m256i w1 = load256(blk + 128 + 32 * h);
      const __m256i w2 = load256(blk + 192 + 32 * h);
      const __m256i sc03 = _mm256_and_si256(w0, low6);
      const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(w2, low4),
                                           _mm256_and_si256(_mm256_srli_epi32(w0, 2), bits45));
      const __m256i m03 = _mm256_and_si256(w1, low6);
      const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4),
                                          _mm256_and_si256(_mm256_srli_epi32(w1, 2), bits45));
      const __m256i m_pairs[4] = {
          _mm256_shuffle_epi8(m03, pair01), _mm256_shuffle_epi8(m03, pair23),
          _mm256_shuffle_epi8(m47, pair01), _mm256_shuffle_epi8(m47, pair23)};
      if constexpr (kQ5) {
        __m256i mins = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m_pairs[p], sums[p]));
        }
        sum_min[h] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mins), sum_min[h]);
      } else {
        for (int p = 0; p < 4; ++p) {
          const __m256i mins = _mm256_madd_epi16(m_pairs[p], sums[p]);
          acc_m[h][p] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mins), acc_m[h][p]);
        }
      }
      __m256i sumi[8];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        // (sc[s], sc[s]) int16 pairs for the low (s = 2j) and high (2j + 1) nibbles.
        const __m256i sc_lo = _mm256_shuffle_epi8(j < 2 ? sc03 : sc47, dup[(2 * j) % 4]);
        const __m256i sc_hi = _mm256_shuffle_epi8(j < 2 ? sc03 : sc47, dup[(2 * j + 1) % 4]);
        const int8_t* aq = ab.qs + 64 * j;
        for (int l = 0; l < 8; ++l) {
          const uint8_t* v = q + static_cast<size_t>(8 * j + l) * 64;
          if (h == 0) prefetch_ahead(v, 1);
          const __m256i w = load256(v + 32 * h);
          __m256i lev_lo = low_nibbles(w);
          __m256i lev_hi = high_nibbles(w);
          if constexpr (kQ5) {
            // Bits 2j and 2j + 1 of qh column l at bit 4 (16-bit shifts; only bit 4 kept).
            const uint8_t* hv = qh + static_cast<size_t>(l) * 64;
            if (h == 0 && j == 0) prefetch_ahead(hv, 1);
            const __m256i bits = _mm256_srli_epi16(load256(hv + 32 * h), 2 * j);
            lev_lo = _mm256_or_si256(lev_lo, _mm256_and_si256(_mm256_slli_epi16(bits, 4), bit4));
            lev_hi = _mm256_or_si256(lev_hi, _mm256_and_si256(_mm256_slli_epi16(bits, 3), bit4));
          }
          const __m256i lo = pairs_u8s8(lev_lo, bcast32(aq + 4 * l));
          const __m256i hi = pairs_u8s8(lev_hi, bcast32(aq + 32 + 4 * l));
          sumi[l] = _mm256_add_epi32(sumi[l], _mm256_add_epi32(_mm256_madd_epi16(lo, sc_lo),
                                                               _mm256_madd_epi16(hi, sc_hi)));
        }
      }
      for (int l = 0; l < 8; ++l) {
        acc[h][l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[l]), acc[h][l]);
      }
    }
  }
  // hsum_f32x8(acc) + hsum_f32x4(acc_m), per row.
  for (int h = 0; h < 2; ++h) {
    const __m256* m = acc_m[h];
    const __m256 mins =
        kQ5 ? sum_min[h] : _mm256_add_ps(_mm256_add_ps(m[0], m[2]), _mm256_add_ps(m[1], m[3]));
    _mm256_storeu_ps(y + 8 * h, _mm256_add_ps(sum8_in_hsum_order(acc[h]), mins));
  }
}

// One group of 16 Q6_K rows; rows 8r .. 8r + 7 are half r (see the file comment).
void q6_k_group(int64_t nb, const uint8_t* group, size_t /*group_bytes: one group*/,
                const BlockQ8_K* a, float* y) {
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256i sc_control[4];
  for (int i = 0; i < 4; ++i) sc_control[i] = load256(kHighDupControls[i].bytes);
  const auto* d = reinterpret_cast<const uint16_t*>(group);
  const uint8_t* supers = group + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
  __m256 acc[2][8];
  for (auto& half : acc) {
    for (auto& v : half) v = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_K& ab = a[b];
    const uint8_t* ql = supers + static_cast<size_t>(b) * kSuperBytes;
    const uint8_t* qh = ql + kRepackRows * kQKK / 2;
    const uint8_t* sc = qh + kRepackRows * kQKK / 4;
    // corr[c]: vec_dot's vpmaddubsw(32, a) for column c, the int16 pair 32 * (a[4c] +
    // a[4c + 1]), 32 * (a[4c + 2] + a[4c + 3]); the same for every row.
    alignas(32) int32_t corr[kQKK / 4];
    for (int i = 0; i < kQKK / 32; ++i) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(corr + 8 * i),
                         pairs_u8s8(m32, load256(ab.qs + 32 * i)));
    }
    for (int r = 0; r < 2; ++r) {
      const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(ab.d),
                                      _mm256_cvtph_ps(load128(d + b * kRepackRows + 8 * r)));
      __m256i sumi[8];
      for (auto& v : sumi) v = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 4; ++g) {
          // (sc[s], sc[s]) as sign-extended int16 pairs for the sub-blocks of columns
          // 32h + 4g .. + 3 (s = 8h + g) and 32h + 16 + 4g .. + 3 (s = 8h + 4 + g).
          const __m256i sc_lo = _mm256_srai_epi16(
              _mm256_shuffle_epi8(load256(sc + 64 * (2 * h) + 32 * r), sc_control[g]), 8);
          const __m256i sc_hi = _mm256_srai_epi16(
              _mm256_shuffle_epi8(load256(sc + 64 * (2 * h + 1) + 32 * r), sc_control[g]), 8);
          for (int i = 0; i < 4; ++i) {
            // ql column 16h + m: low nibbles are column 32h + m, high ones column
            // 32h + m + 16; their bits 4-5 are bit pairs m / 8 and 2 + m / 8 of qh column
            // 8h + m % 8. Both land in int32 lane m % 8 of vec_dot.
            const int m = 4 * g + i;
            const uint8_t* wp = ql + static_cast<size_t>(16 * h + m) * 64;
            const uint8_t* tp = qh + static_cast<size_t>(8 * h + m % 8) * 64;
            if (r == 0) {
              // Two lines per column of the next super-block (52 lines: ql, qh and scales;
              // the last columns reach into the one after).
              const uint8_t* ahead = ql + kSuperBytes + static_cast<size_t>(16 * h + m) * 128;
              _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
              _mm_prefetch(reinterpret_cast<const char*>(ahead + 64), _MM_HINT_T0);
            }
            const __m256i w = load256(wp + 32 * r);
            const __m256i t = load256(tp + 32 * r);
            // Within each byte, bit pair m / 8 of t moved to bits 4-5 for the low level and
            // bit pair 2 + m / 8 for the high one (16-bit shifts: what crosses bytes is
            // masked off).
            const __m256i t_lo = m < 8 ? _mm256_slli_epi16(t, 4) : _mm256_slli_epi16(t, 2);
            const __m256i t_hi = m < 8 ? t : _mm256_srli_epi16(t, 2);
            const __m256i lev_lo = _mm256_or_si256(low_nibbles(w), _mm256_and_si256(t_lo, bits45));
            const __m256i lev_hi = _mm256_or_si256(high_nibbles(w), _mm256_and_si256(t_hi, bits45));
            const int c_lo = 32 * h + m;
            const int c_hi = c_lo + 16;
            const __m256i p_lo = _mm256_sub_epi16(pairs_u8s8(lev_lo, bcast32(ab.qs + 4 * c_lo)),
                                                  _mm256_set1_epi32(corr[c_lo]));
            const __m256i p_hi = _mm256_sub_epi16(pairs_u8s8(lev_hi, bcast32(ab.qs + 4 * c_hi)),
                                                  _mm256_set1_epi32(corr[c_hi]));
            sumi[m % 8] = _mm256_add_epi32(
                sumi[m % 8],
                _mm256_add_epi32(_mm256_madd_epi16(p_lo, sc_lo), _mm256_madd_epi16(p_hi, sc_hi)));
          }
        }
      }
      for (int l = 0; l < 8; ++l) {
        acc[r][l] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sumi[l]), acc[r][l]);
      }
    }
  }
  // hsum_f32x8(acc), per row.
  for (int r = 0; r < 2; ++r) _mm256_storeu_ps(y + 8 * r, sum8_in_hsum_order(acc[r]));
}

}  // namespace

void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ6_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 1, q6_k_group,
                                         q6_k_group);
}

void gemv_q4_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ4_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 1,
                                         k_super_group<BlockQ4_K>, k_super_group<BlockQ4_K>);
}

void gemv_q5_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ5_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 1,
                                         k_super_group<BlockQ5_K>, k_super_group<BlockQ5_K>);
}

void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ4_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 2, q4_0_groups<2>,
                                         q4_0_groups<1>);
}

void gemv_iq4_nl_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                     float* y) {
  run_group_passes<BlockIQ4_NL, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 2, iq4_nl_groups<2>,
                                           iq4_nl_groups<1>);
}

void gemv_q5_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ5_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 2, q5_0_groups<2>,
                                         q5_0_groups<1>);
}

void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ8_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 2, q8_0_groups<2>,
                                         q8_0_groups<1>);
}

}  // namespace qrun::kernels::avx2
