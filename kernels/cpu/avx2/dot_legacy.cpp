// AVX2 dot products of the 32-element block types (Q4_0, Q5_0, Q8_0, IQ4_NL) with Q8_0
// activations and of the offset types (Q4_1, Q5_1) with Q8_1 activations, and llama.cpp's
// x86 Q8_0 and Q8_1 activation quantizers (bit-identical to quantize_q8_0_act and
// quantize_q8_1_act). Integer block sums are exact (see dot_common.h for the ranges);
// the float order is llama.cpp's AVX2 one, so that logits can match its golden outputs:
//   Q5_0, Q8_0: 8 int32 lanes per block (lane k sums elements 4k .. 4k + 3), each lane
//     accumulated as acc = fma(d_x * d_y, float(lane), acc), one horizontal sum at the end.
//   Q4_1, Q5_1: the same, plus m_x * s_y summed block by block in a scalar chain that is
//     added to the horizontal sum.
//   Q4_0, IQ4_NL: llama.cpp repacks these weights on AVX2 machines and multiplies them per
//     output row as acc = fma(float(block sum), d_x * d_y, acc), one block after the other.
// The gemv kernels run 4 rows at once with the same steps per row (bit-identical to
// vec_dot): the activation block, its scale and offset products are shared, and the
// rows' float chains run in the lanes of one vector. Each row's block b is prefetched
// with the same block of the row 4 further on, which the next pass reads (x86 prefetches
// never fault, even past the matrix): 1.3-1.6x when the weights stream from memory.
#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/dot_common.h"
#include "kernels/cpu/avx2/dot_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

// Sums of the 8 int32 lanes of four vectors, as 4 int32 lanes (exact).
inline __m128i hsum4_i32x8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_hadd_epi32(a, b);
  const __m256i cd = _mm256_hadd_epi32(c, d);
  const __m256i abcd = _mm256_hadd_epi32(ab, cd);  // [a b c d] of the low and high halves
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

inline __m256i q4_0_block_lanes(const BlockQ4_0& x, const BlockQ8_0& y) {
  return dot_offset_u8s8(unpack_nibbles32(x.qs), _mm256_set1_epi8(8), load256(y.qs));
}

inline float block_scale(uint16_t dx, uint16_t dy) {
  return fp16_load(dx) * fp16_load(dy);
}

// The fp16 scales d of 4 blocks as floats (one vcvtph2ps).
inline __m128 scales4(uint16_t d0, uint16_t d1, uint16_t d2, uint16_t d3) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(d0), static_cast<int16_t>(d1),
                                     static_cast<int16_t>(d2), static_cast<int16_t>(d3), 0, 0, 0,
                                     0));
}

// Lane i of v broadcast to 8 lanes.
inline __m256 broadcast_lane(__m128 v, int i) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(i));
}

}  // namespace

namespace {

// The IQ4_NL levels, as a byte table in both 128-bit lanes for vpshufb.
inline __m256i iq4_table() {
  const __m128i t = load128(kIq4Values);
  return _mm256_set_m128i(t, t);
}

inline __m256i iq4_nl_block_lanes(const BlockIQ4_NL& x, const BlockQ8_0& y) {
  const __m256i levels = _mm256_shuffle_epi8(iq4_table(), unpack_nibbles32(x.qs));
  return dot_s8s8(levels, load256(y.qs));
}

// Q4_0 and IQ4_NL: one chain of scalar FMAs over the blocks (the order of llama.cpp's
// repacked kernels); the integer sums of four blocks are formed together and fed to it one
// lane at a time.
template <class Block, __m256i (*kLanes)(const Block&, const BlockQ8_0&)>
float chained_dot(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const Block*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  __m128 acc = _mm_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m128i sums = hsum4_i32x8(kLanes(x[b], y[b]), kLanes(x[b + 1], y[b + 1]),
                                     kLanes(x[b + 2], y[b + 2]), kLanes(x[b + 3], y[b + 3]));
    const __m128 f = _mm_cvtepi32_ps(sums);
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_set_ss(block_scale(x[b + 1].d, y[b + 1].d)), acc);
    acc = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_set_ss(block_scale(x[b + 2].d, y[b + 2].d)), acc);
    acc =
        _mm_fmadd_ss(_mm_shuffle_ps(f, f, 3), _mm_set_ss(block_scale(x[b + 3].d, y[b + 3].d)), acc);
  }
  for (; b < nb; ++b) {
    const __m128 f = _mm_set_ss(static_cast<float>(hsum_i32x8(kLanes(x[b], y[b]))));
    acc = _mm_fmadd_ss(f, _mm_set_ss(block_scale(x[b].d, y[b].d)), acc);
  }
  return _mm_cvtss_f32(acc);
}

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y) {
  return chained_dot<BlockQ4_0, q4_0_block_lanes>(n, x, y);
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y) {
  return chained_dot<BlockIQ4_NL, iq4_nl_block_lanes>(n, x, y);
}

