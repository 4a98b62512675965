// AVX2 dot products of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and of IQ4_XS with Q8_K
// activations, Q2_K's multi-row gemv, and the Q8_K activation quantizer (bit-identical to the
// reference quantize_q8_k for finite inputs). Integer sums per super-block are exact (ranges on
// each kernel); the float order is llama.cpp's AVX2 one, so that logits can match its golden
// outputs:
//   acc (8 lanes) = fma(d_x * d_y, float(int32 lane), acc) per super-block, where int32
//   lane k sums the scaled products of elements 2k, 2k + 1 (+ 16 * j) of every 32 or 16
//   element sub-block; the mins term of Q4_K/Q5_K is summed apart and added at the end,
//   Q2_K's goes into acc by its own FMA before the scales' one.
#include <cstring>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/dot_common.h"
#include "kernels/cpu/avx2/dot_kernels.h"
#include "kernels/cpu/avx2/kquant_levels.h"

namespace qrun::kernels::avx2 {
namespace {

// The 8 scales and 8 mins of a Q4_K/Q5_K super-block as 16 int16: lanes 0-7 the scales,
// lanes 8-15 the mins (the layout of quants.h, decoded with 32-bit masks).
inline __m256i unpack_scales_mins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof(w));
  const uint32_t low6 = 0x3f3f3f3fu;
  const uint32_t low4 = 0x0f0f0f0fu;
  const uint32_t top2 = 0xc0c0c0c0u;
  uint32_t out[4];
  out[0] = w[0] & low6;                                  // sc[0..3]
  out[1] = (w[2] & low4) | ((w[0] & top2) >> 2);         // sc[4..7]
  out[2] = w[1] & low6;                                  // m[0..3]
  out[3] = ((w[2] >> 4) & low4) | ((w[1] & top2) >> 2);  // m[4..7]
  return _mm256_cvtepu8_epi16(load128(out));
}

// int16 lane pattern (2s, 2s + 1) for vpshufb: broadcasts int16 element s of each
// 128-bit half to all 8 int16 lanes of that half.
inline __m256i broadcast_i16(__m256i v, int s) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * s)));
}

// Q3_K: the 16 signed int8 sub-block scales as int16, the 8 of each 128-element half h in
// both 128-bit lanes of halves[h].
inline void split_scales16(__m128i scales8, __m256i halves[2]) {
  const __m256i all = _mm256_cvtepi8_epi16(scales8);
  halves[0] = _mm256_permute2x128_si256(all, all, 0x00);
  halves[1] = _mm256_permute2x128_si256(all, all, 0x11);
}

// The int16 scales of sub-blocks 2k (low 128-bit lane) and 2k + 1 (high lane) of a half
// from split_scales16, each in every int16 lane of its 128-bit lane: the scales of the two
// 16-element sub-blocks of that half's k-th 32 elements.
inline __m256i scale_pair(__m256i half, int k) {
  const __m128i lo = _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k)));
  const __m128i hi = _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * k + 1)));
  return _mm256_shuffle_epi8(half, _mm256_set_m128i(hi, lo));
}

// Sum of the 4 int32 lanes of m times the 8 (mins, Q8_K sub-block sums) int16 pairs:
// returns the 4 int32 lanes m[2i] * s[2i] + m[2i + 1] * s[2i + 1]. Sub-block sums stay
// within 32 * 127, products within 63 * 4064: exact.
inline __m128i mins_products(__m256i scales_mins, const int16_t* bsums) {
  const __m256i b = load256(bsums);
  const __m128i sums = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  return _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), sums);
}

}  // namespace

