// Integer dot products of one 32-element chunk of a weight row with one BlockQ8_1 of
// activations, per weight type (block layouts: ggml-like/quants.h). A chunk's weights are
// kWords 32-bit words; each word unpacks to four weights per activation word, multiplied
// with __dp4a, so the integer sum over the chunk is exact in any order and however the
// words are split among threads. The only rounding is in finish(), the scaling of the
// chunk's integer total by the block scales (a few float operations).
// The offset types (Q4_0, Q5_0, Q6_K) subtract offset * sum(activations) from the integer
// sum; the min types (Q4_K, Q5_K) subtract dmin * m * sum; Q4_1 and Q5_1 add their float
// minimum m times the activations' sum, as llama.cpp's CUDA vec_dot_q4_1_q8_1:
// sumi * (d * a.d) + m * (a.d * a.sum), where d * a.d (two F16 values) and a.d * a.sum (an
// F16 value and an integer of at most 13 bits) are exact in float, so the chunk rounds only
// in its two products and their sum (nvcc may fuse the first product into the sum: one
// rounding fewer, the same bound).
// IQ4_NL and IQ4_XS index a table of 16 signed levels with their nibbles: part() looks up
// four levels at a time (iq4_levels) and multiplies them with __dp4a as Q8_0's bytes; IQ4_NL
// scales the chunk as Q8_0, IQ4_XS first multiplies the integer sum by the sub-block's
// ls - 32 (exact in int and in its conversion to float: |sumi| <= 32 * 127 * 127, times 32
// under 2^24), as llama.cpp's CUDA vec_dot_iq4_xs_q8_1.
// Q2_K and Q3_K scale each 16-element half of a chunk apart: part() multiplies each half's
// integer dot by its 4-bit (Q2_K) or 6-bit signed (Q3_K: sc - 32) scale, as Q6_K's; Q2_K's
// min term dmin * (m_0 * sum(a_0) + m_1 * sum(a_1)), from the halves' activation sums,
// is finish()'s (integers again, exact), as llama.cpp's CUDA vec_dot_q2_K_q8_1 and
// vec_dot_q3_K_q8_1 compute them, but with one float product per chunk in place of one
// per half.
// Each type has: load<N, kA16>(row, c, w0, f), the N words w0 ..+N of chunk c (w0 a
// multiple of N; kA16: the row is 16-byte aligned, for the types whose words allow wider
// loads); part(row, c, f, aq, w0), their integer dot with the activation words aq; and
// finish(row, c, a, total), the chunk's float value from the sum of every part.
#pragma once

#include <cstdint>
#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace vecdot {

// The weight words one thread holds of a chunk: q the packed low bits, h the high bits
// where the type keeps them apart (Q5_0, Q5_1: h[0] = qh of the block; Q5_K, Q6_K: per
// word).
template <int N>
struct Words {
  int q[N];
  int h[N];
};

// N consecutive 32-bit words at p into out: one 8- or 16-byte load where p is aligned to
// it (kAligned), else 32-bit loads (kAligned with N = 1), else 16-bit pairs.
template <int N, bool kAligned>
__device__ __forceinline__ void load_words(const uint8_t* p, int* out) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(out, p, sizeof(int) * N);
#else
  if constexpr (kAligned && N == 4) {
    load_16b(p, out);
  } else if constexpr (kAligned && N == 2) {
    const int2 v = *reinterpret_cast<const int2*>(p);
    out[0] = v.x;
    out[1] = v.y;
  } else if constexpr (kAligned) {
    for (int j = 0; j < N; ++j) out[j] = load_i32_a4(p + 4 * j);
  } else {
    for (int j = 0; j < N; ++j) out[j] = load_i32_a2(p + 4 * j);
  }
#endif
}

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

// Sub-block s's value from its integer dot sumi, for the Q4_K/Q5_K super-block at blk
// (d, dmin, scales: bytes 0-15 of both).
__device__ __forceinline__ float k_finish(const uint8_t* blk, int s, const BlockQ8_1& a, int sumi) {
  int sc = 0, m = 0;
  k_scale_min(blk + 4, s, &sc, &m);
  const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
  const float dmin = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk + 2));
  return a.d * (d * static_cast<float>(sc * sumi) - dmin * static_cast<float>(m * a.sum));
}

__device__ __forceinline__ const int* act_ints(const BlockQ8_1& a) {
  return reinterpret_cast<const int*>(a.qs);
}

