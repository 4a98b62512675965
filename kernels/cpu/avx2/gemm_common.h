// Shared machinery of the AVX2 gemm kernels (gemm_*.cpp): the ISA side of the tile driver
// (gemm_tiles.h) over activations packed once per matmul, and helpers to pack them
// "token-interleaved". A micro-kernel keeps 8 tokens in the 8 32-bit lanes of a vector: each group
// of 4 consecutive elements of a block is stored as [token 0: 4 levels] .. [token 7: 4 levels], so
// one vpmaddubsw of a broadcast 4-byte weight group against it gives 2 int16 partial sums per
// token, and the weight unpacking and scale decoding are shared by 8 tokens while each packed
// activation is shared by all rows of a micro-tile. Integer sums inside a block are exact; blocks
// are scaled and summed in float, so an output differs from vec_dot only by the rounding of that
// float sum.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/transpose.h"
#include "kernels/cpu/gemm_tiles.h"

namespace qrun::kernels::avx2::gemm {

inline constexpr int kLanes = 8;  // tokens per vector

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

// The AVX2 side of the shared tile driver (gemm_tiles.h): 128 rows by 16 vectors of 8
// tokens, no software prefetch, results copied out token by token.
struct Isa {
  static constexpr int kLanes = gemm::kLanes;
  static constexpr int kTileVecs = 16;  // 128 tokens
  static constexpr bool kPrefetch = false;

  static void store(const float* acc, int64_t ld, int64_t nr, int64_t nt, float* y, int64_t ldy) {
    for (int64_t t = 0; t < nt; ++t) {
      float* yt = y + t * ldy;
      for (int64_t r = 0; r < nr; ++r) yt[r] = acc[r * ld + t];
    }
  }
};

// The gemm kernels of traits K (interface in gemm_tiles.h; AVX2 micro-kernels take one vector).
template <class K>
using Gemm = gemm_tiles::Gemm<Isa, K>;

}  // namespace qrun::kernels::avx2::gemm
