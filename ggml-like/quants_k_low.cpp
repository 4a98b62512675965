// Reference kernels of the low-bit k-quants Q2_K and Q3_K, as llama.cpp's reference
// quantizers (no importance matrix) and generic dot products: Q2_K fits a 4-bit scale and min
// per 16 elements by an |x|-weighted absolute-error sweep and sums its dot in one float per
// super-block; Q3_K fits a 6-bit symmetric scale per 16 elements by moving single levels to
// raise the x^2-weighted correlation and sums its dot in eight lanes (element index mod 8).
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "ggml-like/quants_k_fit.h"

namespace qrun {

using kquant::fit_scale_min;
using kquant::FitError;
using kquant::k_lanes;
using kquant::kGroupEps;
using kquant::nearest_int;
using kquant::signed_absmax;
using kquant::superblocks_of;

// ---- Q2_K ---------------------------------------------------------------------------------

namespace {

// The level (0 .. 3) of element i of a Q2_K block; Q3_K packs its low two bits the same way.
int two_bit_level(const uint8_t* qs, int i) {
  return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

void pack_two_bit_levels(const uint8_t* q, uint8_t* qs) {
  for (int h = 0; h < kQKK / 128; ++h) {
    const uint8_t* qq = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      qs[32 * h + l] =
          static_cast<uint8_t>(qq[l] | qq[l + 32] << 2 | qq[l + 64] << 4 | qq[l + 96] << 6);
    }
  }
}

// The 4-bit code of a sub-block's scale or min against the super-block's largest: stored as
// llama.cpp stores it, through an unsigned byte (a fit never goes negative, and a code of
// 16 cannot occur since the largest maps to 15 exactly).
uint8_t four_bit_code(float inv, float value) {
  return static_cast<uint8_t>(nearest_int(inv * value));
}

}  // namespace

// Per 16 elements a scale and a min fitted by a sweep that minimises the |x|-weighted
// absolute error, both coded in 4 bits against the super-block's largest, then the levels
// recomputed against the stored scales: llama.cpp's quantize_row_q2_K_ref.
void quantize_q2_k(const float* src, void* dst, int64_t n) {
  constexpr int kSub = 16;
  auto* out = static_cast<BlockQ2_K*>(dst);
  std::array<uint8_t, kQKK> q{};
  std::array<float, kQKK / kSub> scales{};
  std::array<float, kQKK / kSub> mins{};
  std::array<float, kSub> w{};
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float* x = src + b * kQKK;
    BlockQ2_K& blk = out[b];
    float max_scale = 0;
    float max_min = 0;
    for (int s = 0; s < kQKK / kSub; ++s) {
      for (int l = 0; l < kSub; ++l) w[l] = std::fabs(x[kSub * s + l]);
      scales[s] = fit_scale_min(x + kSub * s, w.data(), kSub, 3, -0.5f, 0.1f, 15,
                                FitError::kAbsolute, q.data() + kSub * s, &mins[s]);
      max_scale = std::max(max_scale, scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    std::fill(std::begin(blk.scales), std::end(blk.scales), uint8_t{0});
    blk.d = fp32_to_fp16(0.0f);
    blk.dmin = fp32_to_fp16(0.0f);
    if (max_scale > 0) {
      const float inv = 15.0f / max_scale;
      for (int s = 0; s < kQKK / kSub; ++s) blk.scales[s] = four_bit_code(inv, scales[s]);
      blk.d = fp32_to_fp16(max_scale / 15.0f);
    }
    if (max_min > 0) {
      const float inv = 15.0f / max_min;
      for (int s = 0; s < kQKK / kSub; ++s) {
        blk.scales[s] |= static_cast<uint8_t>(four_bit_code(inv, mins[s]) << 4);
      }
      blk.dmin = fp32_to_fp16(max_min / 15.0f);
    }
    for (int s = 0; s < kQKK / kSub; ++s) {
      const float d = fp16_to_fp32(blk.d) * (blk.scales[s] & 15);
      if (d == 0) continue;
      const float dm = fp16_to_fp32(blk.dmin) * (blk.scales[s] >> 4);
      for (int l = 0; l < kSub; ++l) {
        q[kSub * s + l] =
            static_cast<uint8_t>(std::clamp(nearest_int((x[kSub * s + l] + dm) / d), 0, 3));
      }
    }
    pack_two_bit_levels(q.data(), blk.qs);
  }
}

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float dmin = fp16_to_fp32(in[b].dmin);
    for (int i = 0; i < kQKK; ++i) {
      const uint8_t sc = in[b].scales[i / 16];
      const float dl = d * (sc & 15);
      const float ml = dmin * (sc >> 4);
      dst[b * kQKK + i] = dl * static_cast<float>(two_bit_level(in[b].qs, i)) - ml;
    }
  }
}

// One float sum over the super-blocks of d * (integer dot) - dmin * (min terms), as
// llama.cpp's generic Q2_K dot (no lanes).
float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ2_K*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0;
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    int32_t sum_mins = 0;
    int32_t sumi = 0;
    for (int s = 0; s < kQKK / 16; ++s) {
      sum_mins += by[b].bsums[s] * (bx[b].scales[s] >> 4);
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) {
        sub += by[b].qs[16 * s + l] * two_bit_level(bx[b].qs, 16 * s + l);
      }
      sumi += (bx[b].scales[s] & 15) * sub;
    }
    const float dall = by[b].d * fp16_to_fp32(bx[b].d);
    const float dmin = by[b].d * fp16_to_fp32(bx[b].dmin);
    sum += dall * static_cast<float>(sumi) - dmin * static_cast<float>(sum_mins);
  }
  return sum;
}

