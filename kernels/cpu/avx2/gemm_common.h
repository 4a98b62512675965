// Shared machinery of the AVX2 gemm kernels (gemm_*.cpp): a tile driver and helpers to
// pack activations "token-interleaved". A micro-kernel keeps 8 tokens in the 8 32-bit
// lanes of a vector: each group of 4 consecutive elements of a block is stored as
// [token 0: 4 levels] .. [token 7: 4 levels], so one vpmaddubsw of a broadcast 4-byte
// weight group against it gives 2 int16 partial sums per token, and the weight unpacking
// and scale decoding are shared by 8 tokens while each packed activation is shared by all
// rows of a micro-tile. Integer sums inside a block are exact; blocks are scaled and summed
// in float, so an output differs from vec_dot only by the rounding of that float sum.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/transpose.h"

namespace qrun::kernels::avx2::gemm {

inline constexpr int kLanes = 8;           // tokens per vector
inline constexpr int64_t kTileRows = 128;  // weight rows per driver tile
inline constexpr int kTileVecs = 16;       // token vectors per driver tile (128 tokens)

// The 4 bytes at p, broadcast to all 8 lanes (one vpbroadcastd from memory).
inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Pins v in a register at this point of the instruction stream. GCC otherwise reassociates
// chains of integer adds into trees, hoisting every product first and spilling them.
inline void pin(__m256i& v) {
  __asm__("" : "+x"(v));
}

using simd_shared::half_to_float;
using simd_shared::transpose8x8_epi32;

// Loads 32 bytes at `p` for each of the first n_valid tokens (rows[t] + offset) and zeros
// for the others, then transposes them: out[g] holds bytes 4g .. 4g + 3 of every token.
inline void gather_transpose(const uint8_t* const* rows, int n_valid, size_t offset,
                             __m256i out[8]) {
  for (int t = 0; t < kLanes; ++t) {
    out[t] = t < n_valid ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t] + offset))
                         : _mm256_setzero_si256();
  }
  transpose8x8_epi32(out);
}

// Per-token sums of the int8 levels in v[0 .. n_groups) (each lane of v holds 4 levels of
// one token), as int32 lanes. Exact: at most 256 levels of magnitude <= 128.
inline __m256i lane_sums_i8(const __m256i* v, int n_groups) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  __m256i s16 = _mm256_maddubs_epi16(ones8, v[0]);
  for (int g = 1; g < n_groups; ++g) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(ones8, v[g]));
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

// Calls K::tile<R> for R == rm (1 <= rm <= kMax).
template <class K, int kMax>
void tile_dispatch(int rm, const typename K::Wt* const* w, const typename K::Act* a, int kb,
                   float* acc, int64_t ld) {
  if constexpr (kMax >= 1) {
    if (rm == kMax) {
      K::template tile<kMax>(w, a, kb, acc, ld);
    } else {
      tile_dispatch<K, kMax - 1>(rm, w, a, kb, acc, ld);
    }
  }
}

// Runs a gemm through kernel traits K, which define
//   kBlockElems        elements per weight block
//   kChunk             blocks per K chunk (packed activations of a tile stay in cache)
//   kRows              rows per micro-tile
//   Act                one block of 8 packed tokens; Wt: one unpacked weight block
//   pack(rows, n_valid, block, Act*)       packs block `block` of 8 activation rows
//   unpack(row, block, Wt*)                unpacks block `block` of one weight row
//   tile<R>(const Wt* const w[R], const Act* a, int kb, float* acc, int64_t ld)
//     adds the dots of R unpacked rows (kb blocks each) with 8 packed tokens to
//     acc[r * ld + lane], r < R.
// y[t * ldy + r] = dot(w row r, act row t) for every r < n_rows, t < n_tokens.
template <class K>
void run(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
         size_t act_stride, int64_t n_tokens, float* y, int64_t ldy) {
  using Act = typename K::Act;
  using Wt = typename K::Wt;
  constexpr int kChunk = K::kChunk;
  constexpr int kR = K::kRows;
  constexpr int64_t kLd = kTileVecs * kLanes;
  const int64_t n_blocks = n / K::kBlockElems;

  alignas(64) Act abuf[kTileVecs][kChunk];
  alignas(64) Wt wbuf[kR][kChunk];
  alignas(64) float acc[kTileRows * kLd];
  const uint8_t* rows[kTileVecs * kLanes];

  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileVecs * kLanes) {
    const int64_t nt = std::min<int64_t>(kTileVecs * kLanes, n_tokens - t0);
    const int n_vecs = static_cast<int>((nt + kLanes - 1) / kLanes);
    for (int64_t t = 0; t < nt; ++t) rows[t] = act + static_cast<size_t>(t0 + t) * act_stride;

    for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
      const int64_t nr = std::min(kTileRows, n_rows - r0);
      std::fill(acc, acc + kTileRows * kLd, 0.0f);

      for (int64_t k0 = 0; k0 < n_blocks; k0 += kChunk) {
        const int kb = static_cast<int>(std::min<int64_t>(kChunk, n_blocks - k0));
        for (int v = 0; v < n_vecs; ++v) {
          const int valid = static_cast<int>(std::min<int64_t>(kLanes, nt - v * kLanes));
          for (int b = 0; b < kb; ++b) K::pack(rows + v * kLanes, valid, k0 + b, &abuf[v][b]);
        }
        for (int64_t r = 0; r < nr; r += kR) {
          const int rm = static_cast<int>(std::min<int64_t>(kR, nr - r));
          const Wt* wrows[kR];
          for (int i = 0; i < rm; ++i) {
            const uint8_t* row = w + static_cast<size_t>(r0 + r + i) * w_stride;
            for (int b = 0; b < kb; ++b) K::unpack(row, k0 + b, &wbuf[i][b]);
            wrows[i] = wbuf[i];
          }
          for (int v = 0; v < n_vecs; ++v) {
            float* a = acc + r * kLd + v * kLanes;
            tile_dispatch<K, kR>(rm, wrows, abuf[v], kb, a, kLd);
          }
        }
      }

      for (int64_t t = 0; t < nt; ++t) {
        float* yt = y + (t0 + t) * ldy + r0;
        for (int64_t r = 0; r < nr; ++r) yt[r] = acc[r * kLd + t];
      }
    }
  }
}

}  // namespace qrun::kernels::avx2::gemm
