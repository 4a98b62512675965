// NEON decode gemv over the x16 layouts of kernels/cpu/repack.h (GemvRepackedFn), bit-identical
// to the NEON vec_dot of the same rows (dot_impl.h), written once over the `Lanes` policy of
// gemm_impl.h: Lanes::dot<t>(acc, w, a) adds to int32 lane i the 4 products of w[4i .. 4i + 3]
// with a[4t .. 4t + 3]. A 16-byte quarter of a 64-byte x16 column holds those 4 bytes of 4
// rows ("a quad"), so one dot<t> against an activation vector is the 4-element column of 4
// rows, each row's sum in its own lane: nothing is summed across lanes but the policy's own
// pairs. gemv_repacked.cpp instantiates it with widening multiplies, gemv_repacked_dotprod.cpp
// with SDOT.
//   Q4_0, IQ4_NL, Q5_0, Q8_0: vec_dot's float chain per row (legacy_rows with one row) is
//     acc[b % 4] = fma(float(block sum), d_x * d_y, acc[b % 4]), then (acc0 + acc1) +
//     (acc2 + acc3), the order of vaddvq_f32. Each quad keeps those 4 accumulators with its
//     rows in the lanes (16 accumulators for the group, kept in registers by writing the 4
//     blocks of a step out); the block sums are exact integers, so they are vec_dot's
//     whatever the policy. Q4_0 and Q5_0 sum the unsigned levels times the activations from
//     a start of -8 (-16) times the activations' sum, which is the same integer as summing
//     (q - 8) * a and costs no subtraction per weight. (The missing blocks of vec_dot's last
//     group of 4 add fma(0, 0, acc), which changes no lane: a lane that starts at +0 never
//     becomes -0, so they are skipped here.)
//   Q4_K, Q5_K: vec_dot's sumi = sum_s sc[s] * (levels . a of sub-block s) and sum_mins = sum_s
//     mn[s] * S[s] (S[s] = bsums[2s] + bsums[2s + 1] wrapped to int16, as vpaddq_s16) are
//     integers taken modulo 2^32 in any order, so each quad forms them its own way; the 6-bit
//     scales come from the interleaved scale columns with vec_dot's bit operations, byte-wise.
//     Floats per row: sum = fma(d_x * d_y, float(sumi), sum), then sum = fma(-(dmin_x * d_y),
//     float(sum_mins), sum), super-block after super-block.
//   Q6_K: sumi = sum over the 16 sub-blocks of 16 of sc[s] * (levels - 32 . a), an integer
//     as above; sum = fma(d_x * d_y, float(sumi), sum). Element 128h + 32p + 4c + i (c < 8)
//     of a row is ql column 16h + 8 (p % 2) + c (low nibbles for p < 2, high ones after) with
//     bits 2p, 2p + 1 of qh column 8h + c; it belongs to sub-block 8h + 2p + c / 4.
// One group of 16 rows at a time, each (super-)block's 4 quads one after the other; a group
// is read front to back (its scales, and its quants or super-blocks), left to the hardware
// prefetchers: nothing was measured on arm64 hardware yet. Only files in neon/ include this
// header.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ggml-like/quants.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::neon {

template <class Lanes>
struct RepackedGemv {
  using Acc = typename Lanes::Acc;
  static constexpr int kQuads = kRepackRows / 4;

  // acc += the 4 columns w[0 .. 4) of a quad against elements 4c .. 4c + 3 of a, column c.
  static void dot_columns(Acc& acc, const int8x16_t* w, int8x16_t a) {
    Lanes::template dot<0>(acc, w[0], a);
    Lanes::template dot<1>(acc, w[1], a);
    Lanes::template dot<2>(acc, w[2], a);
    Lanes::template dot<3>(acc, w[3], a);
  }

