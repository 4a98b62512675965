// AVX2 gemm micro-kernels of the 32-element weight types, on the token-interleaved packing
// of gemm_common.h. Each kernel computes R weight rows x 8 tokens with its accumulators in
// registers.
//   Q4_0, Q5_0 (against Q8_0), Q4_1, Q5_1 (against Q8_1): the unsigned levels q (not
//     q - offset) meet the signed activations in vpmaddubsw; Q4_0 and Q5_0 take the offset
//     back per block as offset * sum(a), Q4_1 and Q5_1 add m * s (Q8_1's d * sum(a)). The
//     int16 lanes sum at most 16 products of 15 * 127 (4-bit levels) or 8 of 31 * 127
//     (5-bit) before vpmaddwd widens them, so no lane saturates.
//   Q8_0, IQ4_NL (against Q8_0): signed levels (IQ4_NL's from its table), both sides
//     widened to int16 pairs and multiplied with vpmaddwd.
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/gemm_common.h"

namespace qrun::kernels::avx2 {
namespace {

using gemm::bcast32;
using gemm::half_to_float;
using gemm::kLanes;

// ---- activations: Q8_0 and Q8_1 as int8 groups (for the unsigned-level types) --------

// One block of 8 tokens: q[g] holds levels 4g .. 4g + 3 of each token, d the token
// scales, sum the sums of their 32 levels. Missing tokens are zero.
struct alignas(32) ActQ8_0 {
  int8_t q[8][kLanes][4];
  float d[kLanes];
  int32_t sum[kLanes];
};

// The same from Q8_1 blocks, with s = d * sum(levels) as the block stores it (F16).
struct alignas(32) ActQ8_1 {
  int8_t q[8][kLanes][4];
  float d[kLanes];
  float s[kLanes];
};

// The levels of block `block` of each row into dst->q, their F16 scale (at byte 0 of the
// block) into dst->d; returns the transposed level groups.
template <class Block, class Act>
void pack_levels(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst, __m256i v[8]) {
  const size_t offset = static_cast<size_t>(block) * sizeof(Block);
  gemm::gather_transpose(rows, n_valid, offset + offsetof(Block, qs), v);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(dst->q[g]), v[g]);
  for (int t = 0; t < kLanes; ++t) {
    uint16_t d = 0;
    if (t < n_valid) std::memcpy(&d, rows[t] + offset, sizeof(d));
    dst->d[t] = half_to_float(d);
  }
}

void pack_q8_0(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_0* dst) {
  __m256i v[8];
  pack_levels<BlockQ8_0>(rows, n_valid, block, dst, v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst->sum), gemm::lane_sums_i8(v, 8));
}

void pack_q8_1(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_1* dst) {
  __m256i v[8];
  pack_levels<BlockQ8_1>(rows, n_valid, block, dst, v);
  const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_1) + offsetof(BlockQ8_1, s);
  for (int t = 0; t < kLanes; ++t) {
    uint16_t s = 0;
    if (t < n_valid) std::memcpy(&s, rows[t] + offset, sizeof(s));
    dst->s[t] = half_to_float(s);
  }
}

// The float accumulation shared by the legacy kernels: f += (d_w * d_a) * float(i).
inline __m256 scale_add(__m256i i, const float* da, float dw, __m256 f) {
  const __m256 d = _mm256_mul_ps(_mm256_load_ps(da), _mm256_set1_ps(dw));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), d, f);
}

// The 32 nibbles of a block's qs in element order (low nibbles, then high ones).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

// Spreads the 32 bits of `bits` over 32 bytes: byte i is 0xFF where bit i is set.
inline __m256i expand_bits(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuf);
  const __m256i mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(v, mask), _mm256_set1_epi64x(-1));
}

// The 5-bit levels of a Q5_0 or Q5_1 block: the nibbles with bit 4 from qh.
template <class Block>
inline __m256i levels5(const Block& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(expand_bits(qh), _mm256_set1_epi8(16)));
}

// ---- unsigned levels: Q4_0, Q5_0 (offset), Q4_1, Q5_1 (minimum) ---------------------------

struct WtLevels {
  uint8_t q[32];  // levels 0..31 in element order
  float d;
  float m;  // the block minimum (Q4_1, Q5_1)
};

