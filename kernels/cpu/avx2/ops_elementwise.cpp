// AVX2 row kernels for RMS norm, the SwiGLU gate, the residual add and F32 -> F16 stores.
// rms_norm_row squares in float and sums in double (like the reference; only the order of
// the double sums differs), then scales exactly as the reference does; add and to_f16
// are bit-exact. swiglu uses a polynomial exp (relative error below 2e-7 on the clamped
// range), so it differs from the reference by a few float ulps, for every element alike.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2/ops_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

// e^x for 8 floats: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact
// product), e^r by a degree-6 polynomial (Cephes' expf coefficients), 2^n put into the
// exponent bits. x is clamped to +-88.376 so that 2^n stays a normal float; below that
// the result is 0 or tiny, above it about 2.4e38 instead of inf.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                    _mm256_set1_ps(88.3762626647949f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 8 lanes of x*x widened to double and added to two 4-lane sums.
inline void add_squares(__m256 x, __m256d& lo, __m256d& hi) {
  const __m256 sq = _mm256_mul_ps(x, x);
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
}

// silu(g) * u for 8 floats.
inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

}  // namespace

void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    add_squares(_mm256_loadu_ps(x + i), s0, s1);
    add_squares(_mm256_loadu_ps(x + i + 8), s2, s3);
  }
  for (; i + 8 <= n; i += 8) add_squares(_mm256_loadu_ps(x + i), s0, s1);
  const __m256d s = _mm256_add_pd(_mm256_add_pd(s0, s2), _mm256_add_pd(s1, s3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(t, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

// The last 1-7 elements go through the same vector code, so that an element's result does
// not depend on where it lies: the rows of a batch (n_tokens rows of n_ff) are then each the
// row computed alone, whatever n_ff is, and so are the chunks of the thread pool.
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const auto rest = static_cast<size_t>(n - i);
    alignas(32) float g[8] = {};
    alignas(32) float u[8] = {};
    alignas(32) float o[8];
    std::memcpy(g, gate + i, rest * sizeof(float));
    std::memcpy(u, up + i, rest * sizeof(float));
    _mm256_store_ps(o, swiglu8(_mm256_load_ps(g), _mm256_load_ps(u)));
    std::memcpy(out + i, o, rest * sizeof(float));
  }
}

void add(const float* a, const float* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace qrun::kernels::avx2
