// AVX-512 VNNI decode gemv over the x16 layouts of kernels/cpu/repack.h: row j of a group in
// int32 / float lane j, so nothing is summed across lanes until the end. Several groups
// are read side by side (4 for Q4_0, 2 for the k-quants; Q5_0 and Q8_0 one): a single
// stream leaves the memory system idle between the hardware's prefetches. Every kernel also
// asks for its quants ahead of the block being read. Q4_0, Q5_0 and Q8_0 ask 4 KiB ahead
// into L2 (prefetcht1), Q4_K 4 KiB ahead and Q6_K one super-block ahead, also into L2: on
// the 2-core EPYC (Zen 4) guest, prefetches into L1 (prefetcht0, 2 KiB) cost more than they
// gave (so Q5_0 and Q8_0 had none and read 4 groups side by side instead), while those into
// L2 keep one group's stream at the read bandwidth. A scratch harness over Gemma 3's 178 MB
// Q8_0 output matrix, 2 threads: 4 groups without prefetch 26-27 GB/s, one group with L2
// prefetches 32-33 GB/s, a plain read of the same bytes 33-36 GB/s. Decode went 1.2x (Gemma 3
// 270M), 1.3x (TinyLlama Q4_K_M) and 1.1x (TinyLlama Q4_0) as fast.
//   Q4_0, IQ4_NL: per block, 4 vectors of nibbles give 8 vpdpbusd against broadcast 4-byte
//     groups of the activation, seeded with -8 * sum(a) (exact: (q - 8) . a); IQ4_NL's
//     nibbles first go through one vpshufb of its table plus 128, and the seed is -128 *
//     sum(a) (repacked_common.h). One fp16 load gives the 16 row scales. Each row's float
//     chain is vec_dot_q4_0_q8_0's (vec_dot_iq4_nl_q8_0's: the same chain).
//   Q8_0: weights are stored as q + 128, so vpdpbusd of them against a 4-byte group of the
//     activation, seeded with -128 * (that group's sum), is the exact group dot that
//     vec_dot_q8_0_q8_0 forms in its 8 lanes; the 8 group accumulators per row are then
//     reduced in hsum_f32x8's order, so every output is vec_dot's, bit for bit.
//   Q5_0: vec_dot_q5_0_q8_0 (AVX2's, which AVX-512 keeps) has 8 int32 lanes per block, lane
//     4s + c summing (q - 16) . a over elements 16s + 4c .. + 3: the low (s = 0) or high
//     (s = 1) nibbles of column c. Each row keeps those 8 lanes as 8 vectors: the levels are
//     the nibbles with the regrouped high bit moved to bit 4 (one shift, one vpternlogd),
//     vpdpbusd adds level . a onto -16 * (that group's sum of a): the exact lane. The float
//     steps are vec_dot's, acc_k = fma(d_x * d_y, float(lane_k), acc_k), reduced in
//     hsum_f32x8's order at the end.
//   Q4_K, Q5_K and Q6_K: two groups side by side, each reproducing its vec_dot lane by lane
//     (see q4_k_super, q5_k_super and q6_k_super).
#include <type_traits>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx512/dot_kernels.h"
#include "kernels/cpu/avx512/repacked_common.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx512 {
namespace {

// kG groups side by side (kG memory streams, which keeps more loads in flight than one) of
// the nibble blocks of Levels (repacked_common.h: Q4_0 or IQ4_NL).
template <int kG, class Levels>
void nibble_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                   float* y) {
  const Levels levels;
  const __m512i m4 = _mm512_set1_epi8(15);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m512 acc[kG];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m512i corr = _mm512_set1_epi32(offset_seed(aq, Levels::kOffset));
    const __m512 da = _mm512_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 4 * 64;
      prefetch_to_l2(qb, 4);
      __m512i s = corr;
      for (int k = 0; k < 4; ++k) {
        const __m512i w = load512(qb + 64 * k);
        s = _mm512_dpbusd_epi32(s, levels(_mm512_and_si512(w, m4)), bcast32(aq + 4 * k));
        s = _mm512_dpbusd_epi32(s, levels(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4)),
                                bcast32(aq + 16 + 4 * k));
      }
      const __m256i h = load256(reinterpret_cast<const uint16_t*>(gbase) + b * kRepackRows);
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_cvtph_ps(h), da), acc[i]);
    }
  }
  for (int i = 0; i < kG; ++i) _mm512_storeu_ps(y + i * kRepackRows, acc[i]);
}

