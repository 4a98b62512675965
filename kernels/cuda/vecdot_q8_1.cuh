// Integer dot products of one 32-element chunk of a weight row with one BlockQ8_1 of
// activations, per weight type (block layouts: ggml-like/quants.h). Each unpacks four
// weights per 32-bit word and multiplies with __dp4a, so the sum over the chunk is exact;
// the only rounding is in the final scaling by the block scales (a few float operations).
// The offset types (Q4_0, Q5_0, Q6_K) subtract offset * sum(activations) from the integer
// sum; the min types (Q4_K, Q5_K) subtract dmin * m * sum.
#pragma once

#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace vecdot {

// The 6-bit scale and min of sub-block s of a Q4_K/Q5_K scales array (quants.h).
__device__ __forceinline__ void k_scale_min(const uint8_t* b, int s, int* sc, int* m) {
  if (s < 4) {
    *sc = b[s] & 63;
    *m = b[s + 4] & 63;
  } else {
    *sc = (b[s + 4] & 15) | ((b[s - 4] >> 6) << 4);
    *m = (b[s + 4] >> 4) | ((b[s] >> 6) << 4);
  }
}

__device__ __forceinline__ const int* act_ints(const BlockQ8_1& a) {
  return reinterpret_cast<const int*>(a.qs);
}

struct Q4_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  // x = d * (q - 8); qs[j]: q[j] low nibble, q[j + 16] high nibble.
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + c * kBlockBytes;
    const int* aq = act_ints(a);
    int sumi = 0;
    for (int i = 0; i < 4; ++i) {
      const int v = load_i32_a2(blk + 2 + 4 * i);
      sumi = __dp4a(v & 0x0F0F0F0F, aq[i], sumi);
      sumi = __dp4a((v >> 4) & 0x0F0F0F0F, aq[i + 4], sumi);
    }
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
    return static_cast<float>(sumi - 8 * a.sum) * (d * a.d);
  }
};

struct Q5_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 22;
  // x = d * (q - 16); bit 4 of q[i] is bit i of qh, bits 0-3 packed as Q4_0.
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + c * kBlockBytes;
    const int* aq = act_ints(a);
    const uint32_t qh = static_cast<uint32_t>(load_i32_a2(blk + 2));
    int sumi = 0;
    for (int i = 0; i < 4; ++i) {
      const int v = load_i32_a2(blk + 6 + 4 * i);
      int lo = v & 0x0F0F0F0F;
      int hi = (v >> 4) & 0x0F0F0F0F;
      for (int k = 0; k < 4; ++k) {
        lo |= static_cast<int>(((qh >> (4 * i + k)) & 1u) << (8 * k + 4));
        hi |= static_cast<int>(((qh >> (16 + 4 * i + k)) & 1u) << (8 * k + 4));
      }
      sumi = __dp4a(lo, aq[i], sumi);
      sumi = __dp4a(hi, aq[i + 4], sumi);
    }
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
    return static_cast<float>(sumi - 16 * a.sum) * (d * a.d);
  }
};

struct Q8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 34;
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + c * kBlockBytes;
    const int* aq = act_ints(a);
    int sumi = 0;
    for (int i = 0; i < 8; ++i) sumi = __dp4a(load_i32_a2(blk + 2 + 4 * i), aq[i], sumi);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
    return static_cast<float>(sumi) * (d * a.d);
  }
};

struct Q4_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 144;
  // Chunk c is sub-block s = c % 8 of super-block c / 8: x = d * sc[s] * q - dmin * m[s],
  // q in the low (s even) or high (s odd) nibbles of qs[32 * (s / 2) ..+32].
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const int s = static_cast<int>(c % 8);
    const uint8_t* qs = blk + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    const int* aq = act_ints(a);
    int sumi = 0;
    for (int i = 0; i < 8; ++i) {
      sumi = __dp4a((load_i32_a2(qs + 4 * i) >> shift) & 0x0F0F0F0F, aq[i], sumi);
    }
    int sc = 0, m = 0;
    k_scale_min(blk + 4, s, &sc, &m);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
    const float dmin = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk + 2));
    return a.d * (d * static_cast<float>(sc * sumi) - dmin * static_cast<float>(m * a.sum));
  }
};

struct Q5_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 176;
  // As Q4_K (qs at byte 48), with bit 4 of element l of sub-block s in bit s of qh[l].
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const int s = static_cast<int>(c % 8);
    const uint8_t* qs = blk + 48 + 32 * (s / 2);
    const uint8_t* qh = blk + 16;
    const int shift = 4 * (s % 2);
    const int* aq = act_ints(a);
    int sumi = 0;
    for (int i = 0; i < 8; ++i) {
      const int lo = (load_i32_a2(qs + 4 * i) >> shift) & 0x0F0F0F0F;
      const uint32_t h = static_cast<uint32_t>(load_i32_a2(qh + 4 * i));
      const int hi = static_cast<int>(((h >> s) & 0x01010101u) << 4);
      sumi = __dp4a(lo | hi, aq[i], sumi);
    }
    int sc = 0, m = 0;
    k_scale_min(blk + 4, s, &sc, &m);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
    const float dmin = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk + 2));
    return a.d * (d * static_cast<float>(sc * sumi) - dmin * static_cast<float>(m * a.sum));
  }
};

struct Q6_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 210;
  // Chunk c is elements 32s ..+32 (s = c % 8) of super-block c / 8, i.e. 128h + 32r + l
  // with h = s / 4, r = s % 4: low 4 bits in ql[64h + 32(r & 1) + l] (high nibble when
  // r >= 2), bits 4-5 in bit pair r of qh[32h + l]. x = d * scales[2s or 2s + 1] * (q - 32).
  __device__ __forceinline__ static float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const int s = static_cast<int>(c % 8);
    const int h = s / 4;
    const int r = s % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (r & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    const int nibble_shift = 4 * (r >> 1);
    const int* aq = act_ints(a);
    int sumi[2] = {0, 0};
    int suma[2] = {0, 0};
    for (int i = 0; i < 8; ++i) {
      const int lo = (load_i32_a2(ql + 4 * i) >> nibble_shift) & 0x0F0F0F0F;
      const uint32_t hb = static_cast<uint32_t>(load_i32_a2(qh + 4 * i));
      const int hi = static_cast<int>(((hb >> (2 * r)) & 0x03030303u) << 4);
      sumi[i / 4] = __dp4a(lo | hi, aq[i], sumi[i / 4]);
      suma[i / 4] = __dp4a(0x01010101, aq[i], suma[i / 4]);
    }
    const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
    const int total =
        scales[2 * s] * (sumi[0] - 32 * suma[0]) + scales[2 * s + 1] * (sumi[1] - 32 * suma[1]);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk + 208));
    return static_cast<float>(total) * (d * a.d);
  }
};

}  // namespace vecdot

QRUN_CUDA_NAMESPACE_END