__device__ __forceinline__ float load_f16(const uint8_t* p) {
  return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
}

struct Q4_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  static constexpr int kWords = 4;
  // x = d * (q - 8); qs[j]: q[j] low nibble, q[j + 16] high nibble, so word i pairs with
  // activation words i and i + 4.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + c * kBlockBytes + 2 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t, const Words<N>& f,
                                             const int* aq, int w0) {
    int sumi = 0;
    for (int j = 0; j < N; ++j) {
      sumi = __dp4a(f.q[j] & 0x0F0F0F0F, aq[w0 + j], sumi);
      sumi = __dp4a((f.q[j] >> 4) & 0x0F0F0F0F, aq[w0 + j + 4], sumi);
    }
    return sumi;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    const float d = load_f16(row + c * kBlockBytes);
    return static_cast<float>(sumi - 8 * a.sum) * (d * a.d);
  }
};

struct Q5_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 22;
  static constexpr int kWords = 4;
  // x = d * (q - 16); bit 4 of q[i] is bit i of qh, bits 0-3 packed as Q4_0.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* blk = row + c * kBlockBytes;
    f.h[0] = load_i32_a2(blk + 2);
    load_words<N, false>(blk + 6 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t, const Words<N>& f,
                                             const int* aq, int w0) {
    const uint32_t qh = static_cast<uint32_t>(f.h[0]);
    int sumi = 0;
    for (int j = 0; j < N; ++j) {
      const int i = w0 + j;
      int lo = f.q[j] & 0x0F0F0F0F;
      int hi = (f.q[j] >> 4) & 0x0F0F0F0F;
      for (int k = 0; k < 4; ++k) {
        lo |= static_cast<int>(((qh >> (4 * i + k)) & 1u) << (8 * k + 4));
        hi |= static_cast<int>(((qh >> (16 + 4 * i + k)) & 1u) << (8 * k + 4));
      }
      sumi = __dp4a(lo, aq[i], sumi);
      sumi = __dp4a(hi, aq[i + 4], sumi);
    }
    return sumi;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    const float d = load_f16(row + c * kBlockBytes);
    return static_cast<float>(sumi - 16 * a.sum) * (d * a.d);
  }
};

// The minimum types: x = d * q + m. Their nibbles (and Q5_1's high bits) are those of
// Q4_0 and Q5_0 at other offsets, so part() is theirs.
__device__ __forceinline__ float min_finish(const uint8_t* blk, const BlockQ8_1& a, int sumi) {
  const float d = load_f16(blk);
  const float m = load_f16(blk + 2);
  return static_cast<float>(sumi) * (d * a.d) + m * (a.d * static_cast<float>(a.sum));
}

struct Q4_1 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 20;
  static constexpr int kWords = 4;
  // d at byte 0, m at 2, qs at 4, packed as Q4_0's.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + c * kBlockBytes + 4 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t* row, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    return Q4_0::part(row, c, f, aq, w0);
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    return min_finish(row + c * kBlockBytes, a, sumi);
  }
};

struct Q5_1 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 24;
  static constexpr int kWords = 4;
  // d at byte 0, m at 2, qh at 4, qs at 8, packed as Q5_0's.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* blk = row + c * kBlockBytes;
    f.h[0] = load_i32_a2(blk + 4);
    load_words<N, false>(blk + 8 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t* row, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    return Q5_0::part(row, c, f, aq, w0);
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    return min_finish(row + c * kBlockBytes, a, sumi);
  }
};

struct Q8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 34;
  static constexpr int kWords = 8;
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + c * kBlockBytes + 2 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t, const Words<N>& f,
                                             const int* aq, int w0) {
    int sumi = 0;
    for (int j = 0; j < N; ++j) sumi = __dp4a(f.q[j], aq[w0 + j], sumi);
    return sumi;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    const float d = load_f16(row + c * kBlockBytes);
    return static_cast<float>(sumi) * (d * a.d);
  }
};

// Levels 4k .. 4k + 3 of kIq4Values (quants.h) as the bytes of one word, low byte first:
// the table in four words, constants of the kernels' code.
constexpr uint32_t iq4_table_word(int k) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i)
    w |= static_cast<uint32_t>(static_cast<uint8_t>(kIq4Values[4 * k + i])) << (8 * i);
  return w;
}
inline constexpr uint32_t kIq4Word0 = iq4_table_word(0);
inline constexpr uint32_t kIq4Word1 = iq4_table_word(1);
inline constexpr uint32_t kIq4Word2 = iq4_table_word(2);
inline constexpr uint32_t kIq4Word3 = iq4_table_word(3);