template <int kG>
void q8_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m512 acc[kG][8];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    // -128 * (sum of each 4-byte group of the activation), one int32 per group.
    alignas(32) int32_t corr[8];
    _mm256_store_si256(
        reinterpret_cast<__m256i*>(corr),
        _mm256_sub_epi32(_mm256_setzero_si256(),
                         _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, load256(aq))));
    const __m512 da = _mm512_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 8 * 64;
      prefetch_to_l2(qb, 8);
      const __m256i h = load256(reinterpret_cast<const uint16_t*>(gbase) + b * kRepackRows);
      const __m512 ds = _mm512_mul_ps(_mm512_cvtph_ps(h), da);
      for (int k = 0; k < 8; ++k) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[k]), load512(qb + 64 * k),
                                              bcast32(aq + 4 * k));
        acc[i][k] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(s), acc[i][k]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) _mm512_storeu_ps(y + i * kRepackRows, sum8_in_hsum_order(acc[i]));
}

// The high bits of a Q5_0 group's column c, nibbles s, at bit 4 of every byte of h (the
// regrouped bits of repack.h: bit 2c + s of each byte; 16-bit shifts keep every bit that
// lands on bit 4 within its byte, the rest is masked off by the caller).
template <int kBit>
inline __m512i q5_0_high_at_bit4(__m512i h) {
  if constexpr (kBit < 4) return _mm512_slli_epi16(h, 4 - kBit);
  if constexpr (kBit > 4) return _mm512_srli_epi16(h, kBit - 4);
  return h;
}

template <int kG>
void q5_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  constexpr int kOrAnd = 0xf8;  // vpternlogd: a | (b & c)
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m512i bit4 = _mm512_set1_epi8(16);
  const __m256i sixteen = _mm256_set1_epi8(16);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m512 acc[kG][8];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    // -16 * (sum of each 4-byte group of the activation), one int32 per group.
    alignas(32) int32_t corr[8];
    _mm256_store_si256(
        reinterpret_cast<__m256i*>(corr),
        _mm256_sub_epi32(_mm256_setzero_si256(),
                         _mm256_dpbusd_epi32(_mm256_setzero_si256(), sixteen, load256(aq))));
    const __m512 da = _mm512_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* hb = gbase + q_offset + static_cast<size_t>(b) * kQ5_0GroupBlockBytes;
      const uint8_t* qb = hb + kRepackRows * 4;
      prefetch_to_l2(hb, 5);
      const __m512i h = load512(hb);
      const __m256i d16 = load256(reinterpret_cast<const uint16_t*>(gbase) + b * kRepackRows);
      const __m512 ds = _mm512_mul_ps(_mm512_cvtph_ps(d16), da);
      __m512i s[8];
      const auto column = [&](auto c_const) {
        constexpr int c = decltype(c_const)::value;
        const __m512i w = load512(qb + 64 * c);
        const __m512i lo = _mm512_ternarylogic_epi32(_mm512_and_si512(w, m4),
                                                     q5_0_high_at_bit4<2 * c>(h), bit4, kOrAnd);
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4),
                                                     q5_0_high_at_bit4<2 * c + 1>(h), bit4, kOrAnd);
        s[c] = _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[c]), lo, bcast32(aq + 4 * c));
        s[4 + c] =
            _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[4 + c]), hi, bcast32(aq + 16 + 4 * c));
      };
      column(std::integral_constant<int, 0>{});
      column(std::integral_constant<int, 1>{});
      column(std::integral_constant<int, 2>{});
      column(std::integral_constant<int, 3>{});
      for (int k = 0; k < 8; ++k) {
        acc[i][k] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(s[k]), acc[i][k]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) _mm512_storeu_ps(y + i * kRepackRows, sum8_in_hsum_order(acc[i]));
}