float vec_dot_q5_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ5_0*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  const __m256i offset = _mm256_set1_epi8(16);
  const __m256i bit4 = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(block_scale(x[b].d, y[b].d));
    const __m256i high = _mm256_and_si256(expand_bits32(load_u32(x[b].qh)), bit4);
    const __m256i q = _mm256_or_si256(unpack_nibbles32(x[b].qs), high);
    const __m256i lanes = dot_offset_u8s8(q, offset, load256(y[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc);
  }
  return hsum_f32x8(acc);
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const int64_t nb = n / kQK;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(block_scale(x[b].d, y[b].d));
    const __m256i lanes = dot_s8s8(load256(x[b].qs), load256(y[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc);
  }
  return hsum_f32x8(acc);
}

namespace {

// Q4_1, Q5_1: the levels are unsigned (0 .. 31), so one vpmaddubsw forms the pair sums;
// d_x * d_y * lanes accumulate as Q5_0's, and m_x * s_y in a scalar chain added after the
// horizontal sum (llama.cpp's AVX2 order).
template <class Block, __m256i (*kLevels)(const Block&)>
float offset_dot(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const Block*>(vx);
  const auto* y = static_cast<const BlockQ8_1*>(vy);
  const int64_t nb = n / kQK;
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    summs += fp16_load(x[b].m) * fp16_load(y[b].s);
    const __m256 d = _mm256_set1_ps(block_scale(x[b].d, y[b].d));
    const __m256i lanes = dot_u8s8(kLevels(x[b]), load256(y[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc);
  }
  return hsum_f32x8(acc) + summs;
}

inline __m256i q4_1_levels(const BlockQ4_1& x) {
  return unpack_nibbles32(x.qs);
}

inline __m256i q5_1_levels(const BlockQ5_1& x) {
  const __m256i high = _mm256_and_si256(expand_bits32(load_u32(x.qh)), _mm256_set1_epi8(16));
  return _mm256_or_si256(unpack_nibbles32(x.qs), high);
}

}  // namespace

float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y) {
  return offset_dot<BlockQ4_1, q4_1_levels>(n, x, y);
}

float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y) {
  return offset_dot<BlockQ5_1, q5_1_levels>(n, x, y);
}

namespace {

// offset_dot for 4 rows at once: each row's two chains are its vec_dot's, step for step (the
// same bits); the rows share the activation block and its scales, and their 8 chains run
// side by side instead of one row's 2 waiting on their latencies.
template <class Block, __m256i (*kLevels)(const Block&)>
void offset_gemv(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows, const uint8_t* act,
                 float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_1*>(act);
  const int64_t nb = n / kQK;
  const size_t next_group = 4 * w_stride;  // the rows of the next pass, prefetched
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const Block* x[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = reinterpret_cast<const Block*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    float summs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i ab = load256(a[b].qs);
      const float ad = fp16_load(a[b].d);
      const float as = fp16_load(a[b].s);
      for (int i = 0; i < 4; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + b) + next_group, _MM_HINT_T0);
        summs[i] += fp16_load(x[i][b].m) * as;
        const __m256 d = _mm256_set1_ps(fp16_load(x[i][b].d) * ad);
        acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8s8(kLevels(x[i][b]), ab)), acc[i]);
      }
    }
    for (int i = 0; i < 4; ++i) y[r + i] = hsum_f32x8(acc[i]) + summs[i];
  }
  for (; r < n_rows; ++r) {
    y[r] = offset_dot<Block, kLevels>(n, w + static_cast<size_t>(r) * w_stride, act);
  }
}

}  // namespace

void gemv_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  offset_gemv<BlockQ4_1, q4_1_levels>(n, w, w_stride, n_rows, act, y);
}

void gemv_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  offset_gemv<BlockQ5_1, q5_1_levels>(n, w, w_stride, n_rows, act, y);
}

