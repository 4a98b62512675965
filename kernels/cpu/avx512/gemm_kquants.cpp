// AVX-512 VNNI gemm micro-kernels of the k-quants against Q8_K activations (Q4_K, Q5_K,
// Q6_K), on the 16-token packing of gemm_common.h: R weight rows x 2 vectors of 16 tokens
// per tile, one 256-element super-block at a time. Each sub-block's dot is an exact int32
// vpdpbusd sum of unsigned weight levels and signed activations; it is scaled in float by
// its sub-block scale times d (exact in float), so a super-block rounds like any float sum
// of a few terms, well inside the tests' 1e-5 relative bound.
//   Q4_K, Q5_K: levels 0..15 / 0..31 as stored; the mins term dmin * sum_s m[s] sum_s(a)
//     is one vpdpwssd per two sub-blocks on per-token sub-block sums packed with the
//     activations.
//   Q6_K: levels q in 0..63 as stored, value q - 32: -32 * (sum of each 16-element
//     sub-block of a token) is packed with the activations and seeds the sub-block's
//     accumulator, so no per-row correction is needed.
#include "kernels/cpu/avx2/kquant_levels.h"
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/gemm_common.h"

namespace qrun::kernels::avx512 {
namespace {

using gemm::bcast32;
using gemm::half_to_float;
using gemm::kLanes;
using gemm::load;

// Packs the 256 levels of a super-block for 16 tokens: q[g] holds levels 4g .. 4g + 3 of
// each token. Returns the token scales in d and the 16 bsums as int16 pairs in pairs[j]
// (bsums 2j and 2j + 1 of each token, i.e. the two halves of sub-block j).
void pack_q8_k(const uint8_t* const* rows, int n_valid, int64_t block, int8_t (*q)[kLanes][4],
               float* d, __m512i pairs[8]) {
  const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_K);
  for (int s = 0; s < 8; ++s) {
    __m512i v[8];
    gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_K, qs) + 32 * s, v);
    for (int g = 0; g < 8; ++g) _mm512_store_si512(q[8 * s + g], v[g]);
  }
  for (int t = 0; t < kLanes; ++t) {
    d[t] = 0.0f;
    if (t < n_valid) std::memcpy(&d[t], rows[t] + offset + offsetof(BlockQ8_K, d), sizeof(float));
  }
  gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_K, bsums), pairs);
}

// ---- Q4_K and Q5_K ------------------------------------------------------------------

// One super-block of 16 tokens: levels, scales, and sums[j] holding for each token the
// sums of its 32-element sub-blocks 2j and 2j + 1 as an int16 pair.
struct alignas(64) ActQ8_KSums {
  int8_t q[64][kLanes][4];
  float d[kLanes];
  int16_t sums[4][kLanes][2];
};

void pack_sums(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_KSums* dst) {
  __m512i pairs[8];
  pack_q8_k(rows, n_valid, block, dst->q, dst->d, pairs);
  const __m512i ones = _mm512_set1_epi16(1);
  for (int j = 0; j < 4; ++j) {
    const __m512i even = _mm512_madd_epi16(pairs[2 * j], ones);     // sub-block 2j, int32
    const __m512i odd = _mm512_madd_epi16(pairs[2 * j + 1], ones);  // sub-block 2j + 1
    // |sum| <= 32 * 127 fits int16: low half from `even`, high half from `odd`.
    const __m512i packed = _mm512_mask_blend_epi16(0xaaaaaaaa, even, gemm::slli32(odd, 16));
    _mm512_store_si512(dst->sums[j], packed);
  }
}

// An unpacked Q4_K or Q5_K super-block: levels in element order, d * sc[s] per sub-block,
// the mins as int16 and dmin.
struct WtKScaleMin {
  uint8_t q[256];
  float scd[8];
  int16_t m[8];
  float dmin;
};