// What a Q4_K or Q5_K super-block (at blk) of one group starts with against ab: d, the
// rows' scales times ab's, its scales and mins unpacked lane-wise (unpack_scales_mins), and
// the mins' term, dmin times m[2p] * S[2p] + m[2p + 1] * S[2p + 1] (S[s] the activation's
// sub-block sums), added to `mins` as Mins keeps it.
template <class Mins>
inline Q4KScales k_super_start(const uint8_t* blk, const BlockQ8_K& ab, const Q4KConstants& k,
                               Mins& mins, __m512& d) {
  d = _mm512_mul_ps(_mm512_set1_ps(ab.d), widen_f16x16(load256(blk)));
  const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(-ab.d), widen_f16x16(load256(blk + 32)));
  const Q4KScales sm = q4_k_scales(blk, k);
  const int32_t pairs[4] = {q4_k_mins_pair(ab, 0), q4_k_mins_pair(ab, 1), q4_k_mins_pair(ab, 2),
                            q4_k_mins_pair(ab, 3)};
  mins.add(dmin, sm, pairs);
  return sm;
}

// One super-block of one group of 16 Q4_K rows (at blk) against ab. Per row (lane) this is
// vec_dot_q4_k_q8_k step for step: its 8 int32 lanes l become 8 vectors sumi[l] (vector
// q[8j + l] feeds lane l as vec_dot's 32-byte load j does); the super-block adds d *
// sumi[l] to acc[l] and dmin * (the mins' pair sums p) to mins.pair[p]; k_super_groups
// sums them at the end in hsum_f32x8 + hsum_f32x4 order.
inline void q4_k_super(const uint8_t* blk, const BlockQ8_K& ab, const Q4KConstants& k,
                       __m512 acc[8], Q4KMins& mins) {
  __m512 d;
  const Q4KScales sm = k_super_start(blk, ab, k, mins, d);
  const uint8_t* q = blk + 64 + 3 * 64;
  prefetch_to_l2(blk, 4);
  __m512i sumi[8];
  for (auto& v : sumi) v = _mm512_setzero_si512();
  for (int j = 0; j < 4; ++j) {
    // (sc[s], sc[s]) int16 pairs for the low (s = 2j) and high (2j + 1) nibbles.
    const __m512i sc_lo = q4_k_scale_pair(sm, j, /*high=*/false, k);
    const __m512i sc_hi = q4_k_scale_pair(sm, j, /*high=*/true, k);
    const int8_t* aq = ab.qs + 64 * j;
    for (int l = 0; l < 8; ++l) {
      const uint8_t* v = q + static_cast<size_t>(8 * j + l) * 64;
      prefetch_to_l2(v, 1);
      const __m512i w = load512(v);
      const __m512i lo = _mm512_maddubs_epi16(_mm512_and_si512(w, k.m4), bcast32(aq + 4 * l));
      const __m512i hi = _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 4), k.m4),
                                              bcast32(aq + 32 + 4 * l));
      sumi[l] = _mm512_dpwssd_epi32(sumi[l], lo, sc_lo);
      sumi[l] = _mm512_dpwssd_epi32(sumi[l], hi, sc_hi);
    }
  }
  for (int l = 0; l < 8; ++l) acc[l] = _mm512_fmadd_ps(d, to_float(sumi[l]), acc[l]);
}