// The levels of four indices, one in the low nibble of each byte of q (the high nibbles
// zero), as four int8 bytes in the same order. __byte_perm picks bytes by the low 3 bits of
// each selector nibble: the indices, packed into one selector, pick among levels 0-7 and
// among 8-15, then bit 3 of each index picks the byte of one or the other.
__device__ __forceinline__ int iq4_levels(uint32_t q) {
  const uint32_t t = q | q >> 4;  // indices 0, 1 in bits 0-7; 2, 3 in 16-23
  const uint32_t sel = (t & 0xFFu) | ((t >> 8) & 0xFF00u);  // index n in nibble n
  const uint32_t low = __byte_perm(kIq4Word0, kIq4Word1, sel);
  const uint32_t high = __byte_perm(kIq4Word2, kIq4Word3, sel);
  return static_cast<int>(__byte_perm(low, high, 0x3210u | ((sel & 0x8888u) >> 1)));
}

// The level of index q (0 .. 15).
__device__ __forceinline__ int iq4_level(int q) {
  return static_cast<int8_t>(iq4_levels(static_cast<uint32_t>(q)) & 0xFFu);
}

// The integer dot of an IQ4 chunk's words (qs bytes 4 w0 ..+4N, packed as Q4_0's) with the
// activation words.
template <int N>
__device__ __forceinline__ int iq4_part(const Words<N>& f, const int* aq, int w0) {
  int sumi = 0;
  for (int j = 0; j < N; ++j) {
    const uint32_t q = static_cast<uint32_t>(f.q[j]);
    sumi = __dp4a(iq4_levels(q & 0x0F0F0F0Fu), aq[w0 + j], sumi);
    sumi = __dp4a(iq4_levels((q >> 4) & 0x0F0F0F0Fu), aq[w0 + j + 4], sumi);
  }
  return sumi;
}

struct IQ4_NL {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  static constexpr int kWords = 4;
  // x = d * level[q]; d at byte 0, qs at 2 as Q4_0's.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + c * kBlockBytes + 2 + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t, const Words<N>& f,
                                             const int* aq, int w0) {
    return iq4_part(f, aq, w0);
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    const float d = load_f16(row + c * kBlockBytes);
    return static_cast<float>(sumi) * (d * a.d);
  }
};

// The 6-bit scale ls (the sub-block scale is d * (ls - 32)) of sub-block s of the IQ4_XS
// super-block at blk: low 4 bits in nibble s of scales_l (bytes 4-7), high 2 in bits 2s,
// 2s + 1 of scales_h (bytes 2-3).
__device__ __forceinline__ int iq4_xs_ls(const uint8_t* blk, int s) {
  const uint32_t scales_h = *reinterpret_cast<const uint16_t*>(blk + 2);
  return ((blk[4 + s / 2] >> (4 * (s % 2))) & 15) | static_cast<int>((scales_h >> (2 * s)) & 3)
                                                        << 4;
}

// Chunk c is sub-block s = c % 8 of super-block c / 8: its 16 qs bytes at byte 8 + 16s, packed
// as an IQ4_NL block's.
struct IQ4_XS {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 136;
  static constexpr int kWords = 4;
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + (c / 8) * kBlockBytes + 8 + 16 * (c % 8) + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t, const Words<N>& f,
                                             const int* aq, int w0) {
    return iq4_part(f, aq, w0);
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const int ls = iq4_xs_ls(blk, static_cast<int>(c % 8));
    return static_cast<float>(sumi * (ls - 32)) * (load_f16(blk) * a.d);
  }
};

// Chunk c of the K types is sub-block s = c % 8 of super-block c / 8.
struct Q4_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 144;
  static constexpr int kWords = 8;
  // x = d * sc[s] * q - dmin * m[s], q in the low (s even) or high (s odd) nibbles of
  // qs[32 * (s / 2) ..+32] (qs at byte 16: 16-byte aligned in an aligned row).
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* qs = row + (c / 8) * kBlockBytes + 16 + 32 * (c % 8 / 2);
    load_words<N, kA16>(qs + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    const int shift = 4 * static_cast<int>(c % 2);
    int sumi = 0;
    for (int j = 0; j < N; ++j) sumi = __dp4a((f.q[j] >> shift) & 0x0F0F0F0F, aq[w0 + j], sumi);
    return sumi;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    return k_finish(row + (c / 8) * kBlockBytes, static_cast<int>(c % 8), a, sumi);
  }
};

