// The signed integer levels and scales of the quantized weight blocks, decoded into NEON
// registers: shared by the dot products (dot_impl.h) and the gemm tiles (gemm_impl.h).
// Every function is a static member of a class template whose parameter is a policy type
// local to the including file, so copies compiled with different -march flags (baseline
// and *_dotprod objects) share no symbol. Only files in neon/ include this header.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ggml-like/quants.h"

namespace qrun::kernels::neon {

template <class Tag>
struct BlockLevels {
  static float half(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
  }

  // Q4_0 levels q - 8 of elements 0-15 (lo) and 16-31 (hi).
  static void q4_0_levels(const BlockQ4_0& x, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(x.qs);
    const int8x16_t eight = vdupq_n_s8(8);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(15))), eight);
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
  }

  // Q4_1 levels q in [0, 15] (unsigned: the block's minimum m carries the offset) of
  // elements 0-15 (lo) and 16-31 (hi).
  static void q4_1_levels(const BlockQ4_1& x, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(x.qs);
    lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(15)));
    hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
  }

  // The high bits of a Q5_0 or Q5_1 block: lane i of lo (hi) is all ones where bit i
  // (16 + i) of the little-endian qh is set, else 0. One TBL per half spreads qh byte i / 8
  // (+ 2 for the high half) to lane i, and CMTST against 1, 2, 4, ... 128 tests each lane's
  // bit.
  static void q5_high_masks(const uint8_t* qh_bytes, uint8x16_t& lo, uint8x16_t& hi) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, sizeof qh);
    const uint8x16_t h = vreinterpretq_u8_u32(vdupq_n_u32(qh));
    const uint8x16_t bits = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
    const uint8x16_t spread_lo = vcombine_u8(vdup_n_u8(0), vdup_n_u8(1));
    const uint8x16_t spread_hi = vcombine_u8(vdup_n_u8(2), vdup_n_u8(3));
    lo = vtstq_u8(vqtbl1q_u8(h, spread_lo), bits);
    hi = vtstq_u8(vqtbl1q_u8(h, spread_hi), bits);
  }

  // Q5_0 levels q - 16: the low 4 bits as Q4_0's, bit 4 from q5_high_masks; the level is
  // (q & 15) - (bit ? 0 : 16): a BIC of 16 by the mask, then one subtraction.
  static void q5_0_levels(const BlockQ5_0& x, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(x.qs);
    uint8x16_t h_lo;
    uint8x16_t h_hi;
    q5_high_masks(x.qh, h_lo, h_hi);
    const uint8x16_t sixteen = vdupq_n_u8(16);
    const uint8x16_t off_lo = vbicq_u8(sixteen, h_lo);
    const uint8x16_t off_hi = vbicq_u8(sixteen, h_hi);
    lo = vreinterpretq_s8_u8(vsubq_u8(vandq_u8(q, vdupq_n_u8(15)), off_lo));
    hi = vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(q, 4), off_hi));
  }

  // Q5_1 levels q in [0, 31] (unsigned, as Q4_1's): (q & 15) | (16 & mask), the mask from
  // q5_high_masks.
  static void q5_1_levels(const BlockQ5_1& x, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(x.qs);
    uint8x16_t h_lo;
    uint8x16_t h_hi;
    q5_high_masks(x.qh, h_lo, h_hi);
    const uint8x16_t sixteen = vdupq_n_u8(16);
    lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(15)), vandq_u8(h_lo, sixteen)));
    hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(h_hi, sixteen)));
  }

  static void q8_0_levels(const BlockQ8_0& x, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(x.qs);
    hi = vld1q_s8(x.qs + 16);
  }

  // kIq4Values as one vector, its bytes packed at compile time (so that no object of this
  // header refers to the table's symbol).
  static int8x16_t iq4_table() {
    constexpr auto pack8 = [](int from) {
      uint64_t v = 0;
      for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(kIq4Values[from + i]);
      return v;
    };
    constexpr uint64_t kLow = pack8(0);
    constexpr uint64_t kHigh = pack8(8);
    return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(kLow), vcreate_u64(kHigh)));
  }

  // IQ4_NL levels kIq4Values[q] (signed, -127 .. 113) of the 32 elements packed in 16
  // bytes as Q4_0's: one TBL each of the low nibbles (elements 0-15, lo) and the high ones
  // (16-31, hi). IQ4_XS's sub-blocks are packed the same way.
  static void iq4_levels(const uint8_t* qs, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t table = iq4_table();
    const uint8x16_t q = vld1q_u8(qs);
    lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(15)));
    hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
  }

  static void iq4_nl_levels(const BlockIQ4_NL& x, int8x16_t& lo, int8x16_t& hi) {
    iq4_levels(x.qs, lo, hi);
  }

  // The block scales ls - 32 (-32 .. 31) of the 8 sub-blocks of an IQ4_XS super-block
  // (layout in quants.h: low 4 bits from scales_l, high 2 from scales_h).
  static void iq4_xs_scales(const BlockIQ4_XS& x, int32_t* ls) {
    for (int s = 0; s < kQKK / kQK; ++s) {
      const int low = (x.scales_l[s / 2] >> (4 * (s % 2))) & 15;
      const int high = (x.scales_h >> (2 * s)) & 3;
      ls[s] = (low | high << 4) - 32;
    }
  }

  // The 2-bit parts (0 .. 3) of elements 128h .. 128h + 127 of a Q2_K or Q3_K super-block,
  // 16 per vector in element order (vector v is sub-block 8h + v): element 128h + 32j + l
  // is bits 2j, 2j + 1 of qs[32h + l], so vectors 2j and 2j + 1 shift the two 16-byte
  // halves of qs[32h ..+32) right by 2j.
  static void two_bit_levels(const uint8_t* qs, int h, uint8x16_t* q) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8x16_t b0 = vld1q_u8(qs + 32 * h);
    const uint8x16_t b1 = vld1q_u8(qs + 32 * h + 16);
    q[0] = vandq_u8(b0, m3);
    q[1] = vandq_u8(b1, m3);
    q[2] = vandq_u8(vshrq_n_u8(b0, 2), m3);
    q[3] = vandq_u8(vshrq_n_u8(b1, 2), m3);
    q[4] = vandq_u8(vshrq_n_u8(b0, 4), m3);
    q[5] = vandq_u8(vshrq_n_u8(b1, 4), m3);
    q[6] = vshrq_n_u8(b0, 6);
    q[7] = vshrq_n_u8(b1, 6);
  }

  // The signed Q3_K levels q - 4 (-4 .. 3) of elements 128h .. 128h + 127, laid out as
  // two_bit_levels: bit 2 of element 128h + 32j + l is bit 4h + j of hmask[l], so the level
  // is the 2-bit part minus (bit ? 0 : 4): CMTST of the hmask halves against that bit, a
  // BIC of 4 by the mask, one subtraction.
  static void q3_k_levels(const BlockQ3_K& x, int h, int8x16_t* q) {
    uint8x16_t low[8];
    two_bit_levels(x.qs, h, low);
    const uint8x16_t hm0 = vld1q_u8(x.hmask);
    const uint8x16_t hm1 = vld1q_u8(x.hmask + 16);
    const uint8x16_t four = vdupq_n_u8(4);
    for (int j = 0; j < 4; ++j) {
      const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1u << (4 * h + j)));
      q[2 * j] = vreinterpretq_s8_u8(vsubq_u8(low[2 * j], vbicq_u8(four, vtstq_u8(hm0, bit))));
      q[2 * j + 1] =
          vreinterpretq_s8_u8(vsubq_u8(low[2 * j + 1], vbicq_u8(four, vtstq_u8(hm1, bit))));
    }
  }

  // The 16 scales sc - 32 (-32 .. 31) of a Q3_K super-block, as quants.h's q3_k_scale
  // (written out here so that no *_dotprod object holds a copy of that inline function).
  static void q3_k_scales(const uint8_t* b, int32_t* sc) {
    for (int s = 0; s < kQKK / 16; ++s) {
      const int low = (b[s % 8] >> (4 * (s / 8))) & 15;
      const int high = (b[8 + s % 4] >> (2 * (s / 4))) & 3;
      sc[s] = (low | high << 4) - 32;
    }
  }

  // The 6-bit scales and mins of a Q4_K / Q5_K super-block (layout in quants.h).
  static void k_scales_mins(const uint8_t* b, uint8_t* sc, uint8_t* mn) {
    for (int s = 0; s < 4; ++s) {
      sc[s] = b[s] & 63;
      mn[s] = b[s + 4] & 63;
      sc[s + 4] = static_cast<uint8_t>((b[s + 8] & 15) | (b[s] >> 6) << 4);
      mn[s + 4] = static_cast<uint8_t>((b[s + 8] >> 4) | (b[s + 4] >> 6) << 4);
    }
  }

  // The levels q (not offset: the mins carry that) of elements 64g .. 64g + 63 of a Q4_K or
  // Q5_K super-block, 16 per vector in element order: sub-block 2g in out[0..2), 2g + 1 in
  // out[2..4). Q5_K's bit 4 of the levels of group g comes from bit 2g (low half) or
  // 2g + 1 (high half) of the 32 qh bytes.
  template <class Block>
  static void scale_min_levels(const Block& x, int g, int8x16_t* out) {
    const uint8x16_t m4 = vdupq_n_u8(15);
    const uint8x16_t q0 = vld1q_u8(x.qs + 32 * g);
    const uint8x16_t q1 = vld1q_u8(x.qs + 32 * g + 16);
    uint8x16_t l0 = vandq_u8(q0, m4);
    uint8x16_t l1 = vandq_u8(q1, m4);
    uint8x16_t h0 = vshrq_n_u8(q0, 4);
    uint8x16_t h1 = vshrq_n_u8(q1, 4);
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      const uint8x16_t b4 = vdupq_n_u8(16);
      const uint8x16_t qh0 = vld1q_u8(x.qh);
      const uint8x16_t qh1 = vld1q_u8(x.qh + 16);
      const int8x16_t to_lo = vdupq_n_s8(static_cast<int8_t>(4 - 2 * g));  // < 0: right
      const int8x16_t to_hi = vdupq_n_s8(static_cast<int8_t>(3 - 2 * g));
      l0 = vorrq_u8(l0, vandq_u8(vshlq_u8(qh0, to_lo), b4));
      l1 = vorrq_u8(l1, vandq_u8(vshlq_u8(qh1, to_lo), b4));
      h0 = vorrq_u8(h0, vandq_u8(vshlq_u8(qh0, to_hi), b4));
      h1 = vorrq_u8(h1, vandq_u8(vshlq_u8(qh1, to_hi), b4));
    }
    out[0] = vreinterpretq_s8_u8(l0);
    out[1] = vreinterpretq_s8_u8(l1);
    out[2] = vreinterpretq_s8_u8(h0);
    out[3] = vreinterpretq_s8_u8(h1);
  }

  // 16 signed Q6_K levels q - 32 from 4-bit parts `low` and 2-bit parts in bits 4-5 of `high`.
  static int8x16_t q6_levels(uint8x16_t low, uint8x16_t high) {
    const uint8x16_t q = vorrq_u8(low, vandq_u8(high, vdupq_n_u8(0x30)));
    return vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32));
  }

  // The signed levels q - 32 of elements 128h .. 128h + 127 of a Q6_K super-block, 16 per
  // vector in element order (vector g is sub-block 8h + g). Elements 0-31: low nibbles of
  // ql[0..32), qh bits 0-1; 32-63: low nibbles of ql[32..64), bits 2-3; 64-95: high
  // nibbles of ql[0..32), bits 4-5; 96-127: high nibbles of ql[32..64), bits 6-7.
  static void q6_k_levels(const BlockQ6_K& x, int h, int8x16_t* q) {
    const uint8x16_t m4 = vdupq_n_u8(15);
    const uint8_t* ql = x.ql + 64 * h;
    const uint8_t* qh = x.qh + 32 * h;
    const uint8x16_t l0 = vld1q_u8(ql);
    const uint8x16_t l1 = vld1q_u8(ql + 16);
    const uint8x16_t l2 = vld1q_u8(ql + 32);
    const uint8x16_t l3 = vld1q_u8(ql + 48);
    const uint8x16_t h0 = vld1q_u8(qh);
    const uint8x16_t h1 = vld1q_u8(qh + 16);
    q[0] = q6_levels(vandq_u8(l0, m4), vshlq_n_u8(h0, 4));
    q[1] = q6_levels(vandq_u8(l1, m4), vshlq_n_u8(h1, 4));
    q[2] = q6_levels(vandq_u8(l2, m4), vshlq_n_u8(h0, 2));
    q[3] = q6_levels(vandq_u8(l3, m4), vshlq_n_u8(h1, 2));
    q[4] = q6_levels(vshrq_n_u8(l0, 4), h0);
    q[5] = q6_levels(vshrq_n_u8(l1, 4), h1);
    q[6] = q6_levels(vshrq_n_u8(l2, 4), vshrq_n_u8(h0, 2));
    q[7] = q6_levels(vshrq_n_u8(l3, 4), vshrq_n_u8(h1, 2));
  }
};

}  // namespace qrun::kernels::neon