  // The 4 fp16 scales at p, as floats.
  static float32x4_t halves(const void* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(p))));
  }

  // (f0 + f1) + (f2 + f3), lane-wise: vaddvq_f32's order for every row.
  static float32x4_t sum4(const float32x4_t* f) {
    return vaddq_f32(vaddq_f32(f[0], f[1]), vaddq_f32(f[2], f[3]));
  }

  // The fp16 value at h as a float (one FCVT).
  static float half(const uint16_t* h) {
    __fp16 v;
    std::memcpy(&v, h, sizeof v);
    return static_cast<float>(v);
  }

  enum class Legacy { kQ4_0, kIQ4_NL, kQ5_0, kQ8_0 };

  // Bytes of one block of a group after its scales.
  template <Legacy kType>
  static constexpr size_t kLegacyBlockBytes = kType == Legacy::kQ8_0   ? 8 * 64
                                              : kType == Legacy::kQ5_0 ? kQ5_0GroupBlockBytes
                                                                       : 4 * 64;

  // Bit `bit` of every byte of h at bit 4 (the other bits are garbage: callers mask).
  static uint8x16_t bit_at_4(uint8x16_t h, int bit) {
    switch (bit) {
      case 0:
        return vshlq_n_u8(h, 4);
      case 1:
        return vshlq_n_u8(h, 3);
      case 2:
        return vshlq_n_u8(h, 2);
      case 3:
        return vshlq_n_u8(h, 1);
      case 4:
        return h;
      case 5:
        return vshrq_n_u8(h, 1);
      case 6:
        return vshrq_n_u8(h, 2);
      default:
        return vshrq_n_u8(h, 3);
    }
  }

  // One Q4_0, IQ4_NL, Q5_0 or Q8_0 block b of the 16 rows: f[r] = fma(float(block sums of
  // quad r), d_x * d_y, f[r]), rows in lanes. Q4_0 and Q5_0 multiply the unsigned levels q
  // (0 .. 15, 0 .. 31) and start each sum at -8 or -16 times the sum of the activations, so
  // it ends at sum (q - 8) * a or sum (q - 16) * a, the same integer as vec_dot's, with no
  // subtraction per weight. IQ4_NL looks its signed levels up in the table (one TBL per
  // 16 nibbles) and starts at 0. Q5_0's high bit of column c's low (high) nibbles is bit 2c (2c +
  // 1) of the row's lane in h (repack.h): a shift puts it at bit 4 and a bit select (BIT) merges it
  // into the nibbles. Q8_0 xors its levels back to signed.
  template <Legacy kType>
  static void legacy_block(const BlockQ8_0& a, const uint16_t* d, const uint8_t* qb,
                           float32x4_t* f) {
    const int8x16_t a_lo = vld1q_s8(a.qs);
    const int8x16_t a_hi = vld1q_s8(a.qs + 16);
    const float d_y = half(&a.d);
    int32x4_t start = vdupq_n_s32(0);
    if constexpr (kType == Legacy::kQ4_0 || kType == Legacy::kQ5_0) {
      const int16x8_t pairs = vpadalq_s8(vpaddlq_s8(a_lo), a_hi);
      start = vdupq_n_s32((kType == Legacy::kQ4_0 ? -8 : -16) * vaddlvq_s16(pairs));
    }
    const uint16x8_t d03 = vld1q_u16(d);
    const uint16x8_t d47 = vld1q_u16(d + 8);
    const float32x4_t dx[kQuads] = {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(d03))),
                                    vcvt_high_f32_f16(vreinterpretq_f16_u16(d03)),
                                    vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(d47))),
                                    vcvt_high_f32_f16(vreinterpretq_f16_u16(d47))};
    const uint8_t* q = qb + (kType == Legacy::kQ5_0 ? 64 : 0);
    // Quads go in pairs, r and r + 1, whose 16-byte chunks of a column are adjacent: each
    // pair of loads is one LDP.