// Per 64 elements: the low and high nibbles of 32 bytes meet 32 activations each in
// vpmaddubsw (pairs <= 2 * 15 * 128), then vpmaddwd by the 6-bit scale (<= 63 * 2 * 3840
// per lane per sub-block; 8 sub-blocks stay far inside int32).
float vec_dot_q4_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ4_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const float dmin = -y[b].d * fp16_load(x[b].dmin);
    const __m256i sm = unpack_scales_mins(x[b].scales);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_products(sm, y[b].bsums)), acc_m);
    const __m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);  // scales in both halves
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x[b].qs + 32 * j);
      const __m256i lo = _mm256_maddubs_epi16(low_nibbles(bits), load256(y[b].qs + 64 * j));
      const __m256i hi = _mm256_maddubs_epi16(high_nibbles(bits), load256(y[b].qs + 64 * j + 32));
      const __m256i plo = _mm256_madd_epi16(broadcast_i16(sc, 2 * j), lo);
      const __m256i phi = _mm256_madd_epi16(broadcast_i16(sc, 2 * j + 1), hi);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc) + hsum_f32x4(acc_m);
}

// As Q4_K with a fifth bit from qh: levels <= 31, vpmaddubsw pairs <= 2 * 31 * 128.
// The mins term is summed as a scalar, one super-block at a time.
float vec_dot_q5_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ5_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float sum_mins = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const float dmin = -y[b].d * fp16_load(x[b].dmin);
    const __m256i sm = unpack_scales_mins(x[b].scales);
    __m128i mins = mins_products(sm, y[b].bsums);
    mins = _mm_add_epi32(mins, _mm_unpackhi_epi64(mins, mins));
    mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, 1));
    sum_mins += dmin * static_cast<float>(_mm_cvtsi128_si32(mins));
    const __m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);
    // Bit 2j of each qh byte is bit 4 of the j-th low half, bit 2j + 1 of the high half;
    // 16-bit shifts leak bits across bytes, but only bit 0 of each byte is kept.
    __m256i hbits = load256(x[b].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load256(x[b].qs + 32 * j);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4);
      hbits = _mm256_srli_epi16(hbits, 2);
      const __m256i q_lo = _mm256_or_si256(low_nibbles(bits), h_lo);
      const __m256i q_hi = _mm256_or_si256(high_nibbles(bits), h_hi);
      const __m256i lo = _mm256_maddubs_epi16(q_lo, load256(y[b].qs + 64 * j));
      const __m256i hi = _mm256_maddubs_epi16(q_hi, load256(y[b].qs + 64 * j + 32));
      const __m256i plo = _mm256_madd_epi16(broadcast_i16(sc, 2 * j), lo);
      const __m256i phi = _mm256_madd_epi16(broadcast_i16(sc, 2 * j + 1), hi);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc) + sum_mins;
}

// Levels q in [0, 63] meet the activations a in vpmaddubsw (pairs <= 2 * 63 * 128), and
// 32 * a is subtracted (pairs <= 2 * 32 * 128), leaving (q - 32) . a exactly; vpmaddwd
// then applies the int8 sub-block scales (16 elements each).
float vec_dot_q6_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ6_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    const __m128i scales = load128(x[b].scales);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(x[b].ql + 64 * h);
      const __m256i ql1 = load256(x[b].ql + 64 * h + 32);
      const __m256i qh = load256(x[b].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
          _mm256_or_si256(high_nibbles(ql0),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
          _mm256_or_si256(high_nibbles(ql1),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4))};
      for (int k = 0; k < 4; ++k) {
        const __m256i a = load256(y[b].qs + 128 * h + 32 * k);
        const __m256i p =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], a), _mm256_maddubs_epi16(m32, a));
        // Scales of sub-blocks 8h + 2k and 8h + 2k + 1, each in 8 int16 lanes.
        const int s = 8 * h + 2 * k;
        const __m128i pick =
            _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s);
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc);
}

