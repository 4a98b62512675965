// Block formats of the weight and activation types qrun computes with, and their scalar
// reference kernels. Every block struct is bit-compatible with the GGUF files llama.cpp
// writes (little-endian, no padding; sizes are static_asserted). The reference kernels
// are the oracle for every SIMD and CUDA kernel: quantizers give the same bits as
// llama.cpp's reference quantizers, and dot products sum integers per block before scaling,
// in the order of llama.cpp's generic (non-SIMD) CPU code, so logits can match it closely.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml-like/dtype.h"

namespace qrun {

inline constexpr int64_t kQK = 32;    // elements per block of the 32-wide ("legacy") types
inline constexpr int64_t kQKK = 256;  // elements per super-block of the k-quants
inline constexpr int kKScaleBytes = 12;

// ---- 32-element blocks ----------------------------------------------------------------

// Q4_0: x[i] = d * (q[i] - 8), q in [0, 15].
// bytes 0-1: d (fp16); bytes 2-17: qs[j] holds q[j] in bits 0-3 and q[j + 16] in bits 4-7.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block must be 18 bytes");

// Q5_0: x[i] = d * (q[i] - 16), q in [0, 31].
// bytes 0-1: d (fp16); bytes 2-5: qh, a little-endian uint32 whose bit i is bit 4 of q[i];
// bytes 6-21: qs[j] holds bits 0-3 of q[j] (low nibble) and of q[j + 16] (high nibble).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block must be 22 bytes");

// Q4_1: x[i] = d * q[i] + m, q in [0, 15] (an offset block: m is the block's minimum).
// bytes 0-1: d (fp16); 2-3: m (fp16); 4-19: qs, nibbles packed as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block must be 20 bytes");

// Q5_1: x[i] = d * q[i] + m, q in [0, 31]. bytes 0-1: d; 2-3: m; 4-7: qh; 8-23: qs, the
// high bits and nibbles packed as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block must be 24 bytes");

// Q8_0 (a weight type, and the activation type of Q4_0, Q5_0 and Q8_0): x[i] = d * q[i].
// bytes 0-1: d (fp16); bytes 2-33: q[i] as int8 in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block must be 34 bytes");

// Q8_1 (activation type of Q4_1 and Q5_1 only): x[i] = d * q[i], with s = d * sum(q) so
// that an offset block's m * sum(x) costs one product. bytes 0-1: d (fp16); 2-3: s (fp16);
// 4-35: q[i] int8.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36, "q8_1 block must be 36 bytes");

// IQ4_NL: x[i] = d * kIq4Values[q[i]], q in [0, 15] an index into a non-linear table.
// bytes 0-1: d (fp16); 2-17: qs, nibbles packed as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "iq4_nl block must be 18 bytes");

// The 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl), denser near zero.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// ---- 256-element super-blocks (k-quants) ------------------------------------------------

// Q2_K: x = d * (sc[s] & 15) * q - dmin * (sc[s] >> 4), q in [0, 3], s = i / 16.
// bytes 0-15: scales (4-bit scale low, 4-bit min high, one byte per 16 elements); 16-79: qs;
// 80-81: d (fp16); 82-83: dmin (fp16). Each half h of 128 elements uses qs[32h ..+32]: with
// e = 128h + 32j + l (j in [0, 4), l in [0, 32)), q[e] is bits 2j, 2j + 1 of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "q2_k block must be 84 bytes");

// Q3_K: x = d * (sc[s] - 32) * (q - 4), q in [0, 7], s = i / 16, sc 6 bits.
// bytes 0-31: hmask, bit i / 32 of hmask[i % 32] is bit 2 of q[i]; 32-95: qs, the low two
// bits of q packed as Q2_K's; 96-107: the sixteen 6-bit scales (q3_k_scale); 108-109: d.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "q3_k block must be 110 bytes");

// The 6-bit scale sc (0 .. 63; the sub-block scale is d * (sc - 32)) of sub-block s (0 .. 15)
// of a Q3_K super-block: the low four bits are nibble s / 8 of byte s % 8, the high two bits
// pair s / 4 of byte 8 + s % 4.
inline int q3_k_scale(const uint8_t* b, int s) {
  return ((b[s % 8] >> (4 * (s / 8))) & 15) | (((b[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

// The 12 scale bytes of Q4_K and Q5_K hold eight 6-bit scales sc[s] and eight 6-bit mins
// m[s], one per 32-element sub-block s:
//   s < 4:  sc[s] = b[s] & 63,                      m[s] = b[s + 4] & 63
//   s >= 4: sc[s] = (b[s + 4] & 15) | (b[s - 4] >> 6) << 4,
//           m[s]  = (b[s + 4] >> 4) | (b[s] >> 6) << 4

// Q4_K: x = d * sc[s] * q - dmin * m[s], q in [0, 15], s = i / 32.
// bytes 0-1: d (fp16); 2-3: dmin (fp16); 4-15: scales (above); 16-143: qs. Each group of
// 64 elements g uses 32 bytes qs[32g + l]: q[64g + l] in bits 0-3, q[64g + 32 + l] in 4-7.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "q4_k block must be 144 bytes");

// Q5_K: as Q4_K with q in [0, 31]. bytes 0-1: d; 2-3: dmin; 4-15: scales; 16-47: qh;
// 48-175: qs (low 4 bits, packed as in Q4_K). Bit 4 of q[64g + l] is bit 2g of qh[l],
// bit 4 of q[64g + 32 + l] is bit 2g + 1 of qh[l] (l in [0, 32), g in [0, 4)).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "q5_k block must be 176 bytes");

// Q6_K: x = d * scales[i / 16] * (q - 32), q in [0, 63], scales int8.
// bytes 0-127: ql (low 4 bits); 128-191: qh (high 2 bits); 192-207: scales; 208-209: d.
// Each half h of 128 elements uses ql[64h ..+64] and qh[32h ..+32]; with e = 128h + l,
// l in [0, 32): ql[64h + l] holds q[e] (bits 0-3) and q[e + 64] (4-7); ql[64h + 32 + l]
// holds q[e + 32] and q[e + 96]; qh[32h + l] holds bits 4-5 of q[e], q[e + 32], q[e + 64],
// q[e + 96] in its bit pairs 0-1, 2-3, 4-5, 6-7.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "q6_k block must be 210 bytes");

// IQ4_XS: IQ4_NL's levels in super-blocks of 256 with a 6-bit scale per 32 elements:
// x = d * (ls[s] - 32) * kIq4Values[q], s = i / 32. bytes 0-1: d (fp16); 2-3: scales_h, bits
// 2s, 2s + 1 the high two bits of ls[s]; 4-7: scales_l, nibble s (low first) the low four
// bits of ls[s]; 8-135: qs, sub-block s's 16 bytes packed as an IQ4_NL block's.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "iq4_xs block must be 136 bytes");

// The 6-bit scale ls (0 .. 63; the block scale is d * (ls - 32)) of sub-block s of an IQ4_XS
// super-block.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int s) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

// Q8_K (activation type of the k-quants only): x[i] = d * q[i].
// bytes 0-3: d (fp32); 4-259: q[i] int8; 260-291: bsums[k] (int16) = sum of q[16k ..+16].
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "q8_k block must be 292 bytes");

// ---- reference kernels --------------------------------------------------------------
// Signatures are those of TypeTraits (dtype.h): n is the element count, a multiple of the
// type's block size; `vec_dot_X_Y` dots a row of X with a row of its activation type Y.

void to_float_f32(const void* src, float* dst, int64_t n);
void from_float_f32(const float* src, void* dst, int64_t n);
float vec_dot_f32_f32(int64_t n, const void* x, const void* y);
void to_float_f16(const void* src, float* dst, int64_t n);
void from_float_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16_f16(int64_t n, const void* x, const void* y);
void to_float_bf16(const void* src, float* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y);

void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
// llama.cpp's reference Q8_1 quantizer (levels rounded half away from zero), and its x86
// activation quantizer (as quantize_q8_0_act: multiplier 127 / amax, half to even); both
// store s = d * sum(q) with d the unrounded float scale.
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_1_act(const float* src, void* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
// Q8_0 as llama.cpp's x86 CPU backend quantizes activations before a matmul (its AVX/AVX2
// row quantizer): d = amax / 127 stored as F16, multiplier 127 / amax (not 1 / d: the two
// differ in the last bit for some amax), and round half to even. quantize_q8_0 (weights,
// llama.cpp's reference) rounds half away from zero; the two disagree on a few elements
// per million, enough to move greedy picks at near-ties.
void quantize_q8_0_act(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);

// IQ4_NL and IQ4_XS quantize as llama-quantize does without an importance matrix: each block
// scale is the best of 15 tries by weighted (x^2) squared error, then IQ4_XS's block scales
// are quantized to 6 bits of the super-block's. (llama.cpp's quantize_row_iq4_nl_ref skips
// the search; the files llama-quantize writes use it, and so does qrun.)
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);
void quantize_iq4_xs(const float* src, void* dst, int64_t n);
float vec_dot_iq4_xs_q8_k(int64_t n, const void* x, const void* y);

void dequantize_q2_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// Decodes the 6-bit scale and min of sub-block s (0..7) of a Q4_K/Q5_K scales array.
inline void unpack_k_scale_min(const uint8_t* b, int s, uint8_t* scale, uint8_t* min) {
  if (s < 4) {
    *scale = b[s] & 63;
    *min = b[s + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((b[s + 4] & 15) | ((b[s - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((b[s + 4] >> 4) | ((b[s] >> 6) << 4));
  }
}

// ---- conveniences over the traits table ----------------------------------------------

// Quantizes n_rows rows of row_len floats into consecutive rows of `type` (row_size bytes
// each). QRUN_CHECKs that the type has a quantizer and that row_len is whole blocks.
void quantize_rows(DType type, const float* src, void* dst, int64_t n_rows, int64_t row_len);
// Dequantizes n elements (whole blocks) of `type` into floats.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

}  // namespace qrun