// One super-block of one group of 16 Q5_K rows (at blk) against ab: q4_k_super with a fifth
// bit, as vec_dot_q5_k_q8_k (AVX2's) adds it: bit 2g (2g + 1) of qh column l, moved to bit 4
// and merged by one vpternlogd, makes the levels (<= 31) of the low (high) nibbles of
// vector q[8g + l]. The columns go l by l here, each l's 4 vectors and its qh column read
// once into sumi, whose lane is vec_dot's lane l (exact integers: any order); the float
// steps are vec_dot's per row: acc[l] = fma(d, float(sumi), acc[l]) per super-block, the
// mins as Q5KMins keeps them; k_super_groups ends with hsum_f32x8(acc) + sum_min.
inline void q5_k_super(const uint8_t* blk, const BlockQ8_K& ab, const Q4KConstants& k,
                       __m512 acc[8], Q5KMins& mins) {
  __m512 d;
  const Q4KScales sm = k_super_start(blk, ab, k, mins, d);
  __m512i sc[8];  // (sc[s], sc[s]) int16 pairs of sub-block s
  for (int j = 0; j < 4; ++j) {
    sc[2 * j] = q4_k_scale_pair(sm, j, /*high=*/false, k);
    sc[2 * j + 1] = q4_k_scale_pair(sm, j, /*high=*/true, k);
  }
  const uint8_t* qh = blk + 64 + 3 * 64;
  const uint8_t* q = qh + 8 * 64;
  prefetch_to_l2(blk, 4);
  for (int l = 0; l < 8; ++l) {
    const uint8_t* hv = qh + static_cast<size_t>(l) * 64;
    prefetch_to_l2(hv, 1);
    __m512i h = load512(hv);  // bits 2g, 2g + 1 at bits 0, 1 for part g, shifted down below
    __m512i sumi = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const uint8_t* v = q + static_cast<size_t>(8 * g + l) * 64;
      prefetch_to_l2(v, 1);
      __m512i lo;
      __m512i hi;
      q5_k_levels(load512(v), h, k, lo, hi);
      h = _mm512_srli_epi16(h, 2);
      const int8_t* aq = ab.qs + 64 * g;
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(lo, bcast32(aq + 4 * l)), sc[2 * g]);
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(hi, bcast32(aq + 32 + 4 * l)),
                                 sc[2 * g + 1]);
    }
    acc[l] = _mm512_fmadd_ps(d, to_float(sumi), acc[l]);
  }
}

// kG groups of 16 rows of Q4_K or Q5_K side by side, super-block by super-block (kG memory
// streams): kSuper adds one super-block of one group to its 8 lane sums and its Mins.
template <class Block, class Mins,
          void (*kSuper)(const uint8_t*, const BlockQ8_K&, const Q4KConstants&, __m512*, Mins&),
          int kG>
void k_super_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_K* a,
                    float* y) {
  constexpr size_t kSuperBytes = kRepackRows * sizeof(Block);
  const Q4KConstants k;
  __m512 acc[kG][8];
  Mins mins[kG];
  for (auto& group : acc) {
    for (auto& v : group) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < kG; ++i) {
      kSuper(base + static_cast<size_t>(i) * group_bytes + static_cast<size_t>(b) * kSuperBytes,
             a[b], k, acc[i], mins[i]);
    }
  }
  for (int i = 0; i < kG; ++i) {
    _mm512_storeu_ps(y + i * kRepackRows,
                     _mm512_add_ps(sum8_in_hsum_order(acc[i]), mins[i].total()));
  }
}

template <int kG>
constexpr GroupPassFn<BlockQ8_K> q4_k_groups = k_super_groups<BlockQ4_K, Q4KMins, q4_k_super, kG>;
template <int kG>
constexpr GroupPassFn<BlockQ8_K> q5_k_groups = k_super_groups<BlockQ5_K, Q5KMins, q5_k_super, kG>;

