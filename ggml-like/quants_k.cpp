// Reference kernels of the k-quants Q2_K .. Q6_K and of their activation type Q8_K.
// The quantizers run the same searches as llama.cpp's reference quantizers (no importance
// matrix): Q4_K/Q5_K fit a scale and a min per 32-element sub-block by a weighted
// least-squares sweep over candidate scales; Q6_K fits a symmetric scale per 16 elements by
// a sweep that maximises the x^2-weighted correlation. Q8_K rounds half to even, as
// llama.cpp's reference does. Dot products keep eight integer lanes (element index mod 8)
// per super-block and scale them into eight float sums, llama.cpp's generic order.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "ggml-like/quants_k_fit.h"

namespace qrun {
namespace kquant {
namespace {

inline float fit_error(FitError e, float diff) {
  return e == FitError::kAbsolute ? std::fabs(diff) : diff * diff;
}

}  // namespace

float fit_scale_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                    int nstep, FitError measure, uint8_t* q, float* min_out) {
  float lo = x[0];
  float hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(q, q + n, uint8_t{0});
    *min_out = -lo;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float best_err = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax));
    best_err += w[i] * fit_error(measure, scale * q[i] + lo - x[i]);
  }
  std::array<uint8_t, 32> trial{};
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * static_cast<float>(k) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      err += w[i] * fit_error(measure, this_scale * trial[i] + this_min - x[i]);
    }
    if (err < best_err) {
      std::copy(trial.begin(), trial.begin() + n, q);
      best_err = err;
      scale = this_scale;
      lo = this_min;
    }
  }
  *min_out = -lo;
  return scale;
}

// Eight lanes, the integer order of llama.cpp's generic k-quant dots.
void k_lanes(const int8_t* a, const int8_t* q8, const int* sub_scale, int sub_len, int32_t* lanes) {
  std::fill(lanes, lanes + 8, 0);
  for (int i = 0; i < kQKK; ++i) lanes[i % 8] += sub_scale[i / sub_len] * (a[i] * q8[i]);
}

}  // namespace kquant

using kquant::fit_scale_min;
using kquant::FitError;
using kquant::k_lanes;
using kquant::kGroupEps;
using kquant::nearest_int;
using kquant::signed_absmax;
using kquant::superblocks_of;