#pragma GCC unroll 2
    for (int r = 0; r < kQuads; r += 2) {
      Acc s[2] = {Lanes::start(start), Lanes::start(start)};
      if constexpr (kType == Legacy::kQ8_0) {
#pragma GCC unroll 2
        for (int k = 0; k < 8; k += 4) {
          uint8x16_t w[2][4];
          for (int c = 0; c < 4; ++c) {
            w[0][c] = vld1q_u8(q + 64 * (k + c) + 16 * r);
            w[1][c] = vld1q_u8(q + 64 * (k + c) + 16 * r + 16);
          }
          for (int i = 0; i < 2; ++i) {
            int8x16_t lv[4];
            for (int c = 0; c < 4; ++c) {
              lv[c] = vreinterpretq_s8_u8(veorq_u8(w[i][c], vdupq_n_u8(0x80)));
            }
            dot_columns(s[i], lv, k == 0 ? a_lo : a_hi);
          }
        }
      } else {
        uint8x16_t w[2][4];
        for (int c = 0; c < 4; ++c) {
          w[0][c] = vld1q_u8(q + 64 * c + 16 * r);
          w[1][c] = vld1q_u8(q + 64 * c + 16 * r + 16);
        }
        uint8x16_t h[2];
        if constexpr (kType == Legacy::kQ5_0) {
          h[0] = vld1q_u8(qb + 16 * r);
          h[1] = vld1q_u8(qb + 16 * r + 16);
        }
        for (int i = 0; i < 2; ++i) {
          uint8x16_t lo[4];
          uint8x16_t hi[4];
          for (int c = 0; c < 4; ++c) {
            lo[c] = vandq_u8(w[i][c], vdupq_n_u8(15));
            hi[c] = vshrq_n_u8(w[i][c], 4);
          }
          if constexpr (kType == Legacy::kQ5_0) {
            const uint8x16_t bit4 = vdupq_n_u8(16);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
              lo[c] = vbslq_u8(bit4, bit_at_4(h[i], 2 * c), lo[c]);
              hi[c] = vbslq_u8(bit4, bit_at_4(h[i], 2 * c + 1), hi[c]);
            }
          }
          int8x16_t lv[4];
          for (int c = 0; c < 4; ++c) lv[c] = levels<kType>(lo[c]);
          dot_columns(s[i], lv, a_lo);
          for (int c = 0; c < 4; ++c) lv[c] = levels<kType>(hi[c]);
          dot_columns(s[i], lv, a_hi);
        }
      }
      for (int i = 0; i < 2; ++i) {
        f[r + i] =
            vfmaq_f32(f[r + i], vcvtq_f32_s32(Lanes::sums(s[i])), vmulq_n_f32(dx[r + i], d_y));
      }
    }
  }

  // The signed bytes that the dots take for nibbles (or Q5_0's 5-bit levels) q: q itself,
  // or for IQ4_NL kIq4Values[q].
  template <Legacy kType>
  static int8x16_t levels(uint8x16_t q) {
    if constexpr (kType == Legacy::kIQ4_NL) return vqtbl1q_s8(vld1q_s8(kIq4Values), q);
    return vreinterpretq_s8_u8(q);
  }

  // Q4_0, IQ4_NL, Q5_0 and Q8_0 (layouts in repack.h): acc[j] takes the blocks b = j mod 4, as
  // vec_dot's chains do; the 4 blocks of a step are written out so that the 16
  // accumulators stay in registers.
  template <Legacy kType>
  static void legacy_group(int64_t nb, const uint8_t* group, size_t /*one group*/,
                           const BlockQ8_0* a, float* y) {
    const auto* d = reinterpret_cast<const uint16_t*>(group);
    const uint8_t* q = group + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
    constexpr size_t kBytes = kLegacyBlockBytes<kType>;
    float32x4_t acc[4][kQuads];
    for (auto& chain : acc) {
      for (float32x4_t& v : chain) v = vdupq_n_f32(0.0f);
    }
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      legacy_block<kType>(a[b], d + b * kRepackRows, q + b * kBytes, acc[0]);
      legacy_block<kType>(a[b + 1], d + (b + 1) * kRepackRows, q + (b + 1) * kBytes, acc[1]);
      legacy_block<kType>(a[b + 2], d + (b + 2) * kRepackRows, q + (b + 2) * kBytes, acc[2]);
      legacy_block<kType>(a[b + 3], d + (b + 3) * kRepackRows, q + (b + 3) * kBytes, acc[3]);
    }
    if (b < nb) legacy_block<kType>(a[b], d + b * kRepackRows, q + b * kBytes, acc[0]);
    if (b + 1 < nb) {
      legacy_block<kType>(a[b + 1], d + (b + 1) * kRepackRows, q + (b + 1) * kBytes, acc[1]);
    }
    if (b + 2 < nb) {
      legacy_block<kType>(a[b + 2], d + (b + 2) * kRepackRows, q + (b + 2) * kBytes, acc[2]);
    }
    for (int r = 0; r < kQuads; ++r) {
      const float32x4_t f[4] = {acc[0][r], acc[1][r], acc[2][r], acc[3][r]};
      vst1q_f32(y + 4 * r, sum4(f));
    }
  }

  // Byte s % 4 of every 32-bit lane of v, zero-extended (s < 4 selects the byte).
  static int32x4_t lane_byte(uint8x16_t v, int s) {
    const uint32x4_t x = vshlq_u32(vreinterpretq_u32_u8(v), vdupq_n_s32(-8 * s));
    return vreinterpretq_s32_u32(vandq_u32(x, vdupq_n_u32(0xff)));
  }

  // Q4_K, or Q5_K (Block), whose x16 super-block has the rows' qh columns between the
  // scales and the quants (repack.h).
  template <class Block>
  static void k_group(int64_t nb, const uint8_t* group, size_t /*one group*/, const BlockQ8_K* a,
                      float* y) {
    constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
    constexpr size_t kSuperBytes = kRepackRows * sizeof(Block);
    const uint8x16_t low4 = vdupq_n_u8(15);
    const uint8x16_t low6 = vdupq_n_u8(63);
    const uint8x16_t bit4 = vdupq_n_u8(16);
    float32x4_t sum[kQuads];
    for (float32x4_t& v : sum) v = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K& ab = a[b];
      const uint8_t* blk = group + static_cast<size_t>(b) * kSuperBytes;
      const uint8_t* qh = blk + 64 + 3 * 64;
      const uint8_t* q = kQ5 ? qh + 8 * 64 : qh;
      // S[s], in int16 as vec_dot's vpaddq_s16, split as S = 64 H + L with L in [0, 64):
      // bytes [H0 .. H7, L0 .. L7]. |S| <= 32 * 128 keeps H within int8, so that the mins
      // are 4 SDOT-like dots: sum mn S = 64 (mn . H) + mn . L, exact.
      const int16x8_t bsum = vpaddq_s16(vld1q_s16(ab.bsums), vld1q_s16(ab.bsums + 8));
      const int8x16_t s_hl =
          vcombine_s8(vmovn_s16(vshrq_n_s16(bsum, 6)), vmovn_s16(vandq_s16(bsum, vdupq_n_s16(63))));
      for (int r = 0; r < kQuads; ++r) {
        // k_scales_mins, byte-wise: row i's sc[0..3] in bytes 4i .. 4i + 3 of sc03, and so on.
        const uint8x16_t w0 = vld1q_u8(blk + 64 + 16 * r);
        const uint8x16_t w1 = vld1q_u8(blk + 128 + 16 * r);
        const uint8x16_t w2 = vld1q_u8(blk + 192 + 16 * r);
        const uint8x16_t sc03 = vandq_u8(w0, low6);
        const uint8x16_t m03 = vandq_u8(w1, low6);
        const uint8x16_t sc47 = vorrq_u8(vandq_u8(w2, low4), vshlq_n_u8(vshrq_n_u8(w0, 6), 4));
        const uint8x16_t m47 = vorrq_u8(vshrq_n_u8(w2, 4), vshlq_n_u8(vshrq_n_u8(w1, 6), 4));
        // Row i's mn[0 .. 3] are lane i of m03 and mn[4 .. 7] of m47 (6 bits: int8 too).
        Acc mins_h = Lanes::zero();
        Lanes::template dot<0>(mins_h, vreinterpretq_s8_u8(m03), s_hl);
        Lanes::template dot<1>(mins_h, vreinterpretq_s8_u8(m47), s_hl);
        Acc mins_l = Lanes::start(vshlq_n_s32(Lanes::sums(mins_h), 6));
        Lanes::template dot<2>(mins_l, vreinterpretq_s8_u8(m03), s_hl);
        Lanes::template dot<3>(mins_l, vreinterpretq_s8_u8(m47), s_hl);
        const int32x4_t mins = Lanes::sums(mins_l);
        int32x4_t sumi = vdupq_n_s32(0);
        for (int g = 0; g < 4; ++g) {
          // Sub-blocks 2g (low nibbles of columns 8g .. 8g + 7) and 2g + 1 (high nibbles).
          // Q5_K's fifth bits of column 8g + l are bits 2g and 2g + 1 of qh column l, which
          // USHL by 4 - 2g and 3 - 2g moves to bit 4 and BSL merges: levels 0 .. 31.
          const int8x16_t to_bit4_lo = vdupq_n_s8(static_cast<int8_t>(4 - 2 * g));
          const int8x16_t to_bit4_hi = vdupq_n_s8(static_cast<int8_t>(3 - 2 * g));
          Acc lo = Lanes::zero();
          Acc hi = Lanes::zero();
          for (int half_g = 0; half_g < 2; ++half_g) {
            int8x16_t wl[4];
            int8x16_t wh[4];
            for (int c = 0; c < 4; ++c) {
              const int l = 4 * half_g + c;
              const uint8x16_t w = vld1q_u8(q + (8 * g + l) * 64 + 16 * r);
              uint8x16_t vl = vandq_u8(w, low4);
              uint8x16_t vh = vshrq_n_u8(w, 4);
              if constexpr (kQ5) {
                const uint8x16_t h = vld1q_u8(qh + l * 64 + 16 * r);
                vl = vbslq_u8(bit4, vshlq_u8(h, to_bit4_lo), vl);
                vh = vbslq_u8(bit4, vshlq_u8(h, to_bit4_hi), vh);
              }
              wl[c] = vreinterpretq_s8_u8(vl);
              wh[c] = vreinterpretq_s8_u8(vh);
            }
            dot_columns(lo, wl, vld1q_s8(ab.qs + 64 * g + 16 * half_g));
            dot_columns(hi, wh, vld1q_s8(ab.qs + 64 * g + 32 + 16 * half_g));
          }
          const uint8x16_t sc = g < 2 ? sc03 : sc47;
          sumi = vmlaq_s32(sumi, Lanes::sums(lo), lane_byte(sc, (2 * g) % 4));
          sumi = vmlaq_s32(sumi, Lanes::sums(hi), lane_byte(sc, (2 * g + 1) % 4));
        }
        const float32x4_t d = vmulq_n_f32(halves(blk + 8 * r), ab.d);
        const float32x4_t neg_dmin = vnegq_f32(vmulq_n_f32(halves(blk + 32 + 8 * r), ab.d));
        sum[r] = vfmaq_f32(sum[r], vcvtq_f32_s32(sumi), d);
        sum[r] = vfmaq_f32(sum[r], vcvtq_f32_s32(mins), neg_dmin);
      }
    }
    for (int r = 0; r < kQuads; ++r) vst1q_f32(y + 4 * r, sum[r]);
  }

  // 16 unsigned Q6_K levels q (0 .. 63) from the 4-bit parts `low` and the 2-bit parts in
  // bits 4-5 of `high`: one bit select (BIT).
  static uint8x16_t q6_levels(uint8x16_t low, uint8x16_t high) {
    return vbslq_u8(vdupq_n_u8(0x30), high, low);
  }

  // Byte k of every 32-bit lane of v, sign-extended.
  static int32x4_t signed_byte(int32x4_t v, int k) {
    switch (k) {
      case 0:
        return vshrq_n_s32(vshlq_n_s32(v, 24), 24);
      case 1:
        return vshrq_n_s32(vshlq_n_s32(v, 16), 24);
      case 2:
        return vshrq_n_s32(vshlq_n_s32(v, 8), 24);
      default:
        return vshrq_n_s32(v, 24);
    }
  }

  // Q6_K: the levels are multiplied unsigned, and sumi starts at -32 sum_s sc[s] B[s], with
  // B[s] = bsums[s] the sum of the activations of sub-block s: the same integer as
  // vec_dot's sum_s sc[s] ((q - 32) . a), with no subtraction per weight. That start is
  // formed with the dot policy too: B = 64 H + L with L in [0, 64) (|B| <= 16 * 128 keeps H
  // within int8), so sum sc B = 64 (sc . H) + sc . L, 8 dots of the scale columns.
  static void q6_k_group(int64_t nb, const uint8_t* group, size_t /*one group*/, const BlockQ8_K* a,
                         float* y) {
    constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
    const uint8x16_t low4 = vdupq_n_u8(15);
    const auto* d = reinterpret_cast<const uint16_t*>(group);
    const uint8_t* supers = group + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
    float32x4_t sum[kQuads];
    for (float32x4_t& v : sum) v = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K& ab = a[b];
      const uint8_t* ql = supers + static_cast<size_t>(b) * kSuperBytes;
      const uint8_t* qh = ql + kRepackRows * kQKK / 2;
      const uint8_t* sc = qh + kRepackRows * kQKK / 4;
      const int16x8_t b0 = vld1q_s16(ab.bsums);
      const int16x8_t b1 = vld1q_s16(ab.bsums + 8);
      const int8x16_t b_h =
          vcombine_s8(vmovn_s16(vshrq_n_s16(b0, 6)), vmovn_s16(vshrq_n_s16(b1, 6)));
      const int16x8_t m63 = vdupq_n_s16(63);
      const int8x16_t b_l =
          vcombine_s8(vmovn_s16(vandq_s16(b0, m63)), vmovn_s16(vandq_s16(b1, m63)));
#pragma GCC unroll 4
      for (int r = 0; r < kQuads; ++r) {
        // The 16 int8 scales of each row: scale s is byte s % 4 of column s / 4.
        int8x16_t scales[4];
        for (int k = 0; k < 4; ++k)
          scales[k] = vld1q_s8(reinterpret_cast<const int8_t*>(sc) + 64 * k + 16 * r);
        Acc sb_h = Lanes::zero();
        Lanes::template dot<0>(sb_h, scales[0], b_h);
        Lanes::template dot<1>(sb_h, scales[1], b_h);
        Lanes::template dot<2>(sb_h, scales[2], b_h);
        Lanes::template dot<3>(sb_h, scales[3], b_h);
        Acc sb = Lanes::start(vshlq_n_s32(Lanes::sums(sb_h), 6));
        Lanes::template dot<0>(sb, scales[0], b_l);
        Lanes::template dot<1>(sb, scales[1], b_l);
        Lanes::template dot<2>(sb, scales[2], b_l);
        Lanes::template dot<3>(sb, scales[3], b_l);
        int32x4_t sumi = vnegq_s32(vshlq_n_s32(Lanes::sums(sb), 5));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
          for (int half_c = 0; half_c < 2; ++half_c) {
            // Columns c = 4 half_c .. + 3: sub-blocks 8h + 2p + half_c, p < 4.
            int8x16_t lev[4][4];  // [p][column]
            for (int i = 0; i < 4; ++i) {
              const int c = 4 * half_c + i;
              const uint8x16_t wa = vld1q_u8(ql + (16 * h + c) * 64 + 16 * r);
              const uint8x16_t wb = vld1q_u8(ql + (16 * h + 8 + c) * 64 + 16 * r);
              const uint8x16_t t = vld1q_u8(qh + (8 * h + c) * 64 + 16 * r);
              lev[0][i] = vreinterpretq_s8_u8(q6_levels(vandq_u8(wa, low4), vshlq_n_u8(t, 4)));
              lev[1][i] = vreinterpretq_s8_u8(q6_levels(vandq_u8(wb, low4), vshlq_n_u8(t, 2)));
              lev[2][i] = vreinterpretq_s8_u8(q6_levels(vshrq_n_u8(wa, 4), t));
              lev[3][i] = vreinterpretq_s8_u8(q6_levels(vshrq_n_u8(wb, 4), vshrq_n_u8(t, 2)));
            }
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) {
              Acc acc = Lanes::zero();
              dot_columns(acc, lev[p], vld1q_s8(ab.qs + 128 * h + 32 * p + 16 * half_c));
              const int s = 8 * h + 2 * p + half_c;
              const int32x4_t scale = signed_byte(vreinterpretq_s32_s8(scales[s / 4]), s % 4);
              sumi = vmlaq_s32(sumi, Lanes::sums(acc), scale);
            }
          }
        }
        const float32x4_t dd = vmulq_n_f32(halves(d + b * kRepackRows + 4 * r), ab.d);
        sum[r] = vfmaq_f32(sum[r], vcvtq_f32_s32(sumi), dd);
      }
    }
    for (int r = 0; r < kQuads; ++r) vst1q_f32(y + 4 * r, sum[r]);
  }

  // Every group through kGroup, one after the other (a member, unlike repack.h's
  // run_group_passes, so that the copies compiled with different flags share no symbol).
  template <class Weight, class Act,
            void (*kGroup)(int64_t, const uint8_t*, size_t, const Act*, float*)>
  static void groups(int64_t n, int64_t block_elems, const uint8_t* w, int64_t n_groups,
                     const uint8_t* act, float* y) {
    const int64_t nb = n / block_elems;
    const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(Weight);
    const auto* a = reinterpret_cast<const Act*>(act);
    for (int64_t g = 0; g < n_groups; ++g) {
      kGroup(nb, w + static_cast<size_t>(g) * group_bytes, group_bytes, a, y + g * kRepackRows);
    }
  }

  static void gemv_q4_0(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ4_0, BlockQ8_0, legacy_group<Legacy::kQ4_0>>(n, kQK, w, n_groups, act, y);
  }
  static void gemv_iq4_nl(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                          float* y) {
    groups<BlockIQ4_NL, BlockQ8_0, legacy_group<Legacy::kIQ4_NL>>(n, kQK, w, n_groups, act, y);
  }
  static void gemv_q5_0(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ5_0, BlockQ8_0, legacy_group<Legacy::kQ5_0>>(n, kQK, w, n_groups, act, y);
  }
  static void gemv_q8_0(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ8_0, BlockQ8_0, legacy_group<Legacy::kQ8_0>>(n, kQK, w, n_groups, act, y);
  }
  static void gemv_q4_k(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ4_K, BlockQ8_K, k_group<BlockQ4_K>>(n, kQKK, w, n_groups, act, y);
  }
  static void gemv_q5_k(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ5_K, BlockQ8_K, k_group<BlockQ5_K>>(n, kQKK, w, n_groups, act, y);
  }
  static void gemv_q6_k(int64_t n, const uint8_t* w, int64_t n_groups, const uint8_t* act,
                        float* y) {
    groups<BlockQ6_K, BlockQ8_K, q6_k_group>(n, kQKK, w, n_groups, act, y);
  }
};

}  // namespace qrun::kernels::neon
