// The AVX-512 (VNNI) dot kernels registered by dot_registry.cpp. Each returns the same
// bits as its AVX2 twin (kernels/cpu/avx2/dot_*.cpp): the integer block sums are formed
// with vpdpbusd / vpdpwssd instead of vpmaddubsw + vpmaddwd + vpaddd, but they are exact
// either way, and the float steps are the same ones in the same order. Only files in
// avx512/ include this.
#pragma once

// GCC 12's AVX-512 intrinsics start from a self-initialised _mm512_undefined_*() and trip
// -Wmaybe-uninitialized once inlined (GCC bug 105593); the warning is wrong here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qrun::kernels::avx512 {

// dot_legacy.cpp
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);

// gemv_repacked.cpp: GemvRepackedFn over the x16 layouts of kernels/cpu/repack.h.
void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_iq4_nl_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                     float* y);
void gemv_q5_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q4_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q5_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);

// gemv_repacked_rows.cpp: GemvRepackedRowsFn over the same layouts.
void gemv_q4_0_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy);
void gemv_iq4_nl_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                          size_t act_stride, int64_t n_act, float* y, int64_t ldy);
void gemv_q4_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy);
void gemv_q5_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy);
void gemv_q6_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy);

// dot_kquants.cpp
float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y);

// ---- helpers shared by the dot files (this namespace only: no AVX-512 code can reach
// an AVX2 caller through an inline function of the same name) ----------------------------

inline float fp16_load(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline __m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}

// Two 32-byte rows as one 512-bit vector (a in the low half).
inline __m512i join256(__m256i a, __m256i b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// Sum of 4 floats as ((v0 + v2) + (v1 + v3)); of 8 floats, the halves added first.
inline float hsum_f32x4(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

inline float hsum_f32x8(__m256 v) {
  return hsum_f32x4(_mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v)));
}

// The two 8-lane halves of v added lane-wise (exact for int32 sums within range).
inline __m256i fold512(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

}  // namespace qrun::kernels::avx512