// The reference's steps, vectorized: the signed value of largest magnitude (the first one
// in element order on ties, NaNs ignored) maps to -127, levels are round-half-even of
// x * (-127 / max) (vcvtps2dq in the default MXCSR mode = the reference's nearest_int),
// and bsums are the exact sums of 16 levels. Non-finite inputs are not specified.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ8_K& blk = out[b];
    __m256 vmax = _mm256_setzero_ps();
    for (int i = 0; i < kQKK; i += 8) {
      vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), vmax);
    }
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(vmax, 1), _mm256_castps256_ps128(vmax));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    float max = amax;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int i = 0; i < kQKK; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), vamax, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQKK; i += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vs));
      }
      const __m256i q16a = _mm256_packs_epi32(q[0], q[1]);
      const __m256i q16b = _mm256_packs_epi32(q[2], q[3]);
      const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + i), q8);
      // Sums of levels 0-15 and 16-31: int32 lanes 0-3 and 4-7 summed within each half.
      __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q8), ones16);
      s = _mm256_hadd_epi32(s, s);
      s = _mm256_hadd_epi32(s, s);
      blk.bsums[i / 16] = static_cast<int16_t>(_mm256_extract_epi32(s, 0));
      blk.bsums[i / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
    }
    blk.d = 1.0f / iscale;
  }
}

// Q2_K: the 2-bit levels of elements 128h + 32k + l are bits 2k, 2k + 1 of qs[32h + l];
// they meet the activations in vpmaddubsw (pairs <= 2 * 3 * 128), and vpmaddwd applies the
// 4-bit scales of the two 16-element sub-blocks (8 lanes each). Per super-block, as
// llama.cpp's AVX2 kernel: first acc = fma(-d_y * dmin, m . bsums, acc), the int32 lane k
// of m . bsums being m[2k] * bsums[2k] + m[2k + 1] * bsums[2k + 1] (<= 2 * 15 * 2032), then
// acc = fma(d_y * d, sumi, acc); each sumi lane stays within 8 * 2 * 15 * 768; hsum_f32x8
// at the end.
//
// kR rows x[0 .. kR) at once (the dot is kR = 1, the gemv kQ2KGemvRows): each row keeps those
// lanes and that float chain, so every output is the dot's bit for bit; the rows share the
// activation loads, the bsums and the constants. With kPrefetch the rows after them
// (`ahead`, the next pass's, contiguous) are prefetched at the pace these are read.
template <int kR, bool kPrefetch>
void q2_k_rows(const BlockQ2_K* const* x, const BlockQ8_K* y, int64_t nb, const char* ahead,
               float* out) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(15);
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256 acc[kR];
  for (int i = 0; i < kR; ++i) acc[i] = _mm256_setzero_ps();
  size_t fetched = 0;
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kPrefetch) {
      for (; fetched < static_cast<size_t>(b + 1) * kR * sizeof(BlockQ2_K); fetched += 64) {
        _mm_prefetch(ahead + fetched, _MM_HINT_T0);
      }
    }
    const __m256i bsums = load256(y[b].bsums);
    float d[kR];
    __m256i sc[kR];
    for (int i = 0; i < kR; ++i) {
      d[i] = y[b].d * fp16_load(x[i][b].d);
      const float dmin = -y[b].d * fp16_load(x[i][b].dmin);
      const __m128i packed = load128(x[i][b].scales);
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
      const __m256i mins_dot = _mm256_madd_epi16(mins, bsums);
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins_dot), acc[i]);
      // Even sub-blocks' scales in the low 128-bit lane, odd ones in the high lane: int16
      // lane j of each holds sub-block 2j + lane, the pair of the j-th 32 elements.
      sc[i] = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_and_si128(packed, m4), even_odd));
    }
    __m256i sumi[kR];
    for (int i = 0; i < kR; ++i) sumi[i] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i bits[kR];
      for (int i = 0; i < kR; ++i) bits[i] = load256(x[i][b].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i a = load256(y[b].qs + 128 * h + 32 * k);
        for (int i = 0; i < kR; ++i) {
          const __m256i q = _mm256_and_si256(bits[i], m3);
          bits[i] = _mm256_srli_epi16(bits[i], 2);
          const __m256i p = _mm256_maddubs_epi16(q, a);
          sumi[i] =
              _mm256_add_epi32(sumi[i], _mm256_madd_epi16(broadcast_i16(sc[i], 4 * h + k), p));
        }
      }
    }
    for (int i = 0; i < kR; ++i) {
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d[i]), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
    }
  }
  for (int i = 0; i < kR; ++i) out[i] = hsum_f32x8(acc[i]);
}

