// NEON attention for one token over a KV cache: the shared tile walk of
// kernels/cpu/attention_tiles.h (the query heads walk the cache in tiles of rows: scores,
// then each head's online-softmax weights, then V added to each KV head's group of
// accumulators in registers) with 4-lane vectors. Baseline armv8-a only (F16 <-> F32
// conversions are part of it).
// F16 cache: as llama.cpp's armv8 flash attention without F16 arithmetic: q and the
// accumulator rounded to F16, q.k as 4 x 4 float lanes over 16-element steps
// ((x0 + x2) + (x1 + x3), then a pairwise lane sum), the tail in double, V added with an
// FMA. F32 cache: the same q.k, float accumulator. Other K/V pairs (BF16, Q8_0, Q4_0,
// mixes): attention_tiles::attend_mixed with these ops (q.k by the table's NEON dot
// products), and the KV rows widened to float here, exactly as the reference does.
#include <arm_neon.h>

#include <cmath>
#include <cstdint>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/neon/neon_kernels.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::neon {
namespace {

using attention_tiles::kTile;

// FCVTN / FCVTL with the default FPCR: round to nearest even, as fp32_to_fp16.
inline float32x4_t round_f16(float32x4_t x) {
  return vcvt_f32_f16(vcvt_f16_f32(x));
}
inline float round_f16(float x) {
  return vgetq_lane_f32(round_f16(vdupq_n_f32(x)), 0);
}

// q.k over n floats: 16-element steps in four accumulators, the rest summed in double.
inline float dot_f32(const float* q, const float* k, int64_t n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = vfmaq_f32(a0, vld1q_f32(q + i), vld1q_f32(k + i));
    a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vld1q_f32(k + i + 4));
    a2 = vfmaq_f32(a2, vld1q_f32(q + i + 8), vld1q_f32(k + i + 8));
    a3 = vfmaq_f32(a3, vld1q_f32(q + i + 12), vld1q_f32(k + i + 12));
  }
  double sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3)));
  for (; i < n; ++i) sum += static_cast<double>(q[i] * k[i]);
  return static_cast<float>(sum);
}

// n F16 values widened to float.
inline void widen_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
    vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
  }
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

// Columns c .. c + 4 * kRegs - 1 of every head's accumulator: acc[h] = acc[h] * ms[h][j]
// (when kRescale), then acc[h] += v_j * vs[h][j], for the rows j of a tile in order, each
// chunk of a V row loaded once and added to kNq accumulators held in registers. With kF16
// each result is rounded to F16. Multiplying by ms = 1 (and rounding an F16 value)
// changes nothing, so the rescale runs only on the rows rescale_rows marks.
template <bool kF16, bool kRescale, int kNq, int kRegs>
inline void accumulate_chunk(float* acc, int64_t acc_stride, const float* const* vr, int64_t n_rows,
                             int64_t c, const float (*ms)[kTile], const float (*vs)[kTile],
                             uint32_t rescale_rows) {
  float32x4_t a[kNq][kRegs];
  for (int h = 0; h < kNq; ++h) {
    for (int r = 0; r < kRegs; ++r) a[h][r] = vld1q_f32(acc + h * acc_stride + c + 4 * r);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    float32x4_t x[kRegs];
    for (int r = 0; r < kRegs; ++r) x[r] = vld1q_f32(vr[j] + c + 4 * r);
    for (int h = 0; h < kNq; ++h) {
      for (int r = 0; r < kRegs; ++r) {
        if (kRescale && (rescale_rows >> j & 1)) {
          a[h][r] = vmulq_n_f32(a[h][r], ms[h][j]);
          if constexpr (kF16) a[h][r] = round_f16(a[h][r]);
        }
        a[h][r] = vfmaq_n_f32(a[h][r], x[r], vs[h][j]);
        if constexpr (kF16) a[h][r] = round_f16(a[h][r]);
      }
    }
  }
  for (int h = 0; h < kNq; ++h) {
    for (int r = 0; r < kRegs; ++r) vst1q_f32(acc + h * acc_stride + c + 4 * r, a[h][r]);
  }
}

