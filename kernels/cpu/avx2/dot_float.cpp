// AVX2 dot products of the plain float types (F32, F16, BF16, each against a row of its own
// type) and the F16/BF16 activation converters (bit-identical to the reference ones,
// NaNs included). Dots widen to F32 and accumulate in float in llama.cpp's AVX2 orders
// (below), which its golden outputs depend on. Unlike the reference (products summed in
// double), every accumulator lane rounds: |error| <= about (n / 8 + 8) * 2^-24 *
// sum |x_i y_i|.
#include <cstring>

#include "ggml-like/fp16.h"
#include "kernels/cpu/avx2/dot_common.h"
#include "kernels/cpu/avx2/dot_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

struct LoadF32 {
  static __m256 load(const void* p, int64_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
  static float scalar(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
};

struct LoadF16 {
  static __m256 load(const void* p, int64_t i) {
    return _mm256_cvtph_ps(load128(static_cast<const uint16_t*>(p) + i));
  }
  static float scalar(const void* p, int64_t i) {
    return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]);
  }
};

struct LoadBF16 {
  static __m256 load(const void* p, int64_t i) {
    const __m256i wide = _mm256_cvtepu16_epi32(load128(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static float scalar(const void* p, int64_t i) {
    return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]);
  }
};

// Rows of whole 8-element groups: one 8-lane FMA chain in element order, then
// hsum_f32x8 (the order of llama.cpp's tinyBLAS, which multiplies its F32/F16/BF16
// matrices whenever the row length is a multiple of 8).
template <class L>
float dot_chain8(int64_t n, const void* x, const void* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(L::load(x, i), L::load(y, i), acc);
  return hsum_f32x8(acc);
}

// Other lengths: four 8-lane accumulators over 32-element steps, reduce_f32x8x4, then the
// remaining products added one by one in float (llama.cpp's vec_dot order).
template <class L>
float dot_float(int64_t n, const void* x, const void* y) {
  if (n % 8 == 0) return dot_chain8<L>(n, x, y);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(L::load(x, i + 8 * k), L::load(y, i + 8 * k), acc[k]);
    }
  }
  float sum = reduce_f32x8x4(acc[0], acc[1], acc[2], acc[3]);
  for (; i < n; ++i) sum += L::scalar(x, i) * L::scalar(y, i);
  return sum;
}

}  // namespace

float vec_dot_f32_f32(int64_t n, const void* x, const void* y) {
  return dot_float<LoadF32>(n, x, y);
}

float vec_dot_f16_f16(int64_t n, const void* x, const void* y) {
  return dot_float<LoadF16>(n, x, y);
}

float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y) {
  return dot_float<LoadBF16>(n, x, y);
}

// vcvtps2ph with round-to-nearest-even: what fp32_to_fp16 reproduces bit for bit.
void from_float_f16(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = fp32_to_fp16(src[i]);
}

// fp32_to_bf16 on 8 lanes: x + 0x7fff + (bit 16 of x), high half kept; NaNs (|x| above
// the infinity pattern) are kept with the quiet bit (bit 6 of the result) set instead.
void from_float_bf16(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint16_t*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(64);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, odd)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
    const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    // Values are in [0, 65535], so the unsigned saturating pack keeps them.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = fp32_to_bf16(src[i]);
}

}  // namespace qrun::kernels::avx2