// One super-block of one group of 16 Q6_K rows (quants at ql, the rows' fp16 d at d16)
// against ab, vec_dot_q6_k_q8_k lane-wise: column c (elements 4c .. 4c + 3) is what that
// kernel's int32 lane c mod 16 of step (h, k) sums, and fold512 adds lanes i and i + 8, so
// sumi[i] collects the columns c = i mod 8; the super-block adds d * sumi[i] to acc[i], and
// q6_k_groups sums them at the end in hsum_f32x8's order. The integer products are
// vec_dot's, formed with less work: the offset term maddubs(32, a) of each column depends
// on the activation alone (offset[c], made once per super-block for every group); the 16
// sub-block scale pairs are decoded once; and each 6-bit level is the low nibble merged
// with its two qh bits by one vpternlogd.
inline void q6_k_super(const uint8_t* ql, const uint16_t* d16, const BlockQ8_K& ab,
                       const int32_t* offset, const Q6KConstants& k, __m512 acc[8]) {
  constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
  const uint8_t* qh = ql + kRepackRows * kQKK / 2;
  const uint8_t* sc = qh + kRepackRows * kQKK / 4;
  const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(ab.d), widen_f16x16(load256(d16)));
  __m512i scale[16];
  q6_k_scales(sc, k, scale);
  __m512i sumi[8];
  for (auto& v : sumi) v = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    for (int m = 0; m < 16; ++m) {
      const uint8_t* wp = ql + static_cast<size_t>(16 * h + m) * 64;
      // Two lines per column of the next super-block (52 lines: ql, qh and scales; the
      // last columns reach into the one after).
      const size_t ahead = kSuperBytes + static_cast<size_t>(16 * h + m) * 128;
      _mm_prefetch(reinterpret_cast<const char*>(ql + ahead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(ql + ahead + 64), _MM_HINT_T1);
      __m512i lev_lo;
      __m512i lev_hi;
      q6_k_levels(load512(wp), load512(qh + static_cast<size_t>(8 * h + m % 8) * 64), m, k, lev_lo,
                  lev_hi);
      const int c_lo = 32 * h + m;
      const int c_hi = c_lo + 16;
      const __m512i p_lo = _mm512_sub_epi16(_mm512_maddubs_epi16(lev_lo, bcast32(ab.qs + 4 * c_lo)),
                                            bcast32(offset + c_lo));
      const __m512i p_hi = _mm512_sub_epi16(_mm512_maddubs_epi16(lev_hi, bcast32(ab.qs + 4 * c_hi)),
                                            bcast32(offset + c_hi));
      sumi[m % 8] = _mm512_dpwssd_epi32(sumi[m % 8], p_lo, scale[c_lo / 4]);
      sumi[m % 8] = _mm512_dpwssd_epi32(sumi[m % 8], p_hi, scale[c_hi / 4]);
    }
  }
  for (int i = 0; i < 8; ++i) acc[i] = _mm512_fmadd_ps(dd, to_float(sumi[i]), acc[i]);
}

// kG groups of 16 Q6_K rows side by side, super-block by super-block (kG memory streams).
template <int kG>
void q6_k_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_K* a,
                 float* y) {
  constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
  const Q6KConstants k;
  const __m512i m32 = _mm512_set1_epi8(32);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m512 acc[kG][8];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_K& ab = a[b];
    // offset[c]: maddubs(32, a) of column c, the int16 pair (32 (a0 + a1), 32 (a2 + a3)).
    alignas(64) int32_t offset[kQKK / 4];
    for (int v = 0; v < 4; ++v) {
      _mm512_store_si512(offset + 16 * v, _mm512_maddubs_epi16(m32, load512(ab.qs + 64 * v)));
    }
    for (int i = 0; i < kG; ++i) {
      const uint8_t* group = base + static_cast<size_t>(i) * group_bytes;
      q6_k_super(group + q_offset + static_cast<size_t>(b) * kSuperBytes,
                 reinterpret_cast<const uint16_t*>(group) + b * kRepackRows, ab, offset, k, acc[i]);
    }
  }
  for (int i = 0; i < kG; ++i) _mm512_storeu_ps(y + i * kRepackRows, sum8_in_hsum_order(acc[i]));
}

}  // namespace

void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ6_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 2, q6_k_groups<2>,
                                         q6_k_groups<1>);
}

void gemv_q5_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ5_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 2, q5_k_groups<2>,
                                         q5_k_groups<1>);
}

void gemv_q4_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ4_K, BlockQ8_K>(n, kQKK, groups, n_groups, act, y, 2, q4_k_groups<2>,
                                         q4_k_groups<1>);
}

void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ4_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 4,
                                         nibble_groups<4, Q4_0Nibbles>,
                                         nibble_groups<1, Q4_0Nibbles>);
}

void gemv_iq4_nl_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                     float* y) {
  run_group_passes<BlockIQ4_NL, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 4,
                                           nibble_groups<4, Iq4NlNibbles>,
                                           nibble_groups<1, Iq4NlNibbles>);
}

void gemv_q5_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ5_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 1, q5_0_groups<1>,
                                         q5_0_groups<1>);
}

void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  run_group_passes<BlockQ8_0, BlockQ8_0>(n, kQK, groups, n_groups, act, y, 1, q8_0_groups<1>,
                                         q8_0_groups<1>);
}

}  // namespace qrun::kernels::avx512