// The whole head: 8-column chunks (two registers per head, 16 for a group of 8 heads),
// then one of 4, then single columns with the same operations in scalar form.
template <bool kF16, bool kRescale, int kNq>
void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr, int64_t n_rows,
                     int64_t head_dim, const float (*ms)[kTile], const float (*vs)[kTile],
                     uint32_t rescale_rows) {
  int64_t c = 0;
  for (; c + 8 <= head_dim; c += 8) {
    accumulate_chunk<kF16, kRescale, kNq, 2>(acc, acc_stride, vr, n_rows, c, ms, vs, rescale_rows);
  }
  if (c + 4 <= head_dim) {
    accumulate_chunk<kF16, kRescale, kNq, 1>(acc, acc_stride, vr, n_rows, c, ms, vs, rescale_rows);
    c += 4;
  }
  for (; c < head_dim; ++c) {
    for (int64_t j = 0; j < n_rows; ++j) {
      for (int h = 0; h < kNq; ++h) {
        float a = acc[h * acc_stride + c];
        if (kRescale && (rescale_rows >> j & 1)) {
          a *= ms[h][j];
          if constexpr (kF16) a = round_f16(a);
        }
        a = std::fma(vr[j][c], vs[h][j], a);
        if constexpr (kF16) a = round_f16(a);
        acc[h * acc_stride + c] = a;
      }
    }
  }
}

// The vector ops of the shared tile walk (kernels/cpu/attention_tiles.h).
struct Ops {
  static constexpr int kAlign = 16;
  static float dot_f32(const float* q, const float* k, int64_t n) { return neon::dot_f32(q, k, n); }
  static float round_f16(float x) { return neon::round_f16(x); }
  static void widen_f16(const uint16_t* src, float* dst, int64_t n) {
    neon::widen_f16(src, dst, n);
  }
  template <bool kF16, bool kRescale, int kNq>
  static void accumulate_tile(float* acc, int64_t acc_stride, const float* const* vr,
                              int64_t n_rows, int64_t head_dim, const float (*ms)[kTile],
                              const float (*vs)[kTile], uint32_t rescale_rows) {
    neon::accumulate_tile<kF16, kRescale, kNq>(acc, acc_stride, vr, n_rows, head_dim, ms, vs,
                                               rescale_rows);
  }
};

}  // namespace

void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend<Ops, float>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                      partial);
}

void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend<Ops, uint16_t>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                         partial);
}

void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial) {
  attention_tiles::attend_mixed<Ops>(q, q_stride, n_q, kv, head_dim, scale, out, out_stride,
                                     partial);
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  widen_f16(static_cast<const uint16_t*>(src), dst, n);
}

// BF16 is the top half of an F32: shift each value into place.
void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(x + i), 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(x[i]);
}

// d * q for 16 int8 values: widened to int32, converted, multiplied.
inline void scale_16(int8x16_t q, float32x4_t d, float* dst) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(q));
  const int16x8_t hi = vmovl_s8(vget_high_s8(q));
  vst1q_f32(dst + 0, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)))));
  vst1q_f32(dst + 4, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)))));
  vst1q_f32(dst + 8, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)))));
  vst1q_f32(dst + 12, vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)))));
}

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float32x4_t d = vdupq_n_f32(fp16_to_fp32(b[i].d));
    scale_16(vld1q_s8(b[i].qs), d, dst);
    scale_16(vld1q_s8(b[i].qs + 16), d, dst + 16);
  }
}

// d * (q - 8): the low nibbles are values 0-15 of a block, the high nibbles 16-31.
void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const int8x16_t eight = vdupq_n_s8(8);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float32x4_t d = vdupq_n_f32(fp16_to_fp32(b[i].d));
    const uint8x16_t x = vld1q_u8(b[i].qs);
    scale_16(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0f))), eight), d, dst);
    scale_16(vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), eight), d, dst + 16);
  }
}

}  // namespace qrun::kernels::neon
