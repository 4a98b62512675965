// NEON row kernels: RMS norm, residual add, SwiGLU and F32 -> F16 stores.
//   rms_norm_row: squares formed in float and summed in double (two float64x2 lanes pairs
//     instead of the reference's single running sum, so the float mean may differ from the
//     reference's in its last bit in rare cases); then y = (x * scale) * w exactly as the
//     reference.
//   add: exact. to_f16: bit-identical to fp32_to_fp16.
//   swiglu: g / (1 + exp(-g)) * up with a vector exp of at most ~2 ulp error (below).
#include <arm_neon.h>

#include <cmath>

#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

// e^x for float lanes: n = round(x / ln 2) and r = x - n ln 2 (ln 2 split in a short high
// part, so n * ln2_hi is exact, and a low part), |r| <= ln 2 / 2; e^r by its degree-7
// Taylor polynomial (truncation error < 1e-8 relative); 2^n applied as two factors 2^(n/2)
// so that n in [-150, 128] neither overflows early nor drops subnormals. Inputs are
// clamped to [-104, 89], where e^x is 0 and inf in float; NaN stays NaN.
float32x4_t exp_f32(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t ni = vcvtq_s32_f32(n);
  const int32x4_t n1 = vshrq_n_s32(ni, 1);
  const int32x4_t n2 = vsubq_s32(ni, n1);
  const int32x4_t bias = vdupq_n_s32(127);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
  return vmulq_f32(vmulq_f32(p, s1), s2);
}

float32x4_t swiglu_f32(float32x4_t g, float32x4_t up) {
  const float32x4_t e = exp_f32(vnegq_f32(g));
  return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), up);
}

}  // namespace

void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  float64x2_t s0 = vdupq_n_f64(0.0);
  float64x2_t s1 = vdupq_n_f64(0.0);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const float32x4_t sq = vmulq_f32(v, v);
    s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(sq)));
    s1 = vaddq_f64(s1, vcvt_high_f64_f32(sq));
  }
  double sum = vaddvq_f64(vaddq_f64(s0, s1));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const float32x4_t vs = vdupq_n_f32(scale);
  for (i = 0; i + 4 <= n; i += 4) {
    vst1q_f32(y + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vs), vld1q_f32(w + i)));
  }
  for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void add(const float* a, const float* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, swiglu_f32(vld1q_f32(gate + i), vld1q_f32(up + i)));
  if (i < n) {  // the last 1-3 elements through the same vector code
    float g[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float o[4];
    for (int64_t j = i; j < n; ++j) {
      g[j - i] = gate[j];
      u[j - i] = up[j];
    }
    vst1q_f32(o, swiglu_f32(vld1q_f32(g), vld1q_f32(u)));
    for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
  }
}

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  from_float_f16(src, dst, n);
}

}  // namespace qrun::kernels::neon
