// AVX2 gemm micro-kernels of the k-quants and IQ4_XS against Q8_K activations, on
// the token-interleaved packing of gemm_common.h: R weight rows x 8 tokens per tile, one
// 256-element super-block at a time, integer sums per super-block, one float step each.
//   Q4_K, Q5_K: unsigned levels q meet the signed activations in vpmaddubsw; the int16
//     lanes sum 16 products of 15 * 127 (Q4_K, a whole 32-element sub-block) or 8 of
//     31 * 127 (Q5_K, half a sub-block) before vpmaddwd multiplies them by the 6-bit
//     sub-block scale. The mins term, dmin * sum_s m[s] * sum(a in s), uses the per-token
//     sub-block sums packed with the activations.
//   Q6_K: the signed levels q - 32 are multiplied as |a| * (sign(a) * (q - 32)), so a lane
//     sums 8 products of at most 127 * 32 and a whole 16-element sub-block fits before
//     vpmaddwd applies its int8 scale; no offset correction is needed.
//   Q2_K: as Q4_K on 16-element sub-blocks (levels 0..3, 4-bit scales and mins), the mins
//     term from Q8_K's own 16-element sums.
//   Q3_K: the signed levels q - 4 and scales sc - 32 through Q6_K's tile.
//   IQ4_XS: its table's signed levels as Q6_K's, each vpmaddubsw widened at once by its
//     sub-block scale (the levels reach 127).
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/gemm_common.h"
#include "kernels/cpu/avx2/kquant_levels.h"

namespace qrun::kernels::avx2 {
namespace {

using gemm::bcast32;
using gemm::half_to_float;
using gemm::kLanes;
using gemm::pin;

inline __m256i load(const void* p) {
  return _mm256_load_si256(static_cast<const __m256i*>(p));
}

// Packs the 256 levels of a super-block for 8 tokens: q[g] holds levels 4g .. 4g + 3 of
// each token. Returns the token scales in d.
void pack_q8_k_levels(const uint8_t* const* rows, int n_valid, int64_t block,
                      int8_t (*q)[kLanes][4], float* d) {
  const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_K);
  for (int s = 0; s < 8; ++s) {
    __m256i v[8];
    gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_K, qs) + 32 * s, v);
    for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(q[8 * s + g]), v[g]);
  }
  for (int t = 0; t < kLanes; ++t) {
    d[t] = 0.0f;
    if (t < n_valid) std::memcpy(&d[t], rows[t] + offset + offsetof(BlockQ8_K, d), sizeof(float));
  }
}

// ---- Q4_K and Q5_K --------------------------------------------------------------------

// One super-block of 8 tokens: levels, scales, and sums[j] holding for each token the
// sums of its 32-element sub-blocks 2j and 2j + 1 as an int16 pair.
struct alignas(32) ActQ8_KSums {
  int8_t q[64][kLanes][4];
  float d[kLanes];
  int16_t sums[4][kLanes][2];
};

void pack_q8_k_sums(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_KSums* dst) {
  pack_q8_k_levels(rows, n_valid, block, dst->q, dst->d);
  // bsums: 16 int16 per token, one per 16 levels; pair k covers sub-block k.
  __m256i pairs[8];
  gemm::gather_transpose(
      rows, n_valid, static_cast<size_t>(block) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, bsums),
      pairs);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int j = 0; j < 4; ++j) {
    const __m256i even = _mm256_madd_epi16(pairs[2 * j], ones);     // sub-block 2j, int32
    const __m256i odd = _mm256_madd_epi16(pairs[2 * j + 1], ones);  // sub-block 2j + 1
    // |sum| <= 32 * 127 fits int16: low half from `even`, high half from `odd`.
    const __m256i packed = _mm256_blend_epi16(even, _mm256_slli_epi32(odd, 16), 0xaa);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst->sums[j]), packed);
  }
}

// An unpacked Q4_K or Q5_K super-block: levels in element order, each sub-block scale
// twice in an int32 (an int16 pair for vpmaddwd), the mins as int16, d and dmin.
struct WtKScaleMin {
  uint8_t q[256];
  uint32_t sc[8];
  int16_t m[8];
  float d;
  float dmin;
};

void unpack_scale_min(const uint8_t* scales, WtKScaleMin* dst) {
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0;
    uint8_t m = 0;
    unpack_k_scale_min(scales, s, &sc, &m);
    dst->sc[s] = static_cast<uint32_t>(sc) * 0x10001u;
    dst->m[s] = m;
  }
}

