// Reference kernels of the 32-element block types Q4_0, Q5_0 and Q8_0 (Q8_0 is also the
// activation type all three dot against), and of the offset types Q4_1 and Q5_1 with their
// activation type Q8_1. Quantizers produce exactly the bits of
// llama.cpp's reference quantizers: the same float operations in the same order, ties
// broken the same way. Dot products sum the integer products of a block exactly, then add
// sum * d_x * d_y to a float accumulator block by block (llama.cpp's generic order).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"

namespace qrun {
namespace {

// The element of largest magnitude in a block (the first one on ties), with its sign.
float signed_absmax(const float* x, int64_t n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

int64_t blocks_of(int64_t n) {
  return n / kQK;
}

}  // namespace

// ---- Q4_0 ---------------------------------------------------------------------------------

// The signed extreme maps to -8 exactly, so the opposite side gets the extra level (+7).
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float* x = src + b * kQK;
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    for (int64_t j = 0; j < kQK / 2; ++j) {
      // x * id lies in [-8, 8]; + 8.5 and truncation round half up.
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    float* y = dst + b * kQK;
    for (int64_t j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((in[b].qs[j] & 15) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((in[b].qs[j] >> 4) - 8) * d;
    }
  }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ4_0*>(x);
  const auto* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    int32_t sumi = 0;
    for (int64_t j = 0; j < kQK / 2; ++j) {
      sumi += ((bx[b].qs[j] & 15) - 8) * by[b].qs[j];
      sumi += ((bx[b].qs[j] >> 4) - 8) * by[b].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * fp16_to_fp32(bx[b].d) * fp16_to_fp32(by[b].d);
  }
  return sum;
}

// ---- Q5_0 ---------------------------------------------------------------------------------

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float* x = src + b * kQK;
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int64_t j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int hi = std::min(31, static_cast<int>(x[j + kQK / 2] * id + 16.5f));
      out[b].qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK / 2);
    }
    for (int k = 0; k < 4; ++k) out[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

namespace {

uint32_t load_qh(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

// The unsigned 5-bit level of element i of a Q5_0 or Q5_1 block, in [0, 31].
int q5_level(const uint8_t* qs, uint32_t qh, int64_t i) {
  const int64_t j = i % (kQK / 2);
  const int nibble = i < kQK / 2 ? qs[j] & 15 : qs[j] >> 4;
  return nibble | static_cast<int>(((qh >> i) & 1) << 4);
}

}  // namespace

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const uint32_t qh = load_qh(in[b].qh);
    for (int64_t i = 0; i < kQK; ++i) {
      dst[b * kQK + i] = static_cast<float>(q5_level(in[b].qs, qh, i) - 16) * d;
    }
  }
}

