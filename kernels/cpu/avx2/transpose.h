// Small AVX2 helpers shared by the AVX2 and AVX-512 gemm drivers (avx2/ and avx512/
// gemm_common.h): F16 scale loads and an 8x8 transpose of 32-bit lanes. AVX2 intrinsics only
// (AVX-512 builds enable AVX2 too). The unnamed namespace gives each including file its own
// copy, compiled with that file's flags, so no AVX-512 code can stand in for the AVX2 copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qrun::kernels::simd_shared {
namespace {

inline float half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

// Transposes 8x8 32-bit elements: afterwards r[i] holds element i of each input row.
inline void transpose8x8_epi32(__m256i r[8]) {
  __m256i t[8];
  __m256i u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

}  // namespace
}  // namespace qrun::kernels::simd_shared
