// The NEON integer dot products of the quantized weight types, written once over a policy
// `Dot` whose Dot::dot(acc, a, b) adds 16 int8 products a[i] * b[i] to 4 int32 lanes:
// dot_quants.cpp instantiates them with widening multiplies (armv8-a), dot_dotprod.cpp
// with SDOT. The lanes differ between policies but their sum does not, and every kernel
// reduces a block's lanes to its exact integer sum before any float arithmetic, so both
// instantiations give the same bits. Everything here is a member of the class template,
// so the two instantiations, compiled with different -march flags, share no symbol. The
// levels and scales of the blocks come from block_levels.h. Only files in neon/ include
// this header.
#pragma once

#include <arm_neon.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ggml-like/quants.h"
#include "kernels/cpu/neon/block_levels.h"

namespace qrun::kernels::neon {

template <class Dot>
struct QuantDots : BlockLevels<Dot> {
  using Levels = BlockLevels<Dot>;
  using Levels::half;

  // v with lane j (a constant after unrolling) loaded from *h.
  static uint16x4_t lane_u16(uint16x4_t v, const uint16_t* h, int j) {
    switch (j) {
      case 0:
        return vld1_lane_u16(h, v, 0);
      case 1:
        return vld1_lane_u16(h, v, 1);
      case 2:
        return vld1_lane_u16(h, v, 2);
      default:
        return vld1_lane_u16(h, v, 3);
    }
  }

