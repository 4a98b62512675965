// Shared machinery of the AVX-512 VNNI gemm kernels (avx512/gemm_*.cpp): the tile driver
// over activations packed once per matmul, and helpers to pack them "token-interleaved"
// for 16 tokens: each group of 4 consecutive elements of a block is stored as
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
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx512::gemm {

inline constexpr int kLanes = 16;          // tokens per vector
inline constexpr int64_t kTileRows = 128;  // weight rows per driver tile
inline constexpr int kTileVecs = 8;        // token vectors per driver tile (128 tokens)

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

// Calls K::tile<R, V> for R == rm (1 <= rm <= kMax).
template <class K, int V, int kMax>
void tile_dispatch(int rm, const typename K::Wt* const* w, const typename K::Act* a,
                   int64_t a_stride, int kb, float* acc, int64_t ld) {
  if constexpr (kMax >= 1) {
    if (rm == kMax) {
      K::template tile<kMax, V>(w, a, a_stride, kb, acc, ld);
    } else {
      tile_dispatch<K, V, kMax - 1>(rm, w, a, a_stride, kb, acc, ld);
    }
  }
}

// A gemm through kernel traits K, which define
//   kBlockElems        elements per weight block
//   kChunk             blocks per K chunk (a chunk of weight rows is unpacked at a time)
//   kRows              rows per micro-tile
//   kVecs              token vectors per micro-tile (1 or 2)
//   Act                one block of 16 packed tokens; Wt: one unpacked weight block
//   pack(rows, n_valid, block, Act*)       packs block `block` of 16 activation rows
//   unpack(row, block, Wt*)                unpacks block `block` of one weight row
//   tile<R, V>(const Wt* const w[R], const Act* a, int64_t a_stride, int kb, float* acc,
//              int64_t ld)
//     adds the dots of R unpacked rows (kb blocks each) with V vectors of 16 packed
//     tokens (vector v's blocks at a + v * a_stride) to acc[r * ld + 16 * v + lane].
// A packed group (GemmKernels in kernel_table.h) is one vector of 16 tokens: the Act
// blocks of the whole row, in block order.
template <class K>
struct Gemm {
  using Act = typename K::Act;
  using Wt = typename K::Wt;
  static_assert(sizeof(Act) % 64 == 0, "packed groups stay 64-byte aligned");

  static size_t group_bytes(int64_t n) {
    return sizeof(Act) * static_cast<size_t>(n / K::kBlockElems);
  }

  static void pack_act(int64_t n, const uint8_t* act, size_t act_stride, int64_t n_valid,
                       uint8_t* dst) {
    const uint8_t* rows[kLanes];
    for (int64_t t = 0; t < n_valid; ++t) rows[t] = act + static_cast<size_t>(t) * act_stride;
    auto* out = reinterpret_cast<Act*>(dst);
    const int64_t n_blocks = n / K::kBlockElems;
    for (int64_t b = 0; b < n_blocks; ++b) K::pack(rows, static_cast<int>(n_valid), b, &out[b]);
  }

  // Tiles of kTileRows rows by kTileVecs vectors: each chunk of kChunk blocks of a micro-tile
  // of rows is unpacked once and meets every vector of the tile, whose packed blocks of
  // that chunk stay in cache (L2) across the micro-tiles.
  static void gemm(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                   const uint8_t* packed, int64_t n_tokens, float* y, int64_t ldy) {
    constexpr int kChunk = K::kChunk;
    constexpr int kR = K::kRows;
    constexpr int64_t kLd = kTileVecs * kLanes;
    const int64_t n_blocks = n / K::kBlockElems;
    const size_t block_bytes = n_blocks > 0 ? w_stride / static_cast<size_t>(n_blocks) : 0;
    const size_t prefetch_bytes = block_bytes * kChunk;
    const auto* act = reinterpret_cast<const Act*>(packed);

    alignas(64) Wt wbuf[kR][kChunk];
    alignas(64) float acc[kTileRows * kLd];

    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileVecs * kLanes) {
      const int64_t nt = std::min<int64_t>(kTileVecs * kLanes, n_tokens - t0);
      const int n_vecs = static_cast<int>((nt + kLanes - 1) / kLanes);
      const Act* tile_act = act + (t0 / kLanes) * n_blocks;

      for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
        const int64_t nr = std::min(kTileRows, n_rows - r0);
        std::fill(acc, acc + kTileRows * kLd, 0.0f);

        for (int64_t k0 = 0; k0 < n_blocks; k0 += kChunk) {
          const int kb = static_cast<int>(std::min<int64_t>(kChunk, n_blocks - k0));
          for (int64_t r = 0; r < nr; r += kR) {
            const int rm = static_cast<int>(std::min<int64_t>(kR, nr - r));
            const Wt* wrows[kR];
            for (int i = 0; i < rm; ++i) {
              const uint8_t* row = w + static_cast<size_t>(r0 + r + i) * w_stride;
              for (int b = 0; b < kb; ++b) K::unpack(row, k0 + b, &wbuf[i][b]);
              // This row's next chunk, which the hardware prefetchers miss as rows alternate.
              const size_t next = static_cast<size_t>(k0 + kb) * block_bytes;
              for (size_t o = 0; o < prefetch_bytes && next + o < w_stride; o += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(row + next + o), _MM_HINT_T0);
              }
              wrows[i] = wbuf[i];
            }
            const Act* a = tile_act + k0;
            float* out = acc + r * kLd;
            int v = 0;
            if constexpr (K::kVecs == 2) {
              for (; v + 2 <= n_vecs; v += 2) {
                tile_dispatch<K, 2, kR>(rm, wrows, a + v * n_blocks, n_blocks, kb, out + v * kLanes,
                                        kLd);
              }
            }
            for (; v < n_vecs; ++v) {
              tile_dispatch<K, 1, kR>(rm, wrows, a + v * n_blocks, n_blocks, kb, out + v * kLanes,
                                      kLd);
            }
          }
        }

        store_transposed(acc, kLd, nr, nt, y + t0 * ldy + r0, ldy);
      }
    }
  }

  static GemmKernels kernels() {
    GemmKernels k;
    k.group_tokens = kLanes;
    k.group_bytes = group_bytes;
    k.pack_act = pack_act;
    k.gemm = gemm;
    return k;
  }
};

}  // namespace qrun::kernels::avx512::gemm
