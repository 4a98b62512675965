// NEON dot products of float rows (F32, F16, BF16 against activations of their own type)
// and the F32 -> F16 / BF16 activation conversions. Products are accumulated with FMAs in
// 16 float lanes over chunks of at most 256 elements, and the chunk sums in double (the
// references sum float products in double; F16 and BF16 products are exact in float), so
// the error stays far below the 1e-5 * sum |x_i y_i| the tests allow at any row length.
// Conversions round to nearest even and keep NaNs quiet, bit for bit as ggml-like/fp16.h.
#include <arm_neon.h>

#include "ggml-like/fp16.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

constexpr int64_t kChunk = 256;

inline float32x4_t load_f32(const float* p) {
  return vld1q_f32(p);
}

// 8 halves or bfloat16s at p as two float32x4.
inline void load_f16x8(const uint16_t* p, float32x4_t* lo, float32x4_t* hi) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
  *lo = vcvt_f32_f16(vget_low_f16(h));
  *hi = vcvt_high_f32_f16(h);
}
inline void load_bf16x8(const uint16_t* p, float32x4_t* lo, float32x4_t* hi) {
  const uint16x8_t h = vld1q_u16(p);
  *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
  *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

// sum x[i] * y[i] over whole groups of 16 elements, with Load8 turning 8 elements of a
// row into two float32x4; the rest of the row (n mod 16 elements) is left to the caller.
template <class T, void (*kLoad8)(const T*, float32x4_t*, float32x4_t*)>
double dot_groups(int64_t n, const T* x, const T* y) {
  float64x2_t total = vdupq_n_f64(0.0);
  const int64_t n16 = n - n % 16;
  for (int64_t c = 0; c < n16; c += kChunk) {
    const int64_t end = c + kChunk < n16 ? c + kChunk : n16;
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                          vdupq_n_f32(0.0f)};
    for (int64_t i = c; i < end; i += 16) {
      for (int h = 0; h < 2; ++h) {
        float32x4_t x0, x1, y0, y1;
        kLoad8(x + i + 8 * h, &x0, &x1);
        kLoad8(y + i + 8 * h, &y0, &y1);
        acc[2 * h] = vfmaq_f32(acc[2 * h], x0, y0);
        acc[2 * h + 1] = vfmaq_f32(acc[2 * h + 1], x1, y1);
      }
    }
    const float32x4_t s = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
    total = vaddq_f64(total, vcvt_f64_f32(vget_low_f32(s)));
    total = vaddq_f64(total, vcvt_high_f64_f32(s));
  }
  return vaddvq_f64(total);
}

inline void load_f32x8(const float* p, float32x4_t* lo, float32x4_t* hi) {
  *lo = load_f32(p);
  *hi = load_f32(p + 4);
}

}  // namespace

float vec_dot_f32_f32(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const float*>(vx);
  const auto* y = static_cast<const float*>(vy);
  double sum = dot_groups<float, load_f32x8>(n, x, y);
  for (int64_t i = n - n % 16; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float vec_dot_f16_f16(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const uint16_t*>(vx);
  const auto* y = static_cast<const uint16_t*>(vy);
  double sum = dot_groups<uint16_t, load_f16x8>(n, x, y);
  for (int64_t i = n - n % 16; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

float vec_dot_bf16_bf16(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const uint16_t*>(vx);
  const auto* y = static_cast<const uint16_t*>(vy);
  double sum = dot_groups<uint16_t, load_bf16x8>(n, x, y);
  for (int64_t i = n - n % 16; i < n; ++i) {
    sum += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  }
  return static_cast<float>(sum);
}

// FCVTN with the default FPCR (round to nearest even, no flush to zero, NaNs quietened
// keeping their top payload bits): the bits of fp32_to_fp16.
void from_float_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t v =
        vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
    vst1q_u16(h + i, vreinterpretq_u16_f16(v));
  }
  for (; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

// Round to nearest even by adding 0x7fff + the kept lowest bit; NaNs keep their top bits
// with the quiet bit (64) set, as fp32_to_bf16.
void from_float_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffffu);
  const uint32x4_t inf = vdupq_n_u32(0x7f800000u);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(src + i));
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
    const uint32x4_t rounded = vaddq_u32(x, vaddq_u32(vdupq_n_u32(0x7fff), lsb));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(x, abs_mask), inf);
    const uint32x4_t quiet = vorrq_u32(x, vdupq_n_u32(64u << 16));
    vst1_u16(h + i, vshrn_n_u32(vbslq_u32(nan, quiet, rounded), 16));
  }
  for (; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

}  // namespace qrun::kernels::neon
