// Inline AVX2 helpers shared by the dot kernels (dot_*.cpp) and free for the gemm tiles:
// block unpacking (nibbles, high bits), exact int8 dot products to int32 lanes, and the
// horizontal sums in the order llama.cpp's AVX2 kernels use (its golden outputs depend on
// it). Integer helpers are exact within the ranges stated on each; nothing here rounds
// except the float horizontal sums, whose association order is spelled out.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace qrun::kernels::avx2 {

// ---- loads --------------------------------------------------------------------------

inline float fp16_load(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ---- block unpacking ----------------------------------------------------------------

// 16 bytes of packed nibbles -> 32 bytes in [0, 15]: bytes 0-15 are the low nibbles of
// qs[0..15], bytes 16-31 the high nibbles (the element order of Q4_0 and Q5_0 blocks).
inline __m256i unpack_nibbles32(const uint8_t* qs) {
  const __m128i q = load128(qs);
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// The low and high nibbles of 32 bytes, each as 32 bytes in [0, 15] (Q4_K/Q5_K/Q6_K).
inline __m256i low_nibbles(__m256i v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(15));
}
inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
}

// Spreads the 32 bits of `bits` over 32 bytes: byte i is 0xFF where bit i is set, else 0.
inline __m256i expand_bits32(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuf);
  // Every bit except bit (i mod 8) of byte i set: the byte is all ones iff that bit is.
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  return _mm256_cmpeq_epi8(_mm256_or_si256(v, others), _mm256_set1_epi64x(-1));
}

// ---- integer dot products -----------------------------------------------------------

// Unsigned u (bytes) times signed s (bytes), summed in groups of 4 adjacent bytes: int32
// lane k = sum_{j < 4} u[4k + j] * s[4k + j]. Exact while every adjacent pair of products
// fits int16 (u <= 127 covers any s; the quant levels used here stay far below).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Int16 pair sums of u * s (vpmaddubsw), for callers that scale them before widening.
inline __m256i pairs_u8s8(__m256i u, __m256i s) {
  return _mm256_maddubs_epi16(u, s);
}

// Signed x times signed y, in groups of 4 adjacent bytes as dot_u8s8 (llama.cpp's sign
// trick: |x| * (y with x's sign)). Exact for any x when y is in [-127, 127], which every
// activation quantizer guarantees (Q8_0 and Q8_K levels are never -128).
inline __m256i dot_s8s8(__m256i x, __m256i y) {
  return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// (q - offset) . s in groups of 4 bytes, for unsigned levels q and an offset (8 for Q4_0,
// 16 for Q5_0): q * s - offset * s per int16 pair, then widened. Exact for any s when
// q <= 31 and offset <= 16 (pairs stay within +-2 * 31 * 128).
inline __m256i dot_offset_u8s8(__m256i q, __m256i offset, __m256i s) {
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, s), _mm256_maddubs_epi16(offset, s));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Sum of the 8 int32 lanes (exact: callers keep the total within int32).
inline int32_t hsum_i32x8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// ---- float horizontal sums (llama.cpp's association order) --------------------------

// Sum of 4 floats as ((v0 + v2) + (v1 + v3)).
inline float hsum_f32x4(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// Sum of 8 floats: the two 128-bit halves added lane-wise, then hsum_f32x4, i.e.
// ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
inline float hsum_f32x8(__m256 v) {
  return hsum_f32x4(_mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v)));
}

// Reduction of four 8-lane accumulators: (a0 + a2) + (a1 + a3) lane-wise, then the halves
// added lane-wise and the 4 lanes summed with two vhaddps: (l0 + l1) + (l2 + l3).
inline float reduce_f32x8x4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

}  // namespace qrun::kernels::avx2