namespace {

// Fits x[i] ~= scale * (q[i] - nmax) with q in [0, 2 nmax), weighting element i by x[i]^2.
// Tries the inverse scales -(nmax + k/10) / max for k = -9..9 (max = the signed absmax)
// and keeps the one whose rounded levels best correlate with x. Returns the scale.
float fit_symmetric_scale(const float* x, int n, int nmax, int8_t* q) {
  float amax = 0;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(q, q + n, int8_t{0});
    return 0.0f;
  }
  // Weighted sums for the levels of one inverse scale; optionally stores the levels.
  auto correlate = [&](float iscale, float* sum_lx, float* sum_l2, bool store) {
    *sum_lx = 0;
    *sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) q[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      *sum_lx += w * x[i] * static_cast<float>(l);
      *sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float sum_lx = 0;
  float sum_l2 = 0;
  correlate(static_cast<float>(-nmax) / max, &sum_lx, &sum_l2, true);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    correlate(iscale, &sum_lx, &sum_l2, false);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      correlate(iscale, &sum_lx, &sum_l2, true);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Packs eight 6-bit scales and mins into the 12-byte layout documented in quants.h.
void pack_k_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* b) {
  for (int s = 0; s < 4; ++s) {
    b[s] = static_cast<uint8_t>(sc[s] | (sc[s + 4] >> 4) << 6);
    b[s + 4] = static_cast<uint8_t>(mn[s] | (mn[s + 4] >> 4) << 6);
    b[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | (mn[s + 4] & 15) << 4);
  }
}

// Shared body of the Q4_K and Q5_K quantizers for one super-block: per sub-block scale
// and min fits, both quantized to 6 bits against their maxima (d, dmin), then the levels
// recomputed against the stored scales. Writes levels (0..nmax) to q.
void quantize_k_superblock(const float* x, int nmax, float rmin, float rdelta, int nstep,
                           uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out, uint8_t* q) {
  constexpr int kSub = 32;
  std::array<float, kQKK / kSub> scales{};
  std::array<float, kQKK / kSub> mins{};
  std::array<float, kSub> w{};
  float max_scale = 0;
  float max_min = 0;
  for (int s = 0; s < kQKK / kSub; ++s) {
    const float* xs = x + s * kSub;
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[s] = fit_scale_min(xs, w.data(), kSub, nmax, rmin, rdelta, nstep, FitError::kSquared,
                              q + s * kSub, &mins[s]);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::array<uint8_t, 8> ls{};
  std::array<uint8_t, 8> lm{};
  for (int s = 0; s < kQKK / kSub; ++s) {
    // Converted to uint8 before the clamp, as llama.cpp does, so that even a (rare)
    // negative fitted scale gives the same bits.
    ls[s] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[s])));
    lm[s] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[s])));
  }
  pack_k_scales(ls.data(), lm.data(), scales_out);
  *d_out = fp32_to_fp16(max_scale / 63.0f);
  *dmin_out = fp32_to_fp16(max_min / 63.0f);
  for (int s = 0; s < kQKK / kSub; ++s) {
    uint8_t sc = 0;
    uint8_t m = 0;
    unpack_k_scale_min(scales_out, s, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * sc;
    if (d == 0) continue;  // keep the fitted levels; they dequantize to -dmin * m anyway
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int l = 0; l < kSub; ++l) {
      q[s * kSub + l] =
          static_cast<uint8_t>(std::clamp(nearest_int((x[s * kSub + l] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

// ---- Q4_K ---------------------------------------------------------------------------------

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ4_K*>(dst);
  std::array<uint8_t, kQKK> q{};
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    BlockQ4_K& blk = out[b];
    quantize_k_superblock(src + b * kQKK, 15, -1.0f, 0.1f, 20, &blk.d, &blk.dmin, blk.scales,
                          q.data());
    for (int g = 0; g < kQKK / 64; ++g) {
      for (int l = 0; l < 32; ++l) {
        blk.qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | q[64 * g + 32 + l] << 4);
      }
    }
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float dmin = fp16_to_fp32(in[b].dmin);
    float* y = dst + b * kQKK;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc = 0;
      uint8_t m = 0;
      unpack_k_scale_min(in[b].scales, s, &sc, &m);
      const float ds = d * sc;
      const float ms = dmin * m;
      const uint8_t* qs = in[b].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) y[32 * s + l] = ds * ((qs[l] >> shift) & 15) - ms;
    }
  }
}

namespace {

// The shared tail of the Q4_K and Q5_K dot products: a[] holds the 256 unscaled levels.
void dot_scale_min_superblock(const int8_t* a, const uint8_t* packed_scales, float d, float dmin,
                              const BlockQ8_K& y, float* lane_sums, float* sum) {
  int scales[8];
  int32_t sum_mins = 0;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0;
    uint8_t m = 0;
    unpack_k_scale_min(packed_scales, s, &sc, &m);
    scales[s] = sc;
    sum_mins += (y.bsums[2 * s] + y.bsums[2 * s + 1]) * m;
  }
  int32_t lanes[8];
  k_lanes(a, y.qs, scales, 32, lanes);
  const float dd = d * y.d;
  for (int l = 0; l < 8; ++l) lane_sums[l] += dd * static_cast<float>(lanes[l]);
  *sum -= (dmin * y.d) * static_cast<float>(sum_mins);
}

}  // namespace

float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ4_K*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float lane_sums[8] = {};
  float sum = 0;
  int8_t a[kQKK];
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    for (int i = 0; i < kQKK; ++i) {
      a[i] = static_cast<int8_t>((bx[b].qs[32 * (i / 64) + i % 32] >> (4 * ((i / 32) % 2))) & 15);
    }
    dot_scale_min_superblock(a, bx[b].scales, fp16_to_fp32(bx[b].d), fp16_to_fp32(bx[b].dmin),
                             by[b], lane_sums, &sum);
  }
  for (float s : lane_sums) sum += s;
  return sum;
}

// ---- Q5_K ---------------------------------------------------------------------------------

namespace {

int q5_k_level(const BlockQ5_K& blk, int i) {
  const int g = i / 64;
  const int half = (i / 32) % 2;
  const int l = i % 32;
  const int low = (blk.qs[32 * g + l] >> (4 * half)) & 15;
  const int high = (blk.qh[l] >> (2 * g + half)) & 1;
  return low | high << 4;
}

}  // namespace

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ5_K*>(dst);
  std::array<uint8_t, kQKK> q{};
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    BlockQ5_K& blk = out[b];
    quantize_k_superblock(src + b * kQKK, 31, -0.5f, 0.1f, 15, &blk.d, &blk.dmin, blk.scales,
                          q.data());
    std::memset(blk.qh, 0, sizeof(blk.qh));
    for (int g = 0; g < kQKK / 64; ++g) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * g + l];
        const int hi = q[64 * g + 32 + l];
        blk.qs[32 * g + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
        blk.qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1));
      }
    }
  }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    const float dmin = fp16_to_fp32(in[b].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc = 0;
      uint8_t m = 0;
      unpack_k_scale_min(in[b].scales, s, &sc, &m);
      const float ds = d * sc;
      const float ms = dmin * m;
      for (int l = 0; l < 32; ++l) {
        dst[b * kQKK + 32 * s + l] = ds * static_cast<float>(q5_k_level(in[b], 32 * s + l)) - ms;
      }
    }
  }
}

