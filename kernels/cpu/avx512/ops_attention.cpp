// AVX-512 attention for one token over a KV cache: avx2/ops_attention.cpp with 16-lane
// vectors, so a 64- or 128-element head is 4 or 8 vectors per dot product and per V
// update. The query heads of one KV head walk the cache rows together (each K/V row
// loaded and, for F16, widened once per group), one online softmax per head.
// F16 cache: as llama.cpp's AVX-512 flash attention steps: q and the accumulator rounded
// to F16, q.k as 4 x 16 float lanes over 64-element steps ((x0 + x2) + (x1 + x3), then a
// lane reduction), the tail in double, V added with an FMA. F32 cache: float throughout.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx512/avx512_ops.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::avx512 {
namespace {

constexpr int64_t kGroup = 8;  // query heads walked together; larger groups go in chunks

// The maskz forms with a full mask: GCC 12 warns (maybe-uninitialized) on the plain
// intrinsics, which pass an undefined vector as the merge source.
constexpr __mmask16 kAll = 0xffff;

inline __m512 widen_f16(__m256i h) {
  return _mm512_maskz_cvtph_ps(kAll, h);
}

inline __m512 round_f16(__m512 x) {
  return widen_f16(_mm512_maskz_cvtps_ph(kAll, x, _MM_FROUND_TO_NEAREST_INT));
}

// Sum of the 16 lanes: the 256-bit halves, the 128-bit halves, then two horizontal adds.
inline float reduce_add(__m512 x) {
  const __m512d xd = _mm512_castps_pd(x);
  const __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, xd, 0)),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, xd, 1)));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// q.k over n floats: 64-element steps in four accumulators, the rest summed in double.
inline float dot_f32(const float* q, const float* k, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 32), _mm512_loadu_ps(k + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 48), _mm512_loadu_ps(k + i + 48), a3);
  }
  double sum = reduce_add(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

inline float round_f16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

inline void widen_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i,
                     widen_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// acc = acc * ms (when ms != 1), then acc += v * vs; with kF16 each result is rounded to
// F16. The tail is one masked vector.
template <bool kF16>
inline void rescale_add(float* acc, const float* v, int64_t n, float ms, float vs) {
  const __m512 vms = _mm512_set1_ps(ms);
  const __m512 vvs = _mm512_set1_ps(vs);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 a = _mm512_maskz_loadu_ps(mask, acc + i);
    if (ms != 1.0f) {
      a = _mm512_mul_ps(a, vms);
      if constexpr (kF16) a = round_f16(a);
    }
    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, v + i), vvs, a);
    if constexpr (kF16) a = round_f16(a);
    _mm512_mask_storeu_ps(acc + i, mask, a);
  }
}

template <class Elem>
void attend_group(const float* q, int64_t q_stride, int64_t n_q, const Elem* k, const Elem* v,
                  int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                  int64_t out_stride) {
  constexpr bool kF16 = sizeof(Elem) == 2;
  alignas(64) float qs[kGroup][ref::kMaxHeadDim];
  alignas(64) float acc[kGroup][ref::kMaxHeadDim];
  alignas(64) float kf[ref::kMaxHeadDim];
  alignas(64) float vf[ref::kMaxHeadDim];
  float m[kGroup];
  float l[kGroup];
  for (int64_t h = 0; h < n_q; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const float x = q[h * q_stride + d];
      qs[h][d] = kF16 ? round_f16(x) : x;
      acc[h][d] = 0.0f;
    }
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  for (int64_t j = 0; j < n_kv; ++j) {
    const float* kr;
    const float* vr;
    if constexpr (kF16) {
      widen_f16(k + j * kv_stride, kf, head_dim);
      widen_f16(v + j * kv_stride, vf, head_dim);
      kr = kf;
      vr = vf;
    } else {
      kr = k + j * kv_stride;
      vr = v + j * kv_stride;
    }
    for (int64_t h = 0; h < n_q; ++h) {
      const float s = dot_f32(qs[h], kr, head_dim) * scale;
      float ms = 1.0f;
      float vs = 1.0f;
      if (s > m[h]) {
        ms = std::exp(m[h] - s);
        m[h] = s;
      } else {
        vs = std::exp(s - m[h]);
      }
      rescale_add<kF16>(acc[h], vr, head_dim, ms, vs);
      l[h] = kF16 ? std::fma(l[h], ms, vs) : l[h] * ms + vs;
    }
  }
  for (int64_t h = 0; h < n_q; ++h) {
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < head_dim; ++d) out[h * out_stride + d] = acc[h][d] * inv;
  }
}

template <class Elem>
void attend(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
            int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
            int64_t out_stride) {
  for (int64_t h0 = 0; h0 < n_q; h0 += kGroup) {
    const int64_t n = n_q - h0 < kGroup ? n_q - h0 : kGroup;
    attend_group(q + h0 * q_stride, q_stride, n, static_cast<const Elem*>(k),
                 static_cast<const Elem*>(v), kv_stride, n_kv, head_dim, scale,
                 out + h0 * out_stride, out_stride);
  }
}

void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
                int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                int64_t out_stride) {
  attend<float>(q, q_stride, n_q, k, v, kv_stride, n_kv, head_dim, scale, out, out_stride);
}

void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const void* k, const void* v,
                int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                int64_t out_stride) {
  attend<uint16_t>(q, q_stride, n_q, k, v, kv_stride, n_kv, head_dim, scale, out, out_stride);
}

}  // namespace

void fill_op_kernels(CpuKernels& k) {
  k.attend_f32 = attend_f32;
  k.attend_f16 = attend_f16;
}

}  // namespace qrun::kernels::avx512