float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ5_0*>(x);
  const auto* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const uint32_t qh = load_qh(bx[b].qh);
    int32_t sumi = 0;
    for (int64_t i = 0; i < kQK; ++i) sumi += (q5_level(bx[b].qs, qh, i) - 16) * by[b].qs[i];
    sum += (fp16_to_fp32(bx[b].d) * fp16_to_fp32(by[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

// ---- Q8_0 ---------------------------------------------------------------------------------

namespace {

// The 8-bit levels of one block for Q8_0 and Q8_1, and their sum. kAct: llama.cpp's x86
// activation quantizer (multiplier 127 / amax, not 1 / d: the two differ in the last bit for
// some amax; levels rounded half to even, saturated); otherwise its reference quantizer
// (multiplier 1 / d, half away from zero). Returns d = amax / 127 unrounded.
template <bool kAct>
float quantize_8bit_block(const float* x, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  float id = 0.0f;
  if constexpr (kAct) {
    id = amax != 0.0f ? 127.0f / amax : 0.0f;
  } else {
    id = d != 0.0f ? 1.0f / d : 0.0f;
  }
  *sum = 0;
  for (int64_t j = 0; j < kQK; ++j) {
    if constexpr (kAct) {
      const long q = std::lrint(x[j] * id);  // the default rounding mode: half to even
      qs[j] = static_cast<int8_t>(std::clamp<long>(q, -128, 127));
    } else {
      qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    }
    *sum += qs[j];
  }
  return d;
}

template <bool kAct>
void quantize_q8_0_rows(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  int sum = 0;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    out[b].d = fp32_to_fp16(quantize_8bit_block<kAct>(src + b * kQK, out[b].qs, &sum));
  }
}

// Q8_1 stores s = d * sum(levels) with the unrounded d, as llama.cpp's quantizers do.
template <bool kAct>
void quantize_q8_1_rows(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_1*>(dst);
  int sum = 0;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = quantize_8bit_block<kAct>(src + b * kQK, out[b].qs, &sum);
    out[b].d = fp32_to_fp16(d);
    out[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  quantize_q8_0_rows<false>(src, dst, n);
}

void quantize_q8_0_act(const float* src, void* dst, int64_t n) {
  quantize_q8_0_rows<true>(src, dst, n);
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (int64_t j = 0; j < kQK; ++j) dst[b * kQK + j] = static_cast<float>(in[b].qs[j]) * d;
  }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ8_0*>(x);
  const auto* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    int32_t sumi = 0;
    for (int64_t j = 0; j < kQK; ++j) sumi += bx[b].qs[j] * by[b].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(bx[b].d) * fp16_to_fp32(by[b].d));
  }
  return sum;
}

// ---- Q4_1, Q5_1 and their activations Q8_1 -----------------------------------------------

namespace {

struct MinMax {
  float min;
  float max;
};

MinMax block_min_max(const float* x) {
  MinMax r{FLT_MAX, -FLT_MAX};
  for (int64_t j = 0; j < kQK; ++j) {
    if (x[j] < r.min) r.min = x[j];
    if (x[j] > r.max) r.max = x[j];
  }
  return r;
}

// The offset types' dot: per block (d_x * d_y) * sum(q_x * q_y) + m_x * s_y, in llama.cpp's
// generic order. `level(b, i)` is the unsigned level of element i of weight block b.
template <class Block, class Level>
float offset_dot(int64_t n, const void* x, const void* y, Level level) {
  const auto* bx = static_cast<const Block*>(x);
  const auto* by = static_cast<const BlockQ8_1*>(y);
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    int32_t sumi = 0;
    for (int64_t i = 0; i < kQK; ++i) sumi += level(bx[b], i) * by[b].qs[i];
    sum += (fp16_to_fp32(bx[b].d) * fp16_to_fp32(by[b].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(bx[b].m) * fp16_to_fp32(by[b].s);
  }
  return sum;
}

int q4_1_level(const BlockQ4_1& block, int64_t i) {
  return i < kQK / 2 ? block.qs[i] & 15 : block.qs[i - kQK / 2] >> 4;
}

int q5_1_level(const BlockQ5_1& block, int64_t i) {
  return q5_level(block.qs, load_qh(block.qh), i);
}

}  // namespace

// d = (max - min) / 15, m = min; levels (x - min) / d + 0.5 truncated, at most 15.
void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float* x = src + b * kQK;
    const MinMax mm = block_min_max(x);
    const float d = (mm.max - mm.min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    out[b].m = fp32_to_fp16(mm.min);
    for (int64_t j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>((x[j] - mm.min) * id + 0.5f));
      const int hi = std::min(15, static_cast<int>((x[j + kQK / 2] - mm.min) * id + 0.5f));
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    for (int64_t i = 0; i < kQK; ++i) {
      dst[b * kQK + i] = static_cast<float>(q4_1_level(in[b], i)) * d + m;
    }
  }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y) {
  return offset_dot<BlockQ4_1>(n, x, y, q4_1_level);
}

// d = (max - min) / 31, m = min; levels (x - min) / d + 0.5 truncated (no clamp, as
// llama.cpp: the largest is 31.5 truncated).
void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float* x = src + b * kQK;
    const MinMax mm = block_min_max(x);
    const float d = (mm.max - mm.min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    out[b].m = fp32_to_fp16(mm.min);
    uint32_t qh = 0;
    for (int64_t j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<uint8_t>((x[j] - mm.min) * id + 0.5f);
      const int hi = static_cast<uint8_t>((x[j + kQK / 2] - mm.min) * id + 0.5f);
      out[b].qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK / 2);
    }
    for (int k = 0; k < 4; ++k) out[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float m = fp16_to_fp32(in[b].m);
    const uint32_t qh = load_qh(in[b].qh);
    for (int64_t i = 0; i < kQK; ++i) {
      dst[b * kQK + i] = static_cast<float>(q5_level(in[b].qs, qh, i)) * d + m;
    }
  }
}

float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y) {
  return offset_dot<BlockQ5_1>(n, x, y, q5_1_level);
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  quantize_q8_1_rows<false>(src, dst, n);
}

void quantize_q8_1_act(const float* src, void* dst, int64_t n) {
  quantize_q8_1_rows<true>(src, dst, n);
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ8_1*>(src);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (int64_t j = 0; j < kQK; ++j) dst[b * kQK + j] = static_cast<float>(in[b].qs[j]) * d;
  }
}

}  // namespace qrun
