// Shared machinery of the AVX-512 VNNI gemm kernels (avx512/gemm_*.cpp): the ISA side of the
// tile driver (gemm_tiles.h) over activations packed once per matmul, and helpers to pack them
// "token-interleaved" for 16 tokens: each group of 4 consecutive elements of a block is stored as
// [token 0: 4 levels] .. [token 15: 4 levels], so one vpdpbusd of a broadcast 4-byte group of
// unsigned weight levels against it adds 4 products to each token's int32 lane. Weight unpacking
// and scale decoding are shared by 16 tokens, each packed activation by all rows of a micro-tile.
// vpdpbusd sums exactly in int32 (no int16 stage, no saturation); blocks are scaled and summed in
// float, so an output differs from vec_dot only by float rounding.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/transpose.h"
#include "kernels/cpu/gemm_tiles.h"

namespace qrun::kernels::avx512::gemm {

inline constexpr int kLanes = 16;  // tokens per vector

// The 4 bytes at p, broadcast to all 16 lanes (one vpbroadcastd from memory).
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

inline __m512i load(const void* p) {
  return _mm512_load_si512(p);
}

// GCC 12 builds several AVX-512 intrinsics on an "undefined" vector that
// -Werror=maybe-uninitialized rejects once inlined; their all-ones zero-masking forms are
// the same instructions without it.
inline __m512 to_float(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(0xffff, v);
}
inline __m512i slli32(__m512i v, unsigned n) {
  return _mm512_maskz_slli_epi32(0xffff, v, n);
}
inline __m512i srai32(__m512i v, unsigned n) {
  return _mm512_maskz_srai_epi32(0xffff, v, n);
}
// [lo, hi] as one vector.
inline __m512i concat(__m256i lo, __m256i hi) {
  return _mm512_maskz_inserti64x4(
      0xff, _mm512_maskz_inserti64x4(0xff, _mm512_setzero_si512(), lo, 0), hi, 1);
}

using simd_shared::half_to_float;
using simd_shared::transpose8x8_epi32;

// Loads 32 bytes at rows[t] + offset for each of the first n_valid tokens (zeros for the
// others) and transposes them: out[g] holds bytes 4g .. 4g + 3 of all 16 tokens.
inline void gather_transpose(const uint8_t* const* rows, int n_valid, size_t offset,
                             __m512i out[8]) {
  __m256i half[2][8];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 8; ++i) {
      const int t = 8 * h + i;
      half[h][i] = t < n_valid
                       ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t] + offset))
                       : _mm256_setzero_si256();
    }
    transpose8x8_epi32(half[h]);
  }
  for (int g = 0; g < 8; ++g) {
    out[g] = concat(half[0][g], half[1][g]);
  }
}

// Transposes 16x16 floats: afterwards r[i] holds element i of each input row. (Masked
// forms for GCC 12, as above.)
inline void transpose16x16_ps(__m512 r[16]) {
  constexpr __mmask16 kAll = 0xffff;
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3.
  __m512 u[16];
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_shuffle_ps(kAll, t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_maskz_shuffle_ps(kAll, t[i], t[i + 2], 0xee);
    u[i + 2] = _mm512_maskz_shuffle_ps(kAll, t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_maskz_shuffle_ps(kAll, t[i + 1], t[i + 3], 0xee);
  }
  // Gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j] into column 4L + j.
  for (int j = 0; j < 4; ++j) {
    const __m512 x0 = _mm512_maskz_shuffle_f32x4(kAll, u[j], u[4 + j], 0x44);
    const __m512 x1 = _mm512_maskz_shuffle_f32x4(kAll, u[j], u[4 + j], 0xee);
    const __m512 y0 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + j], u[12 + j], 0x44);
    const __m512 y1 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + j], u[12 + j], 0xee);
    r[j] = _mm512_maskz_shuffle_f32x4(kAll, x0, y0, 0x88);
    r[4 + j] = _mm512_maskz_shuffle_f32x4(kAll, x0, y0, 0xdd);
    r[8 + j] = _mm512_maskz_shuffle_f32x4(kAll, x1, y1, 0x88);
    r[12 + j] = _mm512_maskz_shuffle_f32x4(kAll, x1, y1, 0xdd);
  }
}

// Writes acc (rows kLd floats apart, token t at column t) to y[t * ldy + r] for r < nr,
// t < nt, 16 rows by 16 tokens at a time. acc has a multiple of 16 rows.
inline void store_transposed(const float* acc, int64_t kLd, int64_t nr, int64_t nt, float* y,
                             int64_t ldy) {
  for (int64_t r = 0; r < nr; r += 16) {
    const __mmask16 rows =
        static_cast<__mmask16>(nr - r >= 16 ? 0xffff : (1u << static_cast<unsigned>(nr - r)) - 1u);
    for (int64_t t0 = 0; t0 < nt; t0 += 16) {
      __m512 m[16];
      for (int i = 0; i < 16; ++i) m[i] = _mm512_loadu_ps(acc + (r + i) * kLd + t0);
      transpose16x16_ps(m);
      const int64_t n = std::min<int64_t>(16, nt - t0);
      for (int64_t j = 0; j < n; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * ldy + r, rows, m[j]);
    }
  }
}

// Per-token sums of the int8 levels in v[0 .. n_groups) (each lane of v holds 4 levels of
// one token), as int32 lanes. Exact.
inline __m512i lane_sums_i8(const __m512i* v, int n_groups) {
  const __m512i ones8 = _mm512_set1_epi8(1);
  __m512i s = _mm512_setzero_si512();
  for (int g = 0; g < n_groups; ++g) s = _mm512_dpbusd_epi32(s, ones8, v[g]);
  return s;
}

// The AVX-512 side of the shared tile driver (gemm_tiles.h): 128 rows by 8 vectors of 16
// tokens, each row's next weight chunk prefetched, results stored 16 x 16 transposed.
struct Isa {
  static constexpr int kLanes = gemm::kLanes;
  static constexpr int kTileVecs = 8;  // 128 tokens
  static constexpr bool kPrefetch = true;

  static void store(const float* acc, int64_t ld, int64_t nr, int64_t nt, float* y, int64_t ldy) {
    store_transposed(acc, ld, nr, nt, y, ldy);
  }
};

// The gemm kernels of traits K (interface in gemm_tiles.h).
template <class K>
using Gemm = gemm_tiles::Gemm<Isa, K>;

}  // namespace qrun::kernels::avx512::gemm
