// armv8-a NEON dot products of Q4_0, Q5_0, Q8_0, IQ4_NL (Q8_0 activations), Q4_1, Q5_1 (Q8_1
// activations), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (Q8_K activations), through dot_impl.h with
// widening multiplies: SMULL/SMULL2 give 16 int16 products, SADALP adds them pairwise into the
// int32 lanes (exact: |product| <= 128 * 128, so a pair fits int16 and lanes stay far from int32
// limits); the multi-row gemv of the 32-element block types (bit-identical to their
// vec_dot, see dot_impl.h). Also the activation quantizers, bit-identical to the references
// (same float operations, ties to even).
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/neon/dot_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct WideningDot {
  static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
  }
};

using Dots = QuantDots<WideningDot>;

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y) {
  return Dots::q4_0_q8_0(n, x, y);
}

float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y) {
  return Dots::q5_0_q8_0(n, x, y);
}

float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y) {
  return Dots::q8_0_q8_0(n, x, y);
}

float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y) {
  return Dots::q4_1_q8_1(n, x, y);
}

float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y) {
  return Dots::q5_1_q8_1(n, x, y);
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y) {
  return Dots::iq4_nl_q8_0(n, x, y);
}

float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::q2_k_q8_k(n, x, y);
}

float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::q3_k_q8_k(n, x, y);
}

float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::q4_k_q8_k(n, x, y);
}

float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::q5_k_q8_k(n, x, y);
}

float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::q6_k_q8_k(n, x, y);
}

float vec_dot_iq4_xs_q8_k(int64_t n, const void* x, const void* y) {
  return Dots::iq4_xs_q8_k(n, x, y);
}

void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  Dots::gemv_q4_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q5_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  Dots::gemv_q5_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  Dots::gemv_q8_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  Dots::gemv_q4_1(n, w, w_stride, n_rows, act, y);
}

void gemv_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  Dots::gemv_q5_1(n, w, w_stride, n_rows, act, y);
}

void gemv_iq4_nl_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, float* y) {
  Dots::gemv_iq4_nl(n, w, w_stride, n_rows, act, y);
}

namespace {

// One block of 32 activations as quantize_q8_0_act and quantize_q8_1_act (ggml-like) quantize
// it: amax ignores NaNs (FMAXNM, as std::max in the reference), levels round(x * (127 /
// amax)) with FCVTNS (ties to even, as lrint), saturated to int8 and stored at qs. Returns
// amax.
float quantize_act_block(const float* x, int8_t* qs) {
  float32x4_t v[8];
  float32x4_t amax = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    amax = vmaxnmq_f32(amax, vabsq_f32(v[i]));
  }
  const float max = vmaxnmvq_f32(amax);
  const float32x4_t id = vdupq_n_f32(max != 0.0f ? 127.0f / max : 0.0f);
  for (int i = 0; i < 8; i += 2) {
    const int32x4_t q0 = vcvtnq_s32_f32(vmulq_f32(v[i], id));
    const int32x4_t q1 = vcvtnq_s32_f32(vmulq_f32(v[i + 1], id));
    const int16x8_t q16 = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1));
    vst1_s8(qs + 4 * i, vqmovn_s16(q16));
  }
  return max;
}

}  // namespace

// d = amax / 127 as F16.
void quantize_q8_0_act(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float max = quantize_act_block(src + b * kQK, out[b].qs);
    out[b].d = fp32_to_fp16(max / 127.0f);
  }
}

// As Q8_0's, with s = F16(d * sum of the levels), d the float amax / 127 (not its F16).
void quantize_q8_1_act(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float max = quantize_act_block(src + b * kQK, out[b].qs);
    const float d = max / 127.0f;
    const int sum = vaddlvq_s8(vld1q_s8(out[b].qs)) + vaddlvq_s8(vld1q_s8(out[b].qs + 16));
    out[b].d = fp32_to_fp16(d);
    out[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// The signed absmax m (the first element of largest magnitude; NaNs ignored), iscale =
// -127 / m, levels min(127, round(iscale * x)) ties to even, bsums of 16 levels, d = 1 / iscale.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ8_K& blk = out[b];
    float32x4_t hi = vdupq_n_f32(0.0f);
    float32x4_t lo = vdupq_n_f32(0.0f);
    for (int i = 0; i < kQKK; i += 4) {
      const float32x4_t v = vld1q_f32(x + i);
      hi = vmaxnmq_f32(hi, v);
      lo = vminnmq_f32(lo, v);
    }
    const float vmax = vmaxnmvq_f32(hi);
    const float vmin = vminnmvq_f32(lo);
    if (vmax == 0.0f && vmin == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    float max = vmax > -vmin ? vmax : vmin;
    if (vmax == -vmin) {  // both signs reach the absmax: the first one wins
      for (int i = 0; i < kQKK; ++i) {
        if (std::fabs(x[i]) == vmax) {
          max = x[i];
          break;
        }
      }
    }
    const float iscale = -127.0f / max;
    const float32x4_t is = vdupq_n_f32(iscale);
    const int32x4_t cap = vdupq_n_s32(127);
    for (int i = 0; i < kQKK; i += 16) {
      int16x8_t q16[2];
      for (int h = 0; h < 2; ++h) {
        const int32x4_t q0 =
            vminq_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + i + 8 * h), is)), cap);
        const int32x4_t q1 =
            vminq_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + i + 8 * h + 4), is)), cap);
        q16[h] = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1));
      }
      const int8x16_t q = vcombine_s8(vqmovn_s16(q16[0]), vqmovn_s16(q16[1]));
      vst1q_s8(blk.qs + i, q);
      blk.bsums[i / 16] = vaddlvq_s8(q);
    }
    blk.d = 1.0f / iscale;
  }
}

}  // namespace qrun::kernels::neon