// ---- Q3_K ---------------------------------------------------------------------------------

namespace {

// The signed level (q - 4, in [-4, 3]) of element i of a Q3_K block.
int q3_k_value(const BlockQ3_K& blk, int i) {
  const bool high = (blk.hmask[i % 32] >> (i / 32)) & 1;
  return two_bit_level(blk.qs, i) - (high ? 0 : 4);
}

// Fits x[i] ~= scale * l[i] with l in [-nmax, nmax): rounds against the signed absmax mapped
// to -nmax, then up to five passes move single levels to raise the x^2-weighted correlation
// (llama.cpp's make_q3_quants with rmse). Writes l + nmax to q, returns the scale.
float fit_q3_levels(const float* x, int n, int nmax, uint8_t* q) {
  float amax = 0;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(q, q + n, uint8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  std::array<int, 16> l{};
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    l[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * static_cast<float>(l[i]);
    sum_l2 += w * static_cast<float>(l[i]) * static_cast<float>(l[i]);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sum_lx - w * x[i] * static_cast<float>(l[i]);
      if (!(slx > 0)) continue;
      float sl2 = sum_l2 - w * static_cast<float>(l[i]) * static_cast<float>(l[i]);
      const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == l[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
        l[i] = new_l;
        sum_lx = slx;
        sum_l2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(l[i] + nmax);
  return sum_l2 > 0 ? sum_lx / sum_l2 : 0.0f;
}

}  // namespace

// Per 16 elements a symmetric scale (fit_q3_levels), the sixteen coded in 6 bits with the
// super-block's signed largest at -32, then the levels recomputed against the stored scales:
// llama.cpp's quantize_row_q3_K_ref.
void quantize_q3_k(const float* src, void* dst, int64_t n) {
  constexpr int kSub = 16;
  auto* out = static_cast<BlockQ3_K*>(dst);
  std::array<uint8_t, kQKK> q{};
  std::array<float, kQKK / kSub> scales{};
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float* x = src + b * kQKK;
    BlockQ3_K& blk = out[b];
    float max_scale = 0;
    float max_abs = 0;
    for (int s = 0; s < kQKK / kSub; ++s) {
      scales[s] = fit_q3_levels(x + kSub * s, kSub, 4, q.data() + kSub * s);
      if (std::fabs(scales[s]) > max_abs) {
        max_abs = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::fill(std::begin(blk.scales), std::end(blk.scales), uint8_t{0});
    blk.d = fp32_to_fp16(0.0f);
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int s = 0; s < kQKK / kSub; ++s) {
        const int code = std::clamp(nearest_int(iscale * scales[s]), -32, 31) + 32;
        blk.scales[s % 8] |= static_cast<uint8_t>((code & 15) << (4 * (s / 8)));
        blk.scales[8 + s % 4] |= static_cast<uint8_t>((code >> 4) << (2 * (s / 4)));
      }
      blk.d = fp32_to_fp16(1.0f / iscale);
    }
    for (int s = 0; s < kQKK / kSub; ++s) {
      const float d = fp16_to_fp32(blk.d) * static_cast<float>(q3_k_scale(blk.scales, s) - 32);
      if (d == 0) continue;
      for (int l = 0; l < kSub; ++l) {
        q[kSub * s + l] =
            static_cast<uint8_t>(std::clamp(nearest_int(x[kSub * s + l] / d), -4, 3) + 4);
      }
    }
    std::fill(std::begin(blk.hmask), std::end(blk.hmask), uint8_t{0});
    for (int i = 0; i < kQKK; ++i) {
      if (q[i] > 3) {
        blk.hmask[i % 32] |= static_cast<uint8_t>(1 << (i / 32));
        q[i] -= 4;
      }
    }
    pack_two_bit_levels(q.data(), blk.qs);
  }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (int i = 0; i < kQKK; ++i) {
      const float dl = d * static_cast<float>(q3_k_scale(in[b].scales, i / 16) - 32);
      dst[b * kQKK + i] = dl * static_cast<float>(q3_k_value(in[b], i));
    }
  }
}

float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ3_K*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float lane_sums[8] = {};
  int8_t a[kQKK];
  int scales[kQKK / 16];
  int32_t lanes[8];
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    for (int i = 0; i < kQKK; ++i) a[i] = static_cast<int8_t>(q3_k_value(bx[b], i));
    for (int s = 0; s < kQKK / 16; ++s) scales[s] = q3_k_scale(bx[b].scales, s) - 32;
    k_lanes(a, by[b].qs, scales, 16, lanes);
    const float d = fp16_to_fp32(bx[b].d) * by[b].d;
    for (int l = 0; l < 8; ++l) lane_sums[l] += d * static_cast<float>(lanes[l]);
  }
  float sum = 0;
  for (float s : lane_sums) sum += s;
  return sum;
}

}  // namespace qrun