// sum[r] += sc(h) * (levels . activations of part h) over the kParts parts of 256 / kParts
// elements of a super-block, for R rows: 4 levels a vpmaddubsw, summed in int16 within a
// part (the callers bound the lanes), then vpmaddwd by the part's scale, sc[h * kScales /
// kParts] (a sub-block of 32 elements may span two parts).
template <int R, int kParts, int kScales, class Wt, class Act>
inline void sum_scaled_parts(const Wt* const* wb, const Act& a, __m256i* sum) {
  constexpr int kGroups = 64 / kParts;  // groups of 4 levels a part
  for (int h = 0; h < kParts; ++h) {
    __m256i s16[R];
    const __m256i a0 = load(a.q[kGroups * h]);
    for (int r = 0; r < R; ++r) {
      s16[r] = _mm256_maddubs_epi16(bcast32(wb[r]->q + 4 * kGroups * h), a0);
    }
    for (int g = 1; g < kGroups; ++g) {
      const __m256i ag = load(a.q[kGroups * h + g]);
      for (int r = 0; r < R; ++r) {
        s16[r] = _mm256_add_epi16(
            s16[r], _mm256_maddubs_epi16(bcast32(wb[r]->q + 4 * kGroups * h + 4 * g), ag));
        pin(s16[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const uint32_t* sc = &wb[r]->sc[h * kScales / kParts];
      sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(s16[r], bcast32(sc)));
    }
  }
}

// f += d_a * (d * acc - dmin * sum_s m[s] sum_s(a)), for R rows; pairs[j] holds each token's
// activation sums over the sub-blocks of mins 2j and 2j + 1 as an int16 pair.
template <int R, int kPairs, class Wt>
inline void finish_scale_min(const Wt* const* wb, const int16_t (*pairs)[kLanes][2],
                             const float* d_a, const __m256i* acc, __m256* f) {
  const __m256 da = _mm256_load_ps(d_a);
  for (int r = 0; r < R; ++r) {
    __m256i mins = _mm256_madd_epi16(load(pairs[0]), bcast32(&wb[r]->m[0]));
    for (int j = 1; j < kPairs; ++j) {
      mins = _mm256_add_epi32(mins, _mm256_madd_epi16(load(pairs[j]), bcast32(&wb[r]->m[2 * j])));
    }
    const __m256 t =
        _mm256_fmsub_ps(_mm256_set1_ps(wb[r]->d), _mm256_cvtepi32_ps(acc[r]),
                        _mm256_mul_ps(_mm256_set1_ps(wb[r]->dmin), _mm256_cvtepi32_ps(mins)));
    f[r] = _mm256_fmadd_ps(t, da, f[r]);
  }
}

// The tile of Q4_K, Q5_K and Q2_K: per super-block, sum_scaled_parts then
// finish_scale_min.
template <int R, int kParts, int kScales, class Wt, class Act, size_t kPairs>
inline void scale_min_tile(const Wt* const* w, const Act* a, int kb, float* acc, int64_t ld,
                           int16_t (Act::*pairs)[kPairs][kLanes][2]) {
  __m256 f[R];
  for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
  for (int b = 0; b < kb; ++b) {
    const Wt* wb[R];
    for (int r = 0; r < R; ++r) wb[r] = &w[r][b];
    __m256i sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
    sum_scaled_parts<R, kParts, kScales>(wb, a[b], sum);
    finish_scale_min<R, static_cast<int>(kPairs)>(wb, a[b].*pairs, a[b].d, sum, f);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
}

struct Q4_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_KSums;
  using Wt = WtKScaleMin;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_k_sums(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + block;
    kquant_levels::unpack_q4_k(*b, dst);
    unpack_scale_min(b->scales, dst);
    dst->d = half_to_float(b->d);
    dst->dmin = half_to_float(b->dmin);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    scale_min_tile<R, 8, 8>(w, a, kb, acc, ld, &Act::sums);
  }
};

struct Q5_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_KSums;
  using Wt = WtKScaleMin;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_k_sums(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ5_K*>(row) + block;
    kquant_levels::unpack_q5_k(*b, dst);
    unpack_scale_min(b->scales, dst);
    dst->d = half_to_float(b->d);
    dst->dmin = half_to_float(b->dmin);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    scale_min_tile<R, 16, 8>(w, a, kb, acc, ld, &Act::sums);
  }
};

// ---- Q2_K -------------------------------------------------------------------------------

// One super-block of 8 tokens: levels, scales, and bsums[j] holding for each token the
// sums of its 16-element sub-blocks 2j and 2j + 1 as an int16 pair (Q8_K's bsums).
struct alignas(32) ActQ8_KBsums {
  int8_t q[64][kLanes][4];
  float d[kLanes];
  int16_t bsums[8][kLanes][2];
};

void pack_q8_k_bsums(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_KBsums* dst) {
  pack_q8_k_levels(rows, n_valid, block, dst->q, dst->d);
  __m256i pairs[8];
  gemm::gather_transpose(
      rows, n_valid, static_cast<size_t>(block) * sizeof(BlockQ8_K) + offsetof(BlockQ8_K, bsums),
      pairs);
  for (int j = 0; j < 8; ++j)
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst->bsums[j]), pairs[j]);
}