// vec_dot_iq4_nl_q8_0 for 4 rows at once, row i's chain in lane i (as gemv_q4_0_q8_0).
void gemv_iq4_nl_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t next_group = 4 * w_stride;  // the rows of the next pass, prefetched
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const BlockIQ4_NL* x[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = reinterpret_cast<const BlockIQ4_NL*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i lanes[4];
      for (int i = 0; i < 4; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + b) + next_group, _MM_HINT_T0);
        lanes[i] = iq4_nl_block_lanes(x[i][b], a[b]);
      }
      const __m128 sums = _mm_cvtepi32_ps(hsum4_i32x8(lanes[0], lanes[1], lanes[2], lanes[3]));
      const __m128 d = _mm_mul_ps(scales4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                  _mm_set1_ps(fp16_load(a[b].d)));
      acc = _mm_fmadd_ps(sums, d, acc);
    }
    _mm_storeu_ps(y + r, acc);
  }
  for (; r < n_rows; ++r) {
    y[r] = vec_dot_iq4_nl_q8_0(n, w + static_cast<size_t>(r) * w_stride, act);
  }
}

void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t next_group = 4 * w_stride;  // the rows of the next pass, prefetched
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const BlockQ4_0* x[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = reinterpret_cast<const BlockQ4_0*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i ab = load256(a[b].qs);
      const __m256i offset = _mm256_maddubs_epi16(eight, ab);
      __m256i lanes[4];
      for (int i = 0; i < 4; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + b) + next_group, _MM_HINT_T0);
        const __m256i p = _mm256_maddubs_epi16(unpack_nibbles32(x[i][b].qs), ab);
        lanes[i] = _mm256_madd_epi16(_mm256_sub_epi16(p, offset), ones);
      }
      const __m128 sums = _mm_cvtepi32_ps(hsum4_i32x8(lanes[0], lanes[1], lanes[2], lanes[3]));
      const __m128 d = _mm_mul_ps(scales4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                  _mm_set1_ps(fp16_load(a[b].d)));
      acc = _mm_fmadd_ps(sums, d, acc);
    }
    _mm_storeu_ps(y + r, acc);
  }
  for (; r < n_rows; ++r) y[r] = vec_dot_q4_0_q8_0(n, w + static_cast<size_t>(r) * w_stride, act);
}

void gemv_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t next_group = 4 * w_stride;  // the rows of the next pass, prefetched
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const BlockQ8_0* x[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = reinterpret_cast<const BlockQ8_0*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i ab = load256(a[b].qs);
      const __m128 d = _mm_mul_ps(scales4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                  _mm_set1_ps(fp16_load(a[b].d)));
      for (int i = 0; i < 4; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + b) + next_group, _MM_HINT_T0);
        const __m256i lanes = dot_s8s8(load256(x[i][b].qs), ab);
        acc[i] = _mm256_fmadd_ps(broadcast_lane(d, i), _mm256_cvtepi32_ps(lanes), acc[i]);
      }
    }
    for (int i = 0; i < 4; ++i) y[r + i] = hsum_f32x8(acc[i]);
  }
  for (; r < n_rows; ++r) y[r] = vec_dot_q8_0_q8_0(n, w + static_cast<size_t>(r) * w_stride, act);
}

namespace {

// One block of llama.cpp's x86 activation quantizer: amax over the block (NaNs ignored, as
// std::max in the reference), levels round(x * (127 / amax)) half to even (the default MXCSR
// mode), saturated to int8 and stored at qs; returns amax / 127, the unrounded scale. With
// kSum, *sum is the levels' sum (Q8_1's s is d * sum).
template <bool kSum>
float quantize_block_act(const float* x, int8_t* qs, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    // vmaxps returns its second operand when either is NaN.
    amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), amax);
  }
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float max = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  // Saturating packs interleave the 128-bit halves; the permutation restores the order.
  const __m256i q16a = _mm256_packs_epi32(q[0], q[1]);
  const __m256i q16b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), order);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q8);
  if constexpr (kSum) {
    // The sum of the saturated levels, as the reference sums what it stored.
    *sum = hsum_i32x8(dot_u8s8(_mm256_set1_epi8(1), q8));
  }
  return max / 127.0f;
}

}  // namespace

void quantize_q8_0_act(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = quantize_block_act<false>(src + b * kQK, out[b].qs, nullptr);
    out[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
  }
}

// As quantize_q8_0_act, with s = F16(d * sum of the levels), d the unrounded scale.
void quantize_q8_1_act(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sum = 0;
    const float d = quantize_block_act<true>(src + b * kQK, out[b].qs, &sum);
    out[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    out[b].s = _cvtss_sh(d * static_cast<float>(sum), _MM_FROUND_TO_NEAREST_INT);
  }
}

}  // namespace qrun::kernels::avx2
