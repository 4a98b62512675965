// AVX-512 VNNI decode gemv over the x16 layouts of kernels/cpu/repack.h: row j of a group in
// int32 / float lane j, so nothing is summed across lanes until the end. Several groups
// are read side by side (4 for Q4_0, 2 for Q8_0): a single stream leaves the memory
// system idle between prefetches; one thread then streams Q4_0 about 20 % faster.
//   Q4_0: per block, 4 vectors of nibbles give 8 vpdpbusd against broadcast 4-byte groups
//     of the activation, seeded with -8 * sum(a) (exact: (q - 8) . a); one fp16 load
//     gives the 16 row scales. Each row's float chain is vec_dot_q4_0_q8_0's.
//   Q8_0: weights are stored as q + 128, so vpdpbusd of them against a 4-byte group of the
//     activation, seeded with -128 * (that group's sum), is the exact group dot that
//     vec_dot_q8_0_q8_0 forms in its 8 lanes; the 8 group accumulators per row are then
//     reduced in hsum_f32x8's order, so every output is vec_dot's, bit for bit.
#include "ggml-like/quants.h"
#include "kernels/cpu/avx512/dot_kernels.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx512 {
namespace {

// The 4 bytes at p, broadcast to all 16 lanes.
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// Minus the sum of the 8 int32 lanes of v, in all 16 lanes.
inline __m512i neg_sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm512_set1_epi32(-_mm_cvtsi128_si32(s));
}

// kG groups side by side (kG memory streams, which keeps more loads in flight than one).
template <int kG>
void q4_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const __m256i eight = _mm256_set1_epi8(8);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m512 acc[kG];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m512i corr = neg_sum(_mm256_dpbusd_epi32(_mm256_setzero_si256(), eight, load256(aq)));
    const __m512 da = _mm512_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 4 * 64;
      __m512i s = corr;
      for (int k = 0; k < 4; ++k) {
        const __m512i w = load512(qb + 64 * k);
        s = _mm512_dpbusd_epi32(s, _mm512_and_si512(w, m4), bcast32(aq + 4 * k));
        s = _mm512_dpbusd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(w, 4), m4),
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
      const __m256i h = load256(reinterpret_cast<const uint16_t*>(gbase) + b * kRepackRows);
      const __m512 ds = _mm512_mul_ps(_mm512_cvtph_ps(h), da);
      for (int k = 0; k < 8; ++k) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[k]), load512(qb + 64 * k),
                                              bcast32(aq + 4 * k));
        acc[i][k] = _mm512_fmadd_ps(ds, _mm512_cvtepi32_ps(s), acc[i][k]);
      }
    }
  }
  // hsum_f32x8's order: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
  for (int i = 0; i < kG; ++i) {
    const __m512 even =
        _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][4]), _mm512_add_ps(acc[i][2], acc[i][6]));
    const __m512 odd =
        _mm512_add_ps(_mm512_add_ps(acc[i][1], acc[i][5]), _mm512_add_ps(acc[i][3], acc[i][7]));
    _mm512_storeu_ps(y + i * kRepackRows, _mm512_add_ps(even, odd));
  }
}

}  // namespace

void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(BlockQ4_0);
  int64_t g = 0;
  for (; g + 4 <= n_groups; g += 4) {
    q4_0_groups<4>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
  for (; g < n_groups; ++g) {
    q4_0_groups<1>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
}

void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(BlockQ8_0);
  int64_t g = 0;
  for (; g + 2 <= n_groups; g += 2) {
    q8_0_groups<2>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
  for (; g < n_groups; ++g) {
    q8_0_groups<1>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
}

}  // namespace qrun::kernels::avx512
