// AVX2 gemm micro-kernels of the 32-element weight types against Q8_0 activations
// (Q4_0, Q5_0, Q8_0), on the token-interleaved packing of gemm_common.h. Each kernel
// computes R weight rows x 8 tokens with its accumulators in registers.
//   Q4_0, Q5_0: the unsigned levels q (not q - offset) meet the signed activations in
//     vpmaddubsw; the offset is taken back per block as offset * sum(a). The int16 lanes
//     sum at most 16 products of 15 * 127 (Q4_0) or 8 of 31 * 127 (Q5_0) before vpmaddwd
//     widens them, so no lane saturates.
//   Q8_0: weights and activations are both signed, so both are widened to int16 pairs and
//     multiplied with vpmaddwd (the same multiplier cost as vpmaddubsw plus sign fixing).
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/gemm_common.h"

namespace qrun::kernels::avx2 {
namespace {

using gemm::bcast32;
using gemm::half_to_float;
using gemm::kLanes;

// ---- activations: Q8_0 as int8 groups (for Q4_0, Q5_0) ------------------------------

// One block of 8 tokens: q[g] holds levels 4g .. 4g + 3 of each token, d the token
// scales, sum the sums of their 32 levels. Missing tokens are zero.
struct alignas(32) ActQ8_0 {
  int8_t q[8][kLanes][4];
  float d[kLanes];
  int32_t sum[kLanes];
};

void pack_q8_0(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_0* dst) {
  const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_0);
  __m256i v[8];
  gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_0, qs), v);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(dst->q[g]), v[g]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst->sum), gemm::lane_sums_i8(v, 8));
  for (int t = 0; t < kLanes; ++t) {
    uint16_t d = 0;
    if (t < n_valid) std::memcpy(&d, rows[t] + offset, sizeof(d));
    dst->d[t] = half_to_float(d);
  }
}

// The float accumulation shared by the legacy kernels: f += (d_w * d_a) * float(i).
inline __m256 scale_add(__m256i i, const float* da, float dw, __m256 f) {
  const __m256 d = _mm256_mul_ps(_mm256_load_ps(da), _mm256_set1_ps(dw));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), d, f);
}

// ---- Q4_0 -------------------------------------------------------------------------------

struct WtQ4_0 {
  uint8_t q[32];  // levels 0..15 in element order
  float d;
};

struct Q4_0 {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 16;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_0;
  using Wt = WtQ4_0;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_0(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + block;
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i m4 = _mm_set1_epi8(15);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q), _mm_and_si128(qs, m4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q + 16),
                     _mm_and_si128(_mm_srli_epi16(qs, 4), m4));
    dst->d = half_to_float(b->d);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < kb; ++b) {
      __m256i s[R];
      const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[0]));
      for (int r = 0; r < R; ++r) s[r] = _mm256_maddubs_epi16(bcast32(w[r][b].q), a0);
      for (int g = 1; g < 8; ++g) {
        const __m256i ag = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[g]));
        for (int r = 0; r < R; ++r) {
          s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(bcast32(w[r][b].q + 4 * g), ag));
          gemm::pin(s[r]);
        }
      }
      // dot(q - 8, a) = dot(q, a) - 8 * sum(a)
      const __m256i corr =
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].sum)), 3);
      for (int r = 0; r < R; ++r) {
        const __m256i i = _mm256_sub_epi32(_mm256_madd_epi16(s[r], ones), corr);
        f[r] = scale_add(i, a[b].d, w[r][b].d, f[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

// ---- Q5_0 -------------------------------------------------------------------------------

struct WtQ5_0 {
  uint8_t q[32];  // levels 0..31 in element order
  float d;
};

// Spreads the 32 bits of `bits` over 32 bytes: byte i is 0xFF where bit i is set.
inline __m256i expand_bits(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuf);
  const __m256i mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(v, mask), _mm256_set1_epi64x(-1));
}

struct Q5_0 {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 16;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_0;
  using Wt = WtQ5_0;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_0(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ5_0*>(row) + block;
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i m4 = _mm_set1_epi8(15);
    const __m256i low =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
    uint32_t qh;
    std::memcpy(&qh, b->qh, sizeof(qh));
    const __m256i high = _mm256_and_si256(expand_bits(qh), _mm256_set1_epi8(16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q), _mm256_or_si256(low, high));
    dst->d = half_to_float(b->d);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t /*a_stride*/, int kb, float* acc,
                   int64_t ld) {
    static_assert(V == 1);
    __m256 f[R];
    for (int r = 0; r < R; ++r) f[r] = _mm256_loadu_ps(acc + r * ld);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < kb; ++b) {
      __m256i i[R];
      for (int r = 0; r < R; ++r) i[r] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        __m256i s[R];
        const int g0 = 4 * half;
        const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[g0]));
        for (int r = 0; r < R; ++r) s[r] = _mm256_maddubs_epi16(bcast32(w[r][b].q + 4 * g0), a0);
        for (int g = g0 + 1; g < g0 + 4; ++g) {
          const __m256i ag = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].q[g]));
          for (int r = 0; r < R; ++r) {
            s[r] = _mm256_add_epi16(s[r], _mm256_maddubs_epi16(bcast32(w[r][b].q + 4 * g), ag));
            gemm::pin(s[r]);
          }
        }
        for (int r = 0; r < R; ++r) i[r] = _mm256_add_epi32(i[r], _mm256_madd_epi16(s[r], ones));
      }
      // dot(q - 16, a) = dot(q, a) - 16 * sum(a)
      const __m256i corr =
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(a[b].sum)), 4);
      for (int r = 0; r < R; ++r) {
        f[r] = scale_add(_mm256_sub_epi32(i[r], corr), a[b].d, w[r][b].d, f[r]);
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * ld, f[r]);
  }
};

// ---- Q8_0 -------------------------------------------------------------------------------

// One block of 8 tokens widened to int16: q[p] holds levels 2p, 2p + 1 of each token.
struct alignas(32) ActQ8_0Wide {
  int16_t q[16][kLanes][2];
  float d[kLanes];
};

struct WtQ8_0 {
  int16_t q[32];  // levels in element order
  float d;
};

struct Q8_0 {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 8;
  static constexpr int kRows = 4;
  static constexpr int kVecs = 1;
  using Act = ActQ8_0Wide;
  using Wt = WtQ8_0;

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
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + block;
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * h));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 16 * h), _mm256_cvtepi8_epi16(q));
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

}  // namespace

void fill_gemm_legacy(CpuKernels& k) {
  k.for_type(DType::kQ4_0).gemm = gemm::Gemm<Q4_0>::kernels();
  k.for_type(DType::kQ5_0).gemm = gemm::Gemm<Q5_0>::kernels();
  k.for_type(DType::kQ8_0).gemm = gemm::Gemm<Q8_0>::kernels();
}

}  // namespace qrun::kernels::avx2