struct Q5_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 176;
  static constexpr int kWords = 8;
  // As Q4_K (qs at byte 48), with bit 4 of element l of sub-block s in bit s of qh[l]
  // (qh at byte 16).
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    load_words<N, kA16>(blk + 48 + 32 * (c % 8 / 2) + 4 * w0, f.q);
    load_words<N, kA16>(blk + 16 + 4 * w0, f.h);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t*, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    const int s = static_cast<int>(c % 8);
    const int shift = 4 * (s % 2);
    int sumi = 0;
    for (int j = 0; j < N; ++j) {
      const int lo = (f.q[j] >> shift) & 0x0F0F0F0F;
      const int hi = static_cast<int>(((static_cast<uint32_t>(f.h[j]) >> s) & 0x01010101u) << 4);
      sumi = __dp4a(lo | hi, aq[w0 + j], sumi);
    }
    return sumi;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int sumi) {
    return k_finish(row + (c / 8) * kBlockBytes, static_cast<int>(c % 8), a, sumi);
  }
};

struct Q6_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 210;
  static constexpr int kWords = 8;
  // Chunk c is elements 32s ..+32 of its super-block, i.e. 128h + 32r + l with h = s / 4,
  // r = s % 4: low 4 bits in ql[64h + 32(r & 1) + l] (high nibble when r >= 2), bits 4-5
  // in bit pair r of qh[32h + l]. x = d * scales[2s + l / 16] * (q - 32): words 0-3 take
  // the first scale, 4-7 the second, and part() returns the scaled integer.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const int s = static_cast<int>(c % 8);
    const int h = s / 4;
    const int r = s % 4;
    load_words<N, false>(blk + 64 * h + 32 * (r & 1) + 4 * w0, f.q);
    load_words<N, false>(blk + 128 + 32 * h + 4 * w0, f.h);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t* row, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    const int s = static_cast<int>(c % 8);
    const int r = s % 4;
    const int nibble_shift = 4 * (r >> 1);
    const int8_t* scales = reinterpret_cast<const int8_t*>(row + (c / 8) * kBlockBytes + 192);
    int total = 0, sumi = 0, suma = 0;
    for (int j = 0; j < N; ++j) {
      const int lo = (f.q[j] >> nibble_shift) & 0x0F0F0F0F;
      const int hi =
          static_cast<int>(((static_cast<uint32_t>(f.h[j]) >> (2 * r)) & 0x03030303u) << 4);
      sumi = __dp4a(lo | hi, aq[w0 + j], sumi);
      suma = __dp4a(0x01010101, aq[w0 + j], suma);
      if ((w0 + j) % 4 == 3 || j == N - 1) {  // the end of a half (or of the part)
        total += scales[2 * s + (w0 + j) / 4] * (sumi - 32 * suma);
        sumi = 0;
        suma = 0;
      }
    }
    return total;
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int total) {
    const float d = load_f16(row + (c / 8) * kBlockBytes + 208);
    return static_cast<float>(total) * (d * a.d);
  }
};

// The 2-bit quants of chunk c of a Q2_K or Q3_K super-block (packed alike: chunk s = c % 8
// is bits 2 (s % 4), 2 (s % 4) + 1 of qs[32 (s / 4) ..+32]) from its words, four a word.
__device__ __forceinline__ int k_two_bits(int q, int64_t c) {
  return (q >> (2 * static_cast<int>(c % 4))) & 0x03030303;
}

// Sums, for a Q2_K or Q3_K chunk, the dots of words w0 ..+N (lo[j]: four quants of word
// w0 + j) with the activation words times scale(half) per 16-element half (words 0-3 and
// 4-7): sum over halves of scale(half) * (dot - offset * sum(a)), exact in int.
template <int N, class Scale>
__device__ __forceinline__ int k_halves(const int* lo, const int* aq, int w0, int offset,
                                        Scale scale) {
  int total = 0, sumi = 0, suma = 0;
  for (int j = 0; j < N; ++j) {
    sumi = __dp4a(lo[j], aq[w0 + j], sumi);
    if (offset != 0) suma = __dp4a(0x01010101, aq[w0 + j], suma);
    if ((w0 + j) % 4 == 3 || j == N - 1) {  // the end of a half (or of the part)
      total += scale((w0 + j) / 4) * (sumi - offset * suma);
      sumi = 0;
      suma = 0;
    }
  }
  return total;
}