// Traits L: Block; kOffset (8 or 16: dot(q - o, a) = dot(q, a) - o * sum(a); 0: none);
// kMin (the offset types add m_w * s_a per block); Act and pack (ActQ8_0 or ActQ8_1);
// levels(block) -> 32 levels in element order.
template <class L>
struct Unsigned {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 16;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  // int16 lanes sum at most 16 products of 15 * 127 (4-bit levels) or 8 of 31 * 127 (5-bit)
  // before vpmaddwd widens them, so no lane saturates: 5-bit levels take two halves.
  static constexpr int kHalves = L::kBits == 4 ? 1 : 2;
  using Act = typename L::Act;
  using Wt = WtLevels;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    L::pack(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto& b = reinterpret_cast<const typename L::Block*>(row)[block];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q), L::levels(b));
    dst->d = half_to_float(b.d);
    if constexpr (L::kMin) dst->m = half_to_float(b.m);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    constexpr int kGroups = 8 / kHalves;  // level groups of 4 per int16 sum
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < kb; ++b) {
      __m256i i[R];
      for (int half = 0; half < kHalves; ++half) {
        __m256i s[R];
        const int g0 = kGroups * half;
        const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[g0]));
        for (int r = 0; r < R; ++r) s[r] = _mm256_maddubs_epi16(bcast32(w[r][b].q + 4 * g0), a0);
        for (int g = g0 + 1; g < g0 + kGroups; ++g) {
          const __m256i ag = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[g]));
          for (int r = 0; r < R; ++r) {
            s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(bcast32(w[r][b].q + 4 * g), ag));
            gemm::pin(s[r]);
          }
        }
        for (int r = 0; r < R; ++r) {
          const __m256i wide = _mm256_madd_epi16(s[r], ones);
          i[r] = half == 0 ? wide : _mm256_add_epi32(i[r], wide);
        }
      }
      if constexpr (L::kOffset != 0) {
        const __m256i sum = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].sum));
        static_assert(L::kOffset == 8 || L::kOffset == 16);
        const __m256i corr = _mm256_slli_epi32(sum, L::kOffset == 8 ? 3 : 4);
        for (int r = 0; r < R; ++r) i[r] = _mm256_sub_epi32(i[r], corr);
      }
      for (int r = 0; r < R; ++r) {
        f[r] = scale_add(i[r], a[b].d, w[r][b].d, f[r]);
        if constexpr (L::kMin) {
          f[r] = _mm256_fmadd_ps(_mm256_load_ps(a[b].s), _mm256_set1_ps(w[r][b].m), f[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

struct Q8_0Acts {
  using Act = ActQ8_0;
  static constexpr bool kMin = false;
  static void pack(const uint8_t* const* rows, int n, int64_t block, Act* dst) {
    pack_q8_0(rows, n, block, dst);
  }
};

struct Q8_1Acts {
  using Act = ActQ8_1;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0;
  static void pack(const uint8_t* const* rows, int n, int64_t block, Act* dst) {
    pack_q8_1(rows, n, block, dst);
  }
};

struct Q4_0Levels : Q8_0Acts {
  using Block = BlockQ4_0;
  static constexpr int kBits = 4;
  static constexpr int kOffset = 8;
  static __m256i levels(const Block& b) { return nibbles32(b.qs); }
};

struct Q5_0Levels : Q8_0Acts {
  using Block = BlockQ5_0;
  static constexpr int kBits = 5;
  static constexpr int kOffset = 16;
  static __m256i levels(const Block& b) { return levels5(b); }
};

struct Q4_1Levels : Q8_1Acts {
  using Block = BlockQ4_1;
  static constexpr int kBits = 4;
  static __m256i levels(const Block& b) { return nibbles32(b.qs); }
};

struct Q5_1Levels : Q8_1Acts {
  using Block = BlockQ5_1;
  static constexpr int kBits = 5;
  static __m256i levels(const Block& b) { return levels5(b); }
};

// ---- signed levels: Q8_0, IQ4_NL ----------------------------------------------------------

// One block of 8 tokens widened to int16: q[p] holds levels 2p, 2p + 1 of each token.
struct alignas(32) ActQ8_0Wide {
  int16_t q[16][kLanes][2];
  float d[kLanes];
};

struct WtWide {
  int16_t q[32];  // levels in element order
  float d;
};

// Weights and activations are both signed, so both are widened to int16 pairs and
// multiplied with vpmaddwd (the same multiplier cost as vpmaddubsw plus sign fixing).
// Traits L: Block; levels(block, int16_t* q) writes the 32 signed levels.
template <class L>
struct Signed {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 8;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_0Wide;
  using Wt = WtWide;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_0);
    __m256i v[8];
    // Groups of 4 levels per token; each splits into two int16 pairs.
    gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_0, qs), v);
    for (int g = 0; g < 8; ++g) {
      const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v[g]));
      const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v[g], 1));
      // lo holds tokens 0-3, hi tokens 4-7, 64 bits (two int16 pairs) each; a takes tokens
      // 0, 1 | 4, 5 and b tokens 2, 3 | 6, 7, so that the shuffles below line up 8 tokens.
      const __m256i a = _mm256_permute2x128_si256(lo, hi, 0x20);
      const __m256i b = _mm256_permute2x128_si256(lo, hi, 0x31);
      const __m256i even = _mm256_castps_si256(
          _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88));
      const __m256i odd = _mm256_castps_si256(
          _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0xdd));
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst->q[2 * g]), even);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst->q[2 * g + 1]), odd);
    }
    for (int t = 0; t < kLanes; ++t) {
      uint16_t d = 0;
      if (t < n_valid) std::memcpy(&d, rows[t] + offset, sizeof(d));
      dst->d[t] = half_to_float(d);
    }
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto& b = reinterpret_cast<const typename L::Block*>(row)[block];
    L::levels(b, dst->q);
    dst->d = half_to_float(b.d);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    for (int b = 0; b < kb; ++b) {
      __m256i i[R];
      const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[0]));
      for (int r = 0; r < R; ++r) i[r] = _mm256_madd_epi16(bcast32(w[r][b].q), a0);
      for (int p = 1; p < 16; ++p) {
        const __m256i ap = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[p]));
        for (int r = 0; r < R; ++r) {
          i[r] = _mm256_add_epi32(i[r], _mm256_madd_epi16(bcast32(w[r][b].q + 2 * p), ap));
          gemm::pin(i[r]);
        }
      }
      for (int r = 0; r < R; ++r) f[r] = scale_add(i[r], a[b].d, w[r][b].d, f[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

struct Q8_0Levels {
  using Block = BlockQ8_0;
  static void levels(const Block& b, int16_t* q) {
    for (int h = 0; h < 2; ++h) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * h));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * h), _mm256_cvtepi8_epi16(v));
    }
  }
};

