// AVX2 attention for one token over a KV cache: the n_q query heads that share a KV head
// walk the cache rows together, so each K and V row is loaded (and, for F16, widened) once
// per group and then reused from L1 for every head. One online softmax per head (running
// max m, sum l, accumulator rescaled when m grows), as in ref_attention.cpp.
// F16 cache: the steps of llama.cpp's AVX2 flash attention, like the reference: q and the
// accumulator rounded to F16, q.k as 4 x 8 float lanes over 32-element steps (exact F16
// products, float sums, reduced pairwise), the tail in double, V added with an FMA.
// F32 cache: float q.k in 4 x 8 lanes, float accumulator.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx2/ops_kernels.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

constexpr int64_t kGroup = 8;  // query heads walked together; larger groups go in chunks

// x[0] + x[1] + ... of four 8-lane accumulators: (x0 + x2) + (x1 + x3), then the two
// 128-bit halves, then two horizontal adds (llama.cpp's reduction order).
inline float reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// q.k over n floats: 32-element steps in four accumulators, the rest summed in double.
inline float dot_f32(const float* q, const float* k, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(k + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(k + i + 24), a3);
  }
  double sum = reduce4(a0, a1, a2, a3);
  for (; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

inline __m256 round_f16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
inline float round_f16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

// n F16 values widened to float.
inline void widen_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// acc = acc * ms (when ms != 1), then acc += v * vs, over n floats; with kF16 each result
// is rounded to F16 (the accumulator of llama.cpp's F16 flash attention).
template <bool kF16>
inline void rescale_add(float* acc, const float* v, int64_t n, float ms, float vs) {
  const __m256 vms = _mm256_set1_ps(ms);
  const __m256 vvs = _mm256_set1_ps(vs);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(acc + i);
    if (ms != 1.0f) {
      a = _mm256_mul_ps(a, vms);
      if constexpr (kF16) a = round_f16(a);
    }
    a = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vvs, a);
    if constexpr (kF16) a = round_f16(a);
    _mm256_storeu_ps(acc + i, a);
  }
  for (; i < n; ++i) {
    float a = acc[i];
    if (ms != 1.0f) {
      a *= ms;
      if constexpr (kF16) a = round_f16(a);
    }
    a = std::fma(v[i], vs, a);
    if constexpr (kF16) a = round_f16(a);
    acc[i] = a;
  }
}

// Up to kGroup heads over all n_kv rows. Elem is float (F32 cache) or uint16_t (F16).
template <class Elem>
void attend_group(const float* q, int64_t q_stride, int64_t n_q, const Elem* k, const Elem* v,
                  int64_t kv_stride, int64_t n_kv, int64_t head_dim, float scale, float* out,
                  int64_t out_stride) {
  constexpr bool kF16 = sizeof(Elem) == 2;
  alignas(32) float qs[kGroup][ref::kMaxHeadDim];
  alignas(32) float acc[kGroup][ref::kMaxHeadDim];
  alignas(32) float kf[ref::kMaxHeadDim];
  alignas(32) float vf[ref::kMaxHeadDim];
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
      float ms = 1.0f;  // rescales the old accumulator when the max grows
      float vs = 1.0f;  // exp(s - m), the weight of this row
      if (s > m[h]) {
        ms = std::exp(m[h] - s);  // 0 on the first row (m = -inf)
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

}  // namespace

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

}  // namespace qrun::kernels::avx2
