// Internal to the k-quant reference kernels (quants_k.cpp, quants_k_low.cpp): the rounding,
// the scale-and-min fit and the integer lanes that several k-quant types share.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace qrun::kquant {

// Rounds to the nearest integer, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves
// the rounded integer in the low mantissa bits.
inline int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffff) - 0x00400000;
}

inline constexpr float kGroupEps = 1e-15f;  // a group whose absmax is below this is all zero

inline int64_t superblocks_of(int64_t n) {
  return n / 256;
}

// The first element of x[0, n) of the largest magnitude, with that magnitude in *amax (0
// for an empty or all-zero x): the "signed absmax" the symmetric fits map to -nmax.
inline float signed_absmax(const float* x, int n, float* amax) {
  float max = 0;
  *amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > *amax) {
      *amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// How fit_scale_min weighs a residual: Q4_K and Q5_K by its square, Q2_K by its magnitude.
enum class FitError { kSquared, kAbsolute };

// Fits x[i] ~= scale * q[i] - min_out with q in [0, nmax] (n <= 32), minimising the weighted
// error. Starts from the min/max range, then tries the candidate inverse scales
// (nmax + rmin + rdelta * k) / (max - min) for k = 0..nstep: for each, the levels are
// rounded and the scale and offset solved by weighted least squares (the offset clamped so
// that min_out >= 0). Keeps the best. Writes the levels to q, returns the scale.
float fit_scale_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                    int nstep, FitError measure, uint8_t* q, float* min_out);

// Eight integer lanes of sum(scale * a * q8) for one super-block, lane = index mod 8, as
// llama.cpp's generic k-quant dot products accumulate them. a[i] is the unscaled level,
// sub_scale[i / sub_len] its sub-block's integer scale.
void k_lanes(const int8_t* a, const int8_t* q8, const int* sub_scale, int sub_len, int32_t* lanes);

}  // namespace qrun::kquant