// An unpacked Q2_K super-block: levels 0..3 in element order, each 16-element sub-block's
// 4-bit scale twice in an int32 (an int16 pair for vpmaddwd), the 4-bit mins as int16, d
// and dmin.
struct WtQ2_K {
  uint8_t q[256];
  uint32_t sc[16];
  int16_t m[16];
  float d;
  float dmin;
};

// Q4_K's tile on 16-element sub-blocks: a sub-block's 4 vpmaddubsw of levels <= 3 sum in
// int16 (<= 4 * 2 * 3 * 128) before vpmaddwd applies its scale (<= 15); the mins term,
// dmin * sum_s m[s] * bsums[s], pairs Q8_K's own 16-element sums with the mins.
struct Q2_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_KBsums;
  using Wt = WtQ2_K;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_k_bsums(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ2_K*>(row) + block;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * h));
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 128 * h + 32 * k),
                            _mm256_and_si256(bits, m3));
        bits = _mm256_srli_epi16(bits, 2);
      }
    }
    for (int s = 0; s < 16; ++s) {
      dst->sc[s] = static_cast<uint32_t>(b->scales[s] & 15) * 0x10001u;
      dst->m[s] = static_cast<int16_t>(b->scales[s] >> 4);
    }
    dst->d = half_to_float(b->d);
    dst->dmin = half_to_float(b->dmin);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    scale_min_tile<R, 16, 16>(w, a, kb, acc, ld, &Act::bsums);
  }
};

// ---- Q6_K and Q3_K ----------------------------------------------------------------------

// One super-block of 8 tokens: levels q, their magnitudes qa = |q|, and the scales.
struct alignas(32) ActQ8_KAbs {
  int8_t q[64][kLanes][4];
  int8_t qa[64][kLanes][4];
  float d[kLanes];
};

void pack_q8_k_abs(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_KAbs* dst) {
  pack_q8_k_levels(rows, n_valid, block, dst->q, dst->d);
  for (int g = 0; g < 64; ++g) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst->qa[g]), _mm256_abs_epi8(load(dst->q[g])));
  }
}

// An unpacked Q6_K or Q3_K super-block: the signed levels (q - 32, q - 4) in element
// order, each 16-element sub-block's signed scale twice in an int32 (sign-extended int16
// pair), and d.
struct WtSigned16 {
  int8_t q[256];
  uint32_t sc[16];
  float d;
};