// Chunk c is sub-block s = c % 8 of super-block c / 8, i.e. its scale bytes 2s and 2s + 1
// (scale in the low nibble, min in the high).
struct Q2_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 84;
  static constexpr int kWords = 8;
  // x = d * (sc & 15) * q - dmin * (sc >> 4): qs at byte 16, d at 80, dmin at 82.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    load_words<N, false>(row + (c / 8) * kBlockBytes + 16 + 32 * (c % 8 / 4) + 4 * w0, f.q);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t* row, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    const uint8_t* sc = row + (c / 8) * kBlockBytes + 2 * (c % 8);
    int lo[N];
    for (int j = 0; j < N; ++j) lo[j] = k_two_bits(f.q[j], c);
    return k_halves<N>(lo, aq, w0, 0, [&](int half) { return sc[half] & 15; });
  }
  // The first half's activation sum from its 16 quants, the second's as a.sum less it.
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int total) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    const uint8_t* sc = blk + 2 * (c % 8);
    const int* aq = act_ints(a);
    int sum0 = 0;
    for (int j = 0; j < 4; ++j) sum0 = __dp4a(0x01010101, aq[j], sum0);
    const int mins = (sc[0] >> 4) * sum0 + (sc[1] >> 4) * (a.sum - sum0);
    const float d = load_f16(blk + 80);
    const float dmin = load_f16(blk + 82);
    return a.d * (d * static_cast<float>(total) - dmin * static_cast<float>(mins));
  }
};

// The 6-bit scale (0 .. 63) of sub-block s (0 .. 15) of the Q3_K scales at b: low 4 bits in
// nibble s / 8 of byte s % 8, high 2 in bit pair s / 4 of byte 8 + s % 4 (quants.h's
// q3_k_scale).
__device__ __forceinline__ int q3_k_ls(const uint8_t* b, int s) {
  return ((b[s % 8] >> (4 * (s / 8))) & 15) | ((b[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

struct Q3_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 110;
  static constexpr int kWords = 8;
  // x = d * (sc - 32) * (q - 4): bit 2 of element l of chunk s in bit s of hmask[l] (bytes
  // 0-31), bits 0-1 packed as Q2_K's (qs at byte 32), scales at 96, d at 108.
  template <int N, bool kA16>
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t c, int w0, Words<N>& f) {
    const uint8_t* blk = row + (c / 8) * kBlockBytes;
    load_words<N, false>(blk + 32 + 32 * (c % 8 / 4) + 4 * w0, f.q);
    load_words<N, false>(blk + 4 * w0, f.h);
  }
  template <int N>
  __device__ __forceinline__ static int part(const uint8_t* row, int64_t c, const Words<N>& f,
                                             const int* aq, int w0) {
    const int s = static_cast<int>(c % 8);
    const uint8_t* scales = row + (c / 8) * kBlockBytes + 96;
    int q[N];
    for (int j = 0; j < N; ++j) {
      const uint32_t hi = (static_cast<uint32_t>(f.h[j]) >> s) & 0x01010101u;
      q[j] = k_two_bits(f.q[j], c) | static_cast<int>(hi << 2);
    }
    return k_halves<N>(q, aq, w0, 4, [&](int half) { return q3_k_ls(scales, 2 * s + half) - 32; });
  }
  __device__ __forceinline__ static float finish(const uint8_t* row, int64_t c, const BlockQ8_1& a,
                                                 int total) {
    const float d = load_f16(row + (c / 8) * kBlockBytes + 108);
    return static_cast<float>(total) * (d * a.d);
  }
};

// The whole chunk's float value, as one thread computes it.
template <class T>
__device__ __forceinline__ float dot(const uint8_t* row, int64_t c, const BlockQ8_1& a) {
  Words<T::kWords> f;
  T::template load<T::kWords, false>(row, c, 0, f);
  return T::finish(row, c, a, T::part(row, c, f, act_ints(a), 0));
}

}  // namespace vecdot

QRUN_CUDA_NAMESPACE_END
