// Reference kernels of IQ4_NL and IQ4_XS, the non-linear 4-bit types: levels are indices
// into kIq4Values (quants.h). The quantizers give the bits of llama-quantize without an
// importance matrix (ggml's quantize_iq4_nl / quantize_iq4_xs): the same float operations in
// the same order (this library builds with -ffp-contract=off), the same tie-breaks. Dot
// products sum integers per 32 elements exactly, then scale in llama.cpp's generic order.
#include <cmath>
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"

namespace qrun {
namespace {

constexpr int kTries = 7;               // scales tried on each side of the first guess
constexpr float kGroupMaxEps = 1e-15f;  // a block below this is all zeros

// The index of the level nearest x (the lower one on a tie), by bisection as ggml does.
int nearest_level(float x) {
  if (x <= kIq4Values[0]) return 0;
  if (x >= kIq4Values[15]) return 15;
  int lo = 0;
  int hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kIq4Values[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - kIq4Values[hi - 1] < kIq4Values[hi] - x ? hi - 1 : hi;
}

// round(x), half to even, for |x| < 2^22: ggml's nearest_int, exact by construction.
int nearest_int(float x) {
  const float v = x + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// The scale of one block of 32 that minimizes sum x^2 (x - d * level)^2 over kTries tries
// on each side of max / 127 (max: the element of largest magnitude, with its sign); 0 for
// an all-zero block.
float best_block_scale(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int64_t j = 0; j < kQK; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  // sum w q x and sum w q^2 (w = x^2) for levels chosen at multiplier id.
  auto sums = [&](float id, float* sumqx, float* sumq2) {
    *sumqx = 0.0f;
    *sumq2 = 0.0f;
    for (int64_t j = 0; j < kQK; ++j) {
      const float q = kIq4Values[nearest_level(id * x[j])];
      const float w = x[j] * x[j];
      *sumqx += w * q * x[j];
      *sumq2 += w * q * q;
    }
  };
  float sumqx = 0.0f;
  float sumq2 = 0.0f;
  sums(1.0f / (-max / kIq4Values[0]), &sumqx, &sumq2);
  float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int t = -kTries; t <= kTries; ++t) {
    sums(static_cast<float>(t + kIq4Values[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// The 16 bytes of one block of 32: the levels nearest x * id, element j in the low nibble of
// byte j and element j + 16 in the high one.
void pack_levels(const float* x, float id, uint8_t* qs) {
  for (int64_t j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>(nearest_level(id * x[j]) | nearest_level(id * x[j + 16]) << 4);
  }
}

int32_t block_sum(const uint8_t* qs, const int8_t* a) {
  int32_t lo = 0;
  int32_t hi = 0;
  for (int64_t j = 0; j < kQK / 2; ++j) {
    lo += a[j] * kIq4Values[qs[j] & 15];
    hi += a[j + kQK / 2] * kIq4Values[qs[j] >> 4];
  }
  return lo + hi;
}

void dequantize_block(const uint8_t* qs, float d, float* y) {
  for (int64_t j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[qs[j] & 15]);
    y[j + kQK / 2] = d * static_cast<float>(kIq4Values[qs[j] >> 4]);
  }
}

}  // namespace

// ---- IQ4_NL -------------------------------------------------------------------------------

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    const float d = best_block_scale(x);
    out[b].d = fp32_to_fp16(d);
    pack_levels(x, d != 0.0f ? 1.0f / d : 0.0f, out[b].qs);
  }
}

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK; ++b)
    dequantize_block(in[b].qs, fp16_to_fp32(in[b].d), dst + b * kQK);
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockIQ4_NL*>(x);
  const auto* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(by[b].d) * fp16_to_fp32(bx[b].d);
    sum += d * static_cast<float>(block_sum(bx[b].qs, by[b].qs));
  }
  return sum;
}

// ---- IQ4_XS -------------------------------------------------------------------------------

// Each block's best scale, then the super-block scale d = -(the scale of largest magnitude)
// / 32, each block's as d * (l - 32) with l in [0, 63], and the levels at that scale.
void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
  constexpr int kBlocks = kQKK / kQK;
  auto* out = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const float* x = src + sb * kQKK;
    BlockIQ4_XS& o = out[sb];
    float scales[kBlocks];
    float max_scale = 0.0f;
    float amax_scale = 0.0f;
    for (int s = 0; s < kBlocks; ++s) {
      scales[s] = best_block_scale(x + s * kQK);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    const float d = -max_scale / 32;
    o.d = fp32_to_fp16(d);
    o.scales_h = 0;
    std::memset(o.scales_l, 0, sizeof(o.scales_l));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int s = 0; s < kBlocks; ++s) {
      int l = nearest_int(id * scales[s]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * static_cast<float>(l);
      pack_levels(x + s * kQK, dl != 0.0f ? 1.0f / dl : 0.0f, o.qs + s * (kQK / 2));
      l += 32;
      o.scales_l[s / 2] = static_cast<uint8_t>(o.scales_l[s / 2] | (l & 15) << (4 * (s % 2)));
      o.scales_h = static_cast<uint16_t>(o.scales_h | (l >> 4) << (2 * s));
    }
  }
}

void dequantize_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* in = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const float d = fp16_to_fp32(in[sb].d);
    for (int s = 0; s < kQKK / kQK; ++s) {
      const float dl = d * static_cast<float>(iq4_xs_scale(in[sb], s) - 32);
      dequantize_block(in[sb].qs + s * (kQK / 2), dl, dst + sb * kQKK + s * kQK);
    }
  }
}

float vec_dot_iq4_xs_q8_k(int64_t n, const void* x, const void* y) {
  const auto* bx = static_cast<const BlockIQ4_XS*>(x);
  const auto* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t sb = 0; sb < n / kQKK; ++sb) {
    const float d = fp16_to_fp32(bx[sb].d) * by[sb].d;
    for (int s = 0; s < kQKK / kQK; ++s) {
      const float dl = d * static_cast<float>(iq4_xs_scale(bx[sb], s) - 32);
      sum += dl * static_cast<float>(block_sum(bx[sb].qs + s * (kQK / 2), by[sb].qs + s * kQK));
    }
  }
  return sum;
}

}  // namespace qrun