  // Sums of the lanes of a, b, c, d: [sum a, sum b, sum c, sum d] (exact).
  static int32x4_t sums4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d));
  }

  // The levels of a 32-element block (block_levels.h) against the 32 activation levels
  // a_lo, a_hi of one Q8_0 or Q8_1 block (Q4_1's and Q5_1's levels are unsigned, at most
  // 31, so the products fit the policies' int16 pairs as Q5_0's do; IQ4_NL's, -127 .. 113,
  // within Q8_0's).
  template <class Block, void (*kLevels)(const Block&, int8x16_t&, int8x16_t&)>
  static int32x4_t lanes(const Block& x, int8x16_t a_lo, int8x16_t a_hi) {
    int8x16_t lo;
    int8x16_t hi;
    kLevels(x, lo, hi);
    return Dot::dot(Dot::dot(vdupq_n_s32(0), lo, a_lo), hi, a_hi);
  }
  static int32x4_t q4_0_lanes(const BlockQ4_0& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockQ4_0, Levels::q4_0_levels>(x, a_lo, a_hi);
  }
  static int32x4_t q5_0_lanes(const BlockQ5_0& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockQ5_0, Levels::q5_0_levels>(x, a_lo, a_hi);
  }
  static int32x4_t q8_0_lanes(const BlockQ8_0& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockQ8_0, Levels::q8_0_levels>(x, a_lo, a_hi);
  }
  static int32x4_t q4_1_lanes(const BlockQ4_1& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockQ4_1, Levels::q4_1_levels>(x, a_lo, a_hi);
  }
  static int32x4_t q5_1_lanes(const BlockQ5_1& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockQ5_1, Levels::q5_1_levels>(x, a_lo, a_hi);
  }
  static int32x4_t iq4_nl_lanes(const BlockIQ4_NL& x, int8x16_t a_lo, int8x16_t a_hi) {
    return lanes<BlockIQ4_NL, Levels::iq4_nl_levels>(x, a_lo, a_hi);
  }

  template <class Block>
  using LanesFn = int32x4_t (*)(const Block&, int8x16_t, int8x16_t);

  // The 32-element block types, for kRows weight rows x[0 .. kRows) against one activation
  // row y (Act: BlockQ8_0, or BlockQ8_1 for the offset types Q4_1 and Q5_1): per row, exact
  // integer sums of 4 blocks at a time (|sum| <= 32 * 128 * 128 < 2^24, so exact in float
  // too), converted and accumulated as acc[j] = fma(float(sum of block 4i + j), d_x * d_y,
  // acc[j]). The offset types also keep mins[j] = fma(m_x, s_y, mins[j]) of the same
  // blocks: llama.cpp's ARM kernels add m_x * s_y of each block into a float `summs` apart
  // from the scaled dots and add it at the end; here summs has 4 lanes as acc does, and
  // the fma is explicit so that the steps do not depend on compiler contraction. The result
  // is (acc0 + acc1) + (acc2 + acc3), plus (mins0 + mins1) + (mins2 + mins3) for the
  // offset types. A missing block counts as 0. The rows share each activation load and
  // scale; each row's float steps are those of kRows = 1 (vec_dot), so a row's result does
  // not depend on kRows. IQ4_NL takes this path as Q4_0 does: its order is not llama.cpp's
  // (which, with dotprod and a row count divisible by 4, repacks IQ4_NL rows in fours and
  // chains acc += (d_y * d_x) * float(sum) block after block per row; its vec_dot adds the
  // scaled sums of two blocks at a time to one float), but the same as this file's other
  // 32-element types. With kPrefetch, each block of a row is prefetched `ahead` bytes on
  // (the rows of the next pass; prefetches never fault).
  template <class Block, class Act, LanesFn<Block> kLanes, int kRows, bool kPrefetch>
  static void legacy_group(const Block* const* x, const Act* y, int64_t b, int count, size_t ahead,
                           float32x4_t* acc, float32x4_t* mins) {
    constexpr bool kOffset = std::is_same_v<Act, BlockQ8_1>;
    int8x16_t a_lo[4];
    int8x16_t a_hi[4];
    uint16x4_t h_y = vdup_n_u16(0);  // fp16 scales; a missing block's is +0
    uint16x4_t h_s = vdup_n_u16(0);  // Q8_1's d * sum(q), fp16
    for (int j = 0; j < 4; ++j) {
      a_lo[j] = j < count ? vld1q_s8(y[b + j].qs) : vdupq_n_s8(0);
      a_hi[j] = j < count ? vld1q_s8(y[b + j].qs + 16) : vdupq_n_s8(0);
      if (j < count) h_y = lane_u16(h_y, &y[b + j].d, j);
      if constexpr (kOffset) {
        if (j < count) h_s = lane_u16(h_s, &y[b + j].s, j);
      }
    }
    const float32x4_t d_y = vcvt_f32_f16(vreinterpret_f16_u16(h_y));
    const float32x4_t s_y = vcvt_f32_f16(vreinterpret_f16_u16(h_s));
    for (int r = 0; r < kRows; ++r) {
      int32x4_t lanes[4];
      uint16x4_t h_x = vdup_n_u16(0);
      uint16x4_t h_m = vdup_n_u16(0);
      for (int j = 0; j < 4; ++j) {
        if constexpr (kPrefetch) {
          if (j < count) __builtin_prefetch(reinterpret_cast<const char*>(x[r] + b + j) + ahead);
        }
        lanes[j] = j < count ? kLanes(x[r][b + j], a_lo[j], a_hi[j]) : vdupq_n_s32(0);
        if (j < count) h_x = lane_u16(h_x, &x[r][b + j].d, j);
        if constexpr (kOffset) {
          if (j < count) h_m = lane_u16(h_m, &x[r][b + j].m, j);
        }
      }
      // Lane j: d_x * d_y of block b + j, the float product vec_dot forms (+0 if missing).
      const float32x4_t d = vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(h_x)), d_y);
      const int32x4_t s = sums4(lanes[0], lanes[1], lanes[2], lanes[3]);
      acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s), d);
      if constexpr (kOffset) {
        mins[r] = vfmaq_f32(mins[r], vcvt_f32_f16(vreinterpret_f16_u16(h_m)), s_y);
      }
    }
  }

  template <class Block, class Act, LanesFn<Block> kLanes, int kRows, bool kPrefetch>
  static void legacy_rows(int64_t n, const Block* const* x, const Act* y, size_t ahead,
                          float* out) {
    constexpr bool kOffset = std::is_same_v<Act, BlockQ8_1>;
    const int64_t nb = n / kQK;
    float32x4_t acc[kRows];
    float32x4_t mins[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = mins[r] = vdupq_n_f32(0.0f);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4)
      legacy_group<Block, Act, kLanes, kRows, kPrefetch>(x, y, b, 4, ahead, acc, mins);
    if (b < nb) {
      legacy_group<Block, Act, kLanes, kRows, kPrefetch>(x, y, b, static_cast<int>(nb - b), ahead,
                                                         acc, mins);
    }
    for (int r = 0; r < kRows; ++r) {
      out[r] = vaddvq_f32(acc[r]);
      if constexpr (kOffset) out[r] += vaddvq_f32(mins[r]);
    }
  }

  template <class Block, class Act, LanesFn<Block> kLanes>
  static float legacy(int64_t n, const void* vx, const void* vy) {
    const Block* x = static_cast<const Block*>(vx);
    float out;
    legacy_rows<Block, Act, kLanes, 1, false>(n, &x, static_cast<const Act*>(vy), 0, &out);
    return out;
  }

  // gemv (kernel_table.h) of a 32-element block type: 4 rows per pass through legacy_rows,
  // the rows of the next pass prefetched; the last n_rows % 4 rows one at a time.
  template <class Block, class Act, LanesFn<Block> kLanes>
  static void legacy_gemv(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                          const uint8_t* act, float* y) {
    constexpr int kRows = 4;
    const auto* a = reinterpret_cast<const Act*>(act);
    int64_t r = 0;
    for (; r + kRows <= n_rows; r += kRows) {
      const Block* x[kRows];
      for (int i = 0; i < kRows; ++i) {
        x[i] = reinterpret_cast<const Block*>(w + static_cast<size_t>(r + i) * w_stride);
      }
      legacy_rows<Block, Act, kLanes, kRows, true>(n, x, a, kRows * w_stride, y + r);
    }
    for (; r < n_rows; ++r) {
      const Block* x = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * w_stride);
      legacy_rows<Block, Act, kLanes, 1, false>(n, &x, a, 0, y + r);
    }
  }

  static float q4_0_q8_0(int64_t n, const void* x, const void* y) {
    return legacy<BlockQ4_0, BlockQ8_0, q4_0_lanes>(n, x, y);
  }
  static float q5_0_q8_0(int64_t n, const void* x, const void* y) {
    return legacy<BlockQ5_0, BlockQ8_0, q5_0_lanes>(n, x, y);
  }
  static float q8_0_q8_0(int64_t n, const void* x, const void* y) {
    return legacy<BlockQ8_0, BlockQ8_0, q8_0_lanes>(n, x, y);
  }
  static float q4_1_q8_1(int64_t n, const void* x, const void* y) {
    return legacy<BlockQ4_1, BlockQ8_1, q4_1_lanes>(n, x, y);
  }
  static float q5_1_q8_1(int64_t n, const void* x, const void* y) {
    return legacy<BlockQ5_1, BlockQ8_1, q5_1_lanes>(n, x, y);
  }
  static float iq4_nl_q8_0(int64_t n, const void* x, const void* y) {
    return legacy<BlockIQ4_NL, BlockQ8_0, iq4_nl_lanes>(n, x, y);
  }
  static void gemv_q4_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y) {
    legacy_gemv<BlockQ4_0, BlockQ8_0, q4_0_lanes>(n, w, w_stride, n_rows, act, y);
  }
  static void gemv_q5_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y) {
    legacy_gemv<BlockQ5_0, BlockQ8_0, q5_0_lanes>(n, w, w_stride, n_rows, act, y);
  }
  static void gemv_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y) {
    legacy_gemv<BlockQ8_0, BlockQ8_0, q8_0_lanes>(n, w, w_stride, n_rows, act, y);
  }
  static void gemv_q4_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y) {
    legacy_gemv<BlockQ4_1, BlockQ8_1, q4_1_lanes>(n, w, w_stride, n_rows, act, y);
  }
  static void gemv_q5_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y) {
    legacy_gemv<BlockQ5_1, BlockQ8_1, q5_1_lanes>(n, w, w_stride, n_rows, act, y);
  }
  static void gemv_iq4_nl(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                          const uint8_t* act, float* y) {
    legacy_gemv<BlockIQ4_NL, BlockQ8_0, iq4_nl_lanes>(n, w, w_stride, n_rows, act, y);
  }

  // Q4_K and Q5_K: per super-block, sumi = sum_s sc[s] * (levels of s . activations of s)
  // and sum_mins = sum_s mn[s] * (activation sum of s, from bsums), both exact int32; then
  // sum = fma(d_x * d_y, sumi, sum), then sum = fma(-(dmin_x * d_y), sum_mins, sum), block
  // after block (explicit fmas: the float steps must not depend on compiler contraction).
  template <class Block>
  static float scale_min_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const Block*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const int32x4_t zero = vdupq_n_s32(0);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQKK; ++b) {
      uint8_t sc[8];
      uint8_t mn[8];
      Levels::k_scales_mins(x[b].scales, sc, mn);
      // Activation sums of the 8 sub-blocks of 32, times the mins.
      const int16x8_t bs = vpaddq_s16(vld1q_s16(y[b].bsums), vld1q_s16(y[b].bsums + 8));
      const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
      const int32_t sum_mins =
          vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(m)), bs, m));

      int32x4_t acc = zero;
      const int8_t* a = y[b].qs;
      for (int g = 0; g < 4; ++g, a += 64) {
        int8x16_t q[4];
        Levels::scale_min_levels(x[b], g, q);
        const int32x4_t plo = Dot::dot(Dot::dot(zero, q[0], vld1q_s8(a)), q[1], vld1q_s8(a + 16));
        const int32x4_t phi =
            Dot::dot(Dot::dot(zero, q[2], vld1q_s8(a + 32)), q[3], vld1q_s8(a + 48));
        acc = vmlaq_n_s32(acc, plo, sc[2 * g]);
        acc = vmlaq_n_s32(acc, phi, sc[2 * g + 1]);
      }
      const int32_t sumi = vaddvq_s32(acc);
      sum = std::fma(half(x[b].d) * y[b].d, static_cast<float>(sumi), sum);
      sum = std::fma(-(half(x[b].dmin) * y[b].d), static_cast<float>(sum_mins), sum);
    }
    return sum;
  }

  static float q4_k_q8_k(int64_t n, const void* x, const void* y) {
    return scale_min_k<BlockQ4_K>(n, x, y);
  }
  static float q5_k_q8_k(int64_t n, const void* x, const void* y) {
    return scale_min_k<BlockQ5_K>(n, x, y);
  }

  // Q2_K: per super-block, sumi = sum over the 16 sub-blocks of 16 of (sc & 15) * (levels .
  // acts), levels 0 .. 3 (|sumi| <= 16 * 15 * 16 * 3 * 128 < 2^21), and sum_mins = sum_s
  // (sc >> 4) * bsums[s] (|sum_mins| <= 16 * 15 * 16 * 128 < 2^19), both exact int32; then
  // Q4_K's chain: sum = fma(d_x * d_y, float(sumi), sum), then sum = fma(-(dmin_x * d_y),
  // float(sum_mins), sum), super-block after super-block (llama.cpp's ARM kernel adds the
  // mins term first; the reference forms d * sumi - dmin * sum_mins per super-block).
  static float q2_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ2_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const int32x4_t zero = vdupq_n_s32(0);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQKK; ++b) {
      const uint8x16_t packed = vld1q_u8(x[b].scales);
      // The 4-bit mins (high nibbles) times the activation sums of the 16 sub-blocks.
      const uint8x16_t mn = vshrq_n_u8(packed, 4);
      const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
      const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mn));
      const int16x8_t bs0 = vld1q_s16(y[b].bsums);
      const int16x8_t bs1 = vld1q_s16(y[b].bsums + 8);
      int32x4_t mins = vmull_s16(vget_low_s16(m0), vget_low_s16(bs0));
      mins = vmlal_high_s16(mins, m0, bs0);
      mins = vmlal_s16(mins, vget_low_s16(m1), vget_low_s16(bs1));
      mins = vmlal_high_s16(mins, m1, bs1);
      const int32_t sum_mins = vaddvq_s32(mins);

      uint8_t sc[kQKK / 16];
      vst1q_u8(sc, vandq_u8(packed, vdupq_n_u8(15)));
      int32x4_t acc = zero;
      for (int h = 0; h < 2; ++h) {
        uint8x16_t q[8];
        Levels::two_bit_levels(x[b].qs, h, q);
        const int8_t* a = y[b].qs + 128 * h;
        for (int v = 0; v < 8; ++v) {
          const int32x4_t p = Dot::dot(zero, vreinterpretq_s8_u8(q[v]), vld1q_s8(a + 16 * v));
          acc = vmlaq_n_s32(acc, p, sc[8 * h + v]);
        }
      }
      const int32_t sumi = vaddvq_s32(acc);
      sum = std::fma(half(x[b].d) * y[b].d, static_cast<float>(sumi), sum);
      sum = std::fma(-(half(x[b].dmin) * y[b].d), static_cast<float>(sum_mins), sum);
    }
    return sum;
  }

  // Q3_K: per super-block sumi = sum over the 16 sub-blocks of 16 of (sc - 32) * (levels .
  // acts), levels -4 .. 3 (|sumi| <= 16 * 32 * 16 * 4 * 128 < 2^23), exact int32; then
  // sum = fma(d_x * d_y, float(sumi), sum), super-block after super-block, as Q6_K
  // (llama.cpp's ARM order; the reference sums eight lanes of element index mod 8 instead).
  static float q3_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ3_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const int32x4_t zero = vdupq_n_s32(0);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQKK; ++b) {
      int32_t sc[kQKK / 16];
      Levels::q3_k_scales(x[b].scales, sc);
      int32x4_t acc = zero;
      for (int h = 0; h < 2; ++h) {
        int8x16_t q[8];
        Levels::q3_k_levels(x[b], h, q);
        const int8_t* a = y[b].qs + 128 * h;
        for (int v = 0; v < 8; ++v) {
          acc = vmlaq_n_s32(acc, Dot::dot(zero, q[v], vld1q_s8(a + 16 * v)), sc[8 * h + v]);
        }
      }
      sum = std::fma(half(x[b].d) * y[b].d, static_cast<float>(vaddvq_s32(acc)), sum);
    }
    return sum;
  }

  // Q6_K: per super-block sumi = sum over the 16 groups of 16 of scale * (levels . acts),
  // exact int32; then sum = fma(d_x * d_y, sumi, sum), block after block.
  static float q6_k_q8_k(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const BlockQ6_K*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const int32x4_t zero = vdupq_n_s32(0);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQKK; ++b) {
      int32x4_t acc = zero;
      for (int h = 0; h < 2; ++h) {
        const int8_t* sc = x[b].scales + 8 * h;
        const int8_t* a = y[b].qs + 128 * h;
        int8x16_t q[8];
        Levels::q6_k_levels(x[b], h, q);
        for (int g = 0; g < 8; ++g) {
          acc = vmlaq_n_s32(acc, Dot::dot(zero, q[g], vld1q_s8(a + 16 * g)), sc[g]);
        }
      }
      sum = std::fma(half(x[b].d) * y[b].d, static_cast<float>(vaddvq_s32(acc)), sum);
    }
    return sum;
  }

  // IQ4_XS: per super-block sumi = sum over the 8 sub-blocks of 32 of (ls - 32) * (levels .
  // acts), exact int32 (|sumi| <= 8 * 32 * 32 * 127 * 128 < 2^28); then sum = fma(d_x * d_y,
  // float(sumi), sum), super-block after super-block: llama.cpp's ARM order (it adds
  // d_x * d_y * sumi to one float per super-block, an fma where the compiler contracts it).
  static float iq4_xs_q8_k(int64_t n, const void* vx, const void* vy) {
    constexpr int kSubBlocks = kQKK / kQK;
    const auto* x = static_cast<const BlockIQ4_XS*>(vx);
    const auto* y = static_cast<const BlockQ8_K*>(vy);
    const int32x4_t zero = vdupq_n_s32(0);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / kQKK; ++b) {
      int32_t ls[kSubBlocks];
      Levels::iq4_xs_scales(x[b], ls);
      int32x4_t acc = zero;
      for (int s = 0; s < kSubBlocks; ++s) {
        int8x16_t lo;
        int8x16_t hi;
        Levels::iq4_levels(x[b].qs + s * (kQK / 2), lo, hi);
        const int8_t* a = y[b].qs + s * kQK;
        const int32x4_t p = Dot::dot(Dot::dot(zero, lo, vld1q_s8(a)), hi, vld1q_s8(a + 16));
        acc = vmlaq_n_s32(acc, p, ls[s]);
      }
      sum = std::fma(half(x[b].d) * y[b].d, static_cast<float>(vaddvq_s32(acc)), sum);
    }
    return sum;
  }
};

}  // namespace qrun::kernels::neon
