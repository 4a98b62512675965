// The weight-level unpacking of Q4_K and Q5_K super-blocks shared by the AVX2 and AVX-512
// gemm kernels (avx2/ and avx512/ gemm_kquants.cpp): 256 unsigned levels, 0..15 or 0..31,
// in element order; and Q3_K's scales, shared by the AVX2 and AVX-512 dots. AVX2 intrinsics
// only (AVX-512 builds enable AVX2 too). Each function has internal linkage, so that every
// file gets a copy built with its own flags: the level unpacking is a template on the
// caller's unpacked-block type, which lives in an anonymous namespace of that ISA's file,
// and q3_k_scales sits in an anonymous namespace here.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ggml-like/quants.h"

namespace qrun::kernels::kquant_levels {

// dst->q[0 .. 256): the Q4_K levels of b; each 32-byte group of qs holds elements
// 64g .. 64g + 31 in its low nibbles and 64g + 32 .. 64g + 63 in its high nibbles.
template <class Wt>
inline void unpack_q4_k(const BlockQ4_K& b, Wt* dst) {
  const __m256i m4 = _mm256_set1_epi8(15);
  for (int g = 0; g < 4; ++g) {
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * g));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 64 * g), _mm256_and_si256(qs, m4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 64 * g + 32),
                        _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4));
  }
}

// dst->q[0 .. 256): the Q5_K levels of b: the Q4_K nibbles plus bit 2g (low half) or
// 2g + 1 (high half) of qh as bit 4.
template <class Wt>
inline void unpack_q5_k(const BlockQ5_K& b, Wt* dst) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  for (int g = 0; g < 4; ++g) {
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * g));
    const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g + 1)), one);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(qs, m4), _mm256_slli_epi16(h0, 4));
    const __m256i hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m4), _mm256_slli_epi16(h1, 4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 64 * g), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q + 64 * g + 32), hi);
  }
}

namespace {

// The sixteen 6-bit Q3_K scales sc - 32 as int8, in sub-block order (q3_k_scale's layout
// decoded with 32-bit masks: low nibbles from bytes 0-7, high pairs from bytes 8-11).
inline __m128i q3_k_scales(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof(w));
  const uint32_t low4 = 0x0f0f0f0fu;
  const uint32_t low2 = 0x03030303u;
  // Built in registers (vmovd/vpinsrd): four 32-bit stores read back by one 128-bit load
  // would miss store forwarding on every super-block.
  const __m128i sc = _mm_setr_epi32(
      static_cast<int32_t>((w[0] & low4) | ((w[2] & low2) << 4)),                 // sc[0..3]
      static_cast<int32_t>((w[1] & low4) | (((w[2] >> 2) & low2) << 4)),          // sc[4..7]
      static_cast<int32_t>(((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4)),   // sc[8..11]
      static_cast<int32_t>(((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4)));  // sc[12..15]
  return _mm_sub_epi8(sc, _mm_set1_epi8(32));
}

}  // namespace

}  // namespace qrun::kernels::kquant_levels