float vec_dot_q2_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ2_K*>(vx);
  float out;
  q2_k_rows<1, false>(&x, static_cast<const BlockQ8_K*>(vy), n / kQKK, nullptr, &out);
  return out;
}

// Rows of the gemv per pass. Measured on an AMD EPYC (tg, 2 threads): 4 rows beat 2 and 8,
// and the steady prefetch of q2_k_rows beats both a burst at each pass's start and none.
constexpr int kQ2KGemvRows = 4;

void gemv_q2_k_q8_k(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* out) {
  constexpr int kR = kQ2KGemvRows;
  const auto* y = reinterpret_cast<const BlockQ8_K*>(act);
  int64_t r = 0;
  for (; r + kR <= n_rows; r += kR) {
    const BlockQ2_K* x[kR];
    for (int i = 0; i < kR; ++i) {
      x[i] = reinterpret_cast<const BlockQ2_K*>(w + static_cast<size_t>(r + i) * w_stride);
    }
    q2_k_rows<kR, true>(x, y, n / kQKK, reinterpret_cast<const char*>(x[0]) + kR * w_stride,
                        out + r);
  }
  for (; r < n_rows; ++r) {
    out[r] = vec_dot_q2_k_q8_k(n, w + static_cast<size_t>(r) * w_stride, act);
  }
}

// Q3_K: level q - 4 = (low two bits) - 4 * (hmask bit clear), the two parts dotted apart in
// vpmaddubsw (pairs <= 2 * 3 * 128 and 2 * 4 * 128) and subtracted, which leaves
// (q - 4) . a exactly; vpmaddwd then applies the scales sc - 32 (|.| <= 32) of the two
// 16-element sub-blocks, as Q2_K. One FMA per super-block, as llama.cpp's AVX2 kernel; each
// lane stays within 8 * 2 * 32 * 1024.
float vec_dot_q3_k_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ3_K*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * fp16_load(x[b].d);
    __m256i sc[2];
    split_scales16(kquant_levels::q3_k_scales(x[b].scales), sc);
    // Bit 4h + k of hmask[l] is bit 2 of the level of element 128h + 32k + l.
    const __m256i hmask = load256(x[b].hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i bits = load256(x[b].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_and_si256(bits, m3);
        bits = _mm256_srli_epi16(bits, 2);
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + k)));
        const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), zero);
        const __m256i offset = _mm256_and_si256(clear, four);
        const __m256i a = load256(y[b].qs + 128 * h + 32 * k);
        const __m256i p =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q, a), _mm256_maddubs_epi16(offset, a));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale_pair(sc[h], k), p));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum_f32x8(acc);
}

// IQ4_XS: each 32-element sub-block's levels looked up (vpshufb) and dotted with the sign
// trick to int16 pairs (<= 2 * 127 * 127), then vpmaddwd by its scale ls - 32 (|.| <= 32):
// int32 lanes well inside range. One FMA per super-block, as llama.cpp's AVX2 kernel.
float vec_dot_iq4_xs_q8_k(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockIQ4_XS*>(vx);
  const auto* y = static_cast<const BlockQ8_K*>(vy);
  const __m128i table128 = load128(kIq4Values);
  const __m256i table = _mm256_set_m128i(table128, table128);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    __m256i sums = _mm256_setzero_si256();
    for (int s = 0; s < kQKK / kQK; ++s) {
      const __m256i levels = _mm256_shuffle_epi8(table, unpack_nibbles32(x[b].qs + s * (kQK / 2)));
      const __m256i a = load256(y[b].qs + s * kQK);
      const __m256i pairs =
          _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(a, levels));
      const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(x[b], s) - 32));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, scale));
    }
    acc =
        _mm256_fmadd_ps(_mm256_set1_ps(fp16_load(x[b].d) * y[b].d), _mm256_cvtepi32_ps(sums), acc);
  }
  return hsum_f32x8(acc);
}

}  // namespace qrun::kernels::avx2