// Decodes the 12 scale bytes (layout in quants.h) four sub-blocks per 32-bit word: with
// w0, w1, w2 the words of bytes 0-3, 4-7, 8-11, scales 0-3 are w0 & 63 per byte, 4-7 are
// (w2 & 15) | (w0 >> 6) << 4 per byte; the mins likewise from w1 and the high nibbles of w2.
void unpack_scale_min(const uint8_t* scales, uint16_t d, uint16_t dmin, WtKScaleMin* dst) {
  uint32_t w[3];
  std::memcpy(w, scales, sizeof(w));
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t m_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  const __m128i sc = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), 0, 0);
  const __m128i m = _mm_setr_epi32(static_cast<int>(m_lo), static_cast<int>(m_hi), 0, 0);
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc));
  _mm256_storeu_ps(dst->scd, _mm256_mul_ps(scf, _mm256_set1_ps(half_to_float(d))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->m), _mm_cvtepu8_epi16(m));
  dst->dmin = half_to_float(dmin);
}

// acc += d_a * (sum_s scd[s] dot_s - dmin * sum_s m[s] sum_s(a)) for R rows and V token
// vectors (vector v's blocks a_stride apart in a), kb blocks.
template <int R, int V>
void tile_scale_min(const WtKScaleMin* const* w, const ActQ8_KSums* a, int64_t a_stride, int kb,
                    float* acc, int64_t ld) {
  for (int b = 0; b < kb; ++b) {
    const WtKScaleMin* wb[R];
    for (int r = 0; r < R; ++r) wb[r] = &w[r][b];
    const ActQ8_KSums* ab[V];
    for (int v = 0; v < V; ++v) ab[v] = &a[v * a_stride + b];
    __m512 t[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) t[r][v] = _mm512_setzero_ps();
    }
    for (int s = 0; s < 8; ++s) {
      __m512i i[R][V];
      for (int r = 0; r < R; ++r) {
        for (int v = 0; v < V; ++v) i[r][v] = _mm512_setzero_si512();
      }
      for (int g = 0; g < 8; ++g) {
        __m512i ag[V];
        for (int v = 0; v < V; ++v) ag[v] = load(ab[v]->q[8 * s + g]);
        for (int r = 0; r < R; ++r) {
          const __m512i wg = bcast32(wb[r]->q + 32 * s + 4 * g);
          for (int v = 0; v < V; ++v) i[r][v] = _mm512_dpbusd_epi32(i[r][v], wg, ag[v]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512 sc = _mm512_set1_ps(wb[r]->scd[s]);
        for (int v = 0; v < V; ++v) t[r][v] = _mm512_fmadd_ps(gemm::to_float(i[r][v]), sc, t[r][v]);
      }
    }
    for (int v = 0; v < V; ++v) {
      const __m512 da = _mm512_load_ps(ab[v]->d);
      for (int r = 0; r < R; ++r) {
        __m512i mins = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          mins = _mm512_dpwssd_epi32(mins, load(ab[v]->sums[j]), bcast32(&wb[r]->m[2 * j]));
        }
        const __m512 tv =
            _mm512_fnmadd_ps(_mm512_set1_ps(wb[r]->dmin), gemm::to_float(mins), t[r][v]);
        float* out = acc + r * ld + v * kLanes;
        _mm512_storeu_ps(out, _mm512_fmadd_ps(tv, da, _mm512_loadu_ps(out)));
      }
    }
  }
}

struct Q4_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 6;
  static constexpr int kVecs = 2;
  using Act = ActQ8_KSums;
  using Wt = WtKScaleMin;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_sums(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + block;
    kquant_levels::unpack_q4_k(*b, dst);
    unpack_scale_min(b->scales, b->d, b->dmin, dst);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t a_stride, int kb, float* acc,
                   int64_t ld) {
    tile_scale_min<R, V>(w, a, a_stride, kb, acc, ld);
  }
};

struct Q5_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 6;
  static constexpr int kVecs = 2;
  using Act = ActQ8_KSums;
  using Wt = WtKScaleMin;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_sums(rows, n_valid, block, dst);
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ5_K*>(row) + block;
    kquant_levels::unpack_q5_k(*b, dst);
    unpack_scale_min(b->scales, b->d, b->dmin, dst);
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t a_stride, int kb, float* acc,
                   int64_t ld) {
    tile_scale_min<R, V>(w, a, a_stride, kb, acc, ld);
  }
};

// ---- Q6_K -------------------------------------------------------------------------------