float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ5_K*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float lane_sums[8] = {};
  float sum = 0;
  int8_t a[kQKK];
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    for (int i = 0; i < kQKK; ++i) a[i] = static_cast<int8_t>(q5_k_level(bx[b], i));
    dot_scale_min_superblock(a, bx[b].scales, fp16_to_fp32(bx[b].d), fp16_to_fp32(bx[b].dmin),
                             by[b], lane_sums, &sum);
  }
  for (float s : lane_sums) sum += s;
  return sum;
}

// ---- Q6_K ---------------------------------------------------------------------------------

namespace {

// The signed level (q - 32, in [-32, 31]) of element i of a Q6_K block.
int q6_k_value(const BlockQ6_K& blk, int i) {
  const int h = i / 128;
  const int r = i % 128;  // r = 32 * part + l
  const int part = r / 32;
  const int l = r % 32;
  const uint8_t ql = blk.ql[64 * h + 32 * (part % 2) + l];
  const int low = (ql >> (4 * (part / 2))) & 15;
  const int high = (blk.qh[32 * h + l] >> (2 * part)) & 3;
  return (low | high << 4) - 32;
}

}  // namespace

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ6_K*>(dst);
  std::array<int8_t, kQKK> q{};
  std::array<float, kQKK / 16> scales{};
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float* x = src + b * kQKK;
    BlockQ6_K& blk = out[b];
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int s = 0; s < kQKK / 16; ++s) {
      scales[s] = fit_symmetric_scale(x + 16 * s, 16, 32, q.data() + 16 * s);
      if (std::fabs(scales[s]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    if (max_abs_scale < kGroupEps) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    // The largest sub-block scale maps to -128 exactly; the others are rounded into int8.
    const float iscale = -128.0f / max_scale;
    blk.d = fp32_to_fp16(1.0f / iscale);
    for (int s = 0; s < kQKK / 16; ++s) {
      blk.scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
    }
    for (int s = 0; s < kQKK / 16; ++s) {
      const float d = fp16_to_fp32(blk.d) * blk.scales[s];
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        q[16 * s + l] =
            static_cast<int8_t>(std::clamp(nearest_int(x[16 * s + l] / d), -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* qq = q.data() + 128 * h;
      for (int l = 0; l < 32; ++l) {
        blk.ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 15) | (qq[l + 64] & 15) << 4);
        blk.ql[64 * h + 32 + l] = static_cast<uint8_t>((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
        blk.qh[32 * h + l] = static_cast<uint8_t>((qq[l] >> 4) | (qq[l + 32] >> 4) << 2 |
                                                  (qq[l + 64] >> 4) << 4 | (qq[l + 96] >> 4) << 6);
      }
    }
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (int i = 0; i < kQKK; ++i) {
      dst[b * kQKK + i] = d * in[b].scales[i / 16] * static_cast<float>(q6_k_value(in[b], i));
    }
  }
}

float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockQ6_K*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float lane_sums[8] = {};
  int8_t a[kQKK];
  int scales[kQKK / 16];
  int32_t lanes[8];
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    for (int i = 0; i < kQKK; ++i) a[i] = static_cast<int8_t>(q6_k_value(bx[b], i));
    for (int s = 0; s < kQKK / 16; ++s) scales[s] = bx[b].scales[s];
    k_lanes(a, by[b].qs, scales, 16, lanes);
    const float d = fp16_to_fp32(bx[b].d) * by[b].d;
    for (int l = 0; l < 8; ++l) lane_sums[l] += d * static_cast<float>(lanes[l]);
  }
  float sum = 0;
  for (float s : lane_sums) sum += s;
  return sum;
}

// ---- Q8_K ---------------------------------------------------------------------------------

// The signed absmax maps to -127; q = nearest_int(x * -127 / max) (ties to even), and
// bsums caches the sum of each 16 levels for the min terms of the Q4_K/Q5_K dots.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    const float* x = src + b * kQKK;
    BlockQ8_K& blk = out[b];
    float amax = 0;
    const float max = signed_absmax(x, kQKK, &amax);
    if (amax == 0) {
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQKK; ++i) {
      blk.qs[i] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[i])));
    }
    for (int k = 0; k < kQKK / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * k + i];
      blk.bsums[k] = static_cast<int16_t>(sum);
    }
    blk.d = 1.0f / iscale;
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < superblocks_of(n); ++b) {
    for (int i = 0; i < kQKK; ++i) dst[b * kQKK + i] = in[b].d * in[b].qs[i];
  }
}

}  // namespace qrun
