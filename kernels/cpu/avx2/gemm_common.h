// Shared machinery of the AVX2 gemm kernels (gemm_*.cpp): a tile driver over activations
// packed once per matmul and helpers to pack them "token-interleaved". A micro-kernel keeps 8
// tokens in the 8 32-bit lanes of a vector: each group of 4 consecutive elements of a block is
// stored as [token 0: 4 levels] .. [token 7: 4 levels], so one vpmaddubsw of a broadcast 4-byte
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
#include "kernels/cpu/kernel_table.h"

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

// A gemm through kernel traits K, which define
//   kBlockElems        elements per weight block
//   kChunk             blocks per K chunk (a chunk of weight rows is unpacked at a time)
//   kRows              rows per micro-tile
//   Act                one block of 8 packed tokens; Wt: one unpacked weight block
//   pack(rows, n_valid, block, Act*)       packs block `block` of 8 activation rows
//   unpack(row, block, Wt*)                unpacks block `block` of one weight row
//   tile<R>(const Wt* const w[R], const Act* a, int kb, float* acc, int64_t ld)
//     adds the dots of R unpacked rows (kb blocks each) with 8 packed tokens to
//     acc[r * ld + lane], r < R.
// A packed group (GemmKernels in kernel_table.h) is one vector of 8 tokens: the Act blocks
// of the whole row, in block order.
template <class K>
struct Gemm {
  using Act = typename K::Act;
  using Wt = typename K::Wt;
  static_assert(sizeof(Act) % 32 == 0, "packed blocks stay 32-byte aligned");

  // Rounded up to 64 bytes, the alignment GemmKernels promises for every group.
  static size_t group_bytes(int64_t n) {
    return (sizeof(Act) * static_cast<size_t>(n / K::kBlockElems) + 63) & ~size_t{63};
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
  // of rows is unpacked once and meets every vector of the tile.
  static void gemm(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                   const uint8_t* packed, int64_t n_tokens, float* y, int64_t ldy) {
    constexpr int kChunk = K::kChunk;
    constexpr int kR = K::kRows;
    constexpr int64_t kLd = kTileVecs * kLanes;
    const int64_t n_blocks = n / K::kBlockElems;
    const size_t group = group_bytes(n);

    alignas(64) Wt wbuf[kR][kChunk];
    alignas(64) float acc[kTileRows * kLd];

    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileVecs * kLanes) {
      const int64_t nt = std::min<int64_t>(kTileVecs * kLanes, n_tokens - t0);
      const int n_vecs = static_cast<int>((nt + kLanes - 1) / kLanes);
      const uint8_t* tile_act = packed + static_cast<size_t>(t0 / kLanes) * group;

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
              wrows[i] = wbuf[i];
            }
            for (int v = 0; v < n_vecs; ++v) {
              const auto* a =
                  reinterpret_cast<const Act*>(tile_act + static_cast<size_t>(v) * group);
              tile_dispatch<K, kR>(rm, wrows, a + k0, kb, acc + r * kLd + v * kLanes, kLd);
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

  static GemmKernels kernels() {
    GemmKernels k;
    k.group_tokens = kLanes;
    k.group_bytes = group_bytes;
    k.pack_act = pack_act;
    k.gemm = gemm;
    return k;
  }
};

}  // namespace qrun::kernels::avx2::gemm