// One super-block of 16 tokens: levels, scales, and corr[k] = -32 * (sum of each token's
// 16-element sub-block k).
struct alignas(64) ActQ8_KCorr {
  int8_t q[64][kLanes][4];
  float d[kLanes];
  int32_t corr[16][kLanes];
};

// An unpacked Q6_K super-block: levels 0..63 in element order and d * scales[k].
struct WtQ6_K {
  uint8_t q[256];
  float scd[16];
};

struct Q6_K {
  static constexpr int64_t kBlockElems = 256;
  static constexpr int kChunk = 2;
  static constexpr int kRows = 6;
  static constexpr int kVecs = 2;
  using Act = ActQ8_KCorr;
  using Wt = WtQ6_K;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    __m512i pairs[8];
    pack_q8_k(rows, n_valid, block, dst->q, dst->d, pairs);
    for (int j = 0; j < 8; ++j) {
      const __m512i even = gemm::srai32(gemm::slli32(pairs[j], 16), 16);
      const __m512i odd = gemm::srai32(pairs[j], 16);
      _mm512_store_si512(dst->corr[2 * j],
                         gemm::slli32(_mm512_sub_epi32(_mm512_setzero_si512(), even), 5));
      _mm512_store_si512(dst->corr[2 * j + 1],
                         gemm::slli32(_mm512_sub_epi32(_mm512_setzero_si512(), odd), 5));
    }
  }

  static void unpack(const uint8_t* row, int64_t block, Wt* dst) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + block;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
      const __m256i low[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                              _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m2);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 128 * h + 32 * k),
                            _mm256_or_si256(low[k], _mm256_slli_epi16(high, 4)));
      }
    }
    const __m512i sc = _mm512_maskz_cvtepi8_epi32(
        0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
    _mm512_storeu_ps(dst->scd,
                     _mm512_mul_ps(gemm::to_float(sc), _mm512_set1_ps(half_to_float(b->d))));
  }

  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t a_stride, int kb, float* acc,
                   int64_t ld) {
    for (int b = 0; b < kb; ++b) {
      const Wt* wb[R];
      for (int r = 0; r < R; ++r) wb[r] = &w[r][b];
      const Act* ab[V];
      for (int v = 0; v < V; ++v) ab[v] = &a[v * a_stride + b];
      __m512 t[R][V];
      for (int r = 0; r < R; ++r) {
        for (int v = 0; v < V; ++v) t[r][v] = _mm512_setzero_ps();
      }
      for (int k = 0; k < 16; ++k) {
        __m512i i[R][V];
        for (int v = 0; v < V; ++v) {
          const __m512i corr = load(ab[v]->corr[k]);
          for (int r = 0; r < R; ++r) i[r][v] = corr;
        }
        for (int g = 0; g < 4; ++g) {
          __m512i ag[V];
          for (int v = 0; v < V; ++v) ag[v] = load(ab[v]->q[4 * k + g]);
          for (int r = 0; r < R; ++r) {
            const __m512i wg = bcast32(wb[r]->q + 16 * k + 4 * g);
            for (int v = 0; v < V; ++v) i[r][v] = _mm512_dpbusd_epi32(i[r][v], wg, ag[v]);
          }
        }
        for (int r = 0; r < R; ++r) {
          const __m512 sc = _mm512_set1_ps(wb[r]->scd[k]);
          for (int v = 0; v < V; ++v) {
            t[r][v] = _mm512_fmadd_ps(gemm::to_float(i[r][v]), sc, t[r][v]);
          }
        }
      }
      for (int v = 0; v < V; ++v) {
        const __m512 da = _mm512_load_ps(ab[v]->d);
        for (int r = 0; r < R; ++r) {
          float* out = acc + r * ld + v * kLanes;
          _mm512_storeu_ps(out, _mm512_fmadd_ps(t[r][v], da, _mm512_loadu_ps(out)));
        }
      }
    }
  }
};

}  // namespace

void fill_gemm_kquants(CpuKernels& k) {
  k.for_type(DType::kQ4_K).gemm = gemm::Gemm<Q4_K>::kernels();
  k.for_type(DType::kQ5_K).gemm = gemm::Gemm<Q5_K>::kernels();
  k.for_type(DType::kQ6_K).gemm = gemm::Gemm<Q6_K>::kernels();
}

}  // namespace qrun::kernels::avx512