struct Q6_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 1;  // its packed activations are twice as large
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_KAbs;
  using Wt = WtSigned16;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_k_abs(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + block;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i off = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
      const __m256i low[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                              _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m2);
        const __m256i q = _mm256_or_si256(low[k], _mm256_slli_epi16(high, 4));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 128 * h + 32 * k),
                            _mm256_sub_epi8(q, off));
      }
    }
    for (int k = 0; k < 16; ++k) {
      dst->sc[k] = static_cast<uint16_t>(b->scales[k]) * 0x10001u;
    }
    dst->d = half_to_float(b->d);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    for (int b = 0; b < kb; ++b) {
      const Wt* wb[R];
      for (int r = 0; r < R; ++r) wb[r] = &w[r][b];
      __m256i sum[R];
      for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
      for (int k = 0; k < 16; ++k) {
        __m256i s16[R];
        for (int r = 0; r < R; ++r) s16[r] = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g) {
          const int i = 4 * k + g;
          const __m256i as = load(a[b].q[i]);
          const __m256i aa = load(a[b].qa[i]);
          for (int r = 0; r < R; ++r) {
            const __m256i p =
                _mm256_maddubs_epi16(aa, _mm256_sign_epi8(bcast32(wb[r]->q + 4 * i), as));
            s16[r] = _mm256_add_epi16(s16[r], p);
            pin(s16[r]);
          }
        }
        for (int r = 0; r < R; ++r) {
          sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(s16[r], bcast32(&wb[r]->sc[k])));
        }
      }
      const __m256 da = _mm256_load_ps(a[b].d);
      for (int r = 0; r < R; ++r) {
        f[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r]),
                               _mm256_mul_ps(da, _mm256_set1_ps(wb[r]->d)), f[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

// Q3_K: levels q - 4 in [-4, 3] and scales sc - 32 in [-32, 31], both inside Q6_K's
// ranges, so Q6_K's packing and tile serve as they are; only the unpacking differs.
struct Q3_K : Q6_K {
  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ3_K*>(row) + block;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i four = _mm256_set1_epi8(4);
    // Bit 4h + k of hmask[l] is bit 2 of the level of element 128h + 32k + l: where it is
    // clear, 4 comes off the low two bits.
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->hmask));
    for (int h = 0; h < 2; ++h) {
      __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * h));
      for (int k = 0; k < 4; ++k) {
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + k)));
        const __m256i clear =
            _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
        const __m256i q =
            _mm256_sub_epi8(_mm256_and_si256(bits, m3), _mm256_and_si256(clear, four));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 128 * h + 32 * k), q);
        bits = _mm256_srli_epi16(bits, 2);
      }
    }
    for (int s = 0; s < 16; ++s) {
      dst->sc[s] = static_cast<uint16_t>(q3_k_scale(b->scales, s) - 32) * 0x10001u;
    }
    dst->d = half_to_float(b->d);
  }
};

// ---- IQ4_XS -----------------------------------------------------------------------------

// An unpacked IQ4_XS super-block: the signed levels (its table's) in element order, each
// 32-element sub-block scale ls - 32 twice in an int32 (an int16 pair), and d.
struct WtIQ4_XS {
  int8_t q[256];
  uint32_t sc[8];
  float d;
};

// As Q6_K, |a| * (sign(a) * level), but a level reaches 127, so a vpmaddubsw pair (at most
// 2 * 128 * 127) is widened by vpmaddwd with the sub-block scale (|ls - 32| <= 32) at once:
// 64 groups of 2 * 32512 * 32 stay inside int32.
struct IQ4_XS {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 1;  // as Q6_K: large packed activations
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_KAbs;
  using Wt = WtIQ4_XS;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_k_abs(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto& b = reinterpret_cast<const BlockIQ4_XS*>(row)[block];
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
    const __m128i m4 = _mm_set1_epi8(15);
    for (int s = 0; s < 8; ++s) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * s));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q + 32 * s),
                       _mm_shuffle_epi8(table, _mm_and_si128(q, m4)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q + 32 * s + 16),
                       _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
      dst->sc[s] = static_cast<uint16_t>(iq4_xs_scale(b, s) - 32) * 0x10001u;
    }
    dst->d = half_to_float(b.d);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    for (int b = 0; b < kb; ++b) {
      __m256i sum[R];
      for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        __m256i sc[R];
        for (int r = 0; r < R; ++r) sc[r] = bcast32(&w[r][b].sc[s]);
        for (int g = 0; g < 8; ++g) {
          const int i = 8 * s + g;
          const __m256i as = load(a[b].q[i]);
          const __m256i aa = load(a[b].qa[i]);
          for (int r = 0; r < R; ++r) {
            const __m256i p =
                _mm256_maddubs_epi16(aa, _mm256_sign_epi8(bcast32(w[r][b].q + 4 * i), as));
            sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(p, sc[r]));
            pin(sum[r]);
          }
        }
      }
      const __m256 da = _mm256_load_ps(a[b].d);
      for (int r = 0; r < R; ++r) {
        f[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r]),
                               _mm256_mul_ps(da, _mm256_set1_ps(w[r][b].d)), f[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

}  // namespace

void fill_gemm_kquants(CpuKernels& k) {
  k.for_type(DType::kQ2_K).gemm = gemm::Gemm<Q2_K>::kernels();
  k.for_type(DType::kQ3_K).gemm = gemm::Gemm<Q3_K>::kernels();
  k.for_type(DType::kQ4_K).gemm = gemm::Gemm<Q4_K>::kernels();
  k.for_type(DType::kQ5_K).gemm = gemm::Gemm<Q5_K>::kernels();
  k.for_type(DType::kQ6_K).gemm = gemm::Gemm<Q6_K>::kernels();
  k.for_type(DType::kIQ4_XS).gemm = gemm::Gemm<IQ4_XS>::kernels();
}

}  // namespace qrun::kernels::avx2