struct Iq4NlLevels {
  using Block = BlockIQ4_NL;
  static void levels(const Block& b, int16_t* q) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
    const __m256i idx = nibbles32(b.qs);
    const __m128i lo = _mm_shuffle_epi8(table, _mm256_castsi256_si128(idx));
    const __m128i hi = _mm_shuffle_epi8(table, _mm256_extracti128_si256(idx, 1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_cvtepi8_epi16(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), _mm256_cvtepi8_epi16(hi));
  }
};

}  // namespace

void fill_gemm_legacy(CpuKernels& k) {
  k.for_type(DType::kQ4_0).gemm = gemm::Gemm<Unsigned<Q4_0Levels>>::kernels();
  k.for_type(DType::kQ5_0).gemm = gemm::Gemm<Unsigned<Q5_0Levels>>::kernels();
  k.for_type(DType::kQ4_1).gemm = gemm::Gemm<Unsigned<Q4_1Levels>>::kernels();
  k.for_type(DType::kQ5_1).gemm = gemm::Gemm<Unsigned<Q5_1Levels>>::kernels();
  k.for_type(DType::kQ8_0).gemm = gemm::Gemm<Signed<Q8_0Levels>>::kernels();
  k.for_type(DType::kIQ4_NL).gemm = gemm::Gemm<Signed<Iq4NlLevels>>::kernels();
}

}  // namespace qrun::kernels::avx2
