// The vec_dot kernels and activation converters of every ISA this host runs (generic,
// avx2, avx512, neon), against the scalar references of ggml-like/ for every weight type:
// - random rows (normal data with outliers, at small, unit and large scales) on awkward
//   lengths (1, 7, 33 blocks; 1, 3, 17 super-blocks; 1 .. 4097 floats): kernels sum exact
//   integer block products in their own float order, so |y - ref| <= 1e-5 * sum |w_i a_i|
//   over the dequantized weights and activations;
// - unit scales with integer levels, and raw blocks with every level at its extreme: the
//   result is an integer below 2^24, so any summation order gives it exactly;
// - quantize_act against the reference byte for byte (finite inputs), with guard bytes
//   after the row, and the decode matmul (one token) with NaN-prefilled outputs;
// - the AVX-512 kernels against the AVX2 ones and gemv against vec_dot: bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kRelTol = 1e-5;
constexpr double kExactLimit = 16777216.0;  // 2^24: integers below it are exact in float

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ4_0,
                              DType::kQ5_0, DType::kQ8_0,   DType::kQ4_1,  DType::kQ5_1,
                              DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K,  DType::kQ5_K,
                              DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

std::vector<int64_t> row_lengths(DType type) {
  const int64_t block = type_traits(type).block_elems;
  if (block == 1) return {1, 7, 31, 32, 33, 255, 4097};
  if (block == 32) return {32, 7 * 32, 33 * 32};
  return {256, 3 * 256, 17 * 256};
}

DType act_type_of(DType w_type) {
  return cpu_kernels(Isa::kGeneric).for_type(w_type).act_type;
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  for (size_t i = 3; i < v.size(); i += 97) v[i] *= 12.0f;  // outliers
  return v;
}

// A row of `type` from floats with the reference converter (weights) or the given one.
std::vector<uint8_t> to_row(DType type, const std::vector<float>& src, FromFloatFn convert) {
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<uint8_t> out(row_size(type, n));
  if (convert != nullptr) {
    convert(src.data(), out.data(), n);
  } else if (type == DType::kF32) {
    std::memcpy(out.data(), src.data(), out.size());
  } else {
    quantize_rows(type, src.data(), out.data(), 1, n);
  }
  return out;
}

std::vector<float> dequantized(DType type, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, row.data(), out.data(), n);
  return out;
}

// sum |w_i a_i| and the exact sum w_i a_i (double; exact for the small integers used by
// the exactness tests) over dequantized rows.
void magnitudes(DType w_type, const std::vector<uint8_t>& w, const std::vector<uint8_t>& a,
                int64_t n, double* abs_sum, double* sum) {
  const std::vector<float> wd = dequantized(w_type, w, n);
  const std::vector<float> ad = dequantized(act_type_of(w_type), a, n);
  *abs_sum = 0.0;
  *sum = 0.0;
  for (size_t i = 0; i < wd.size(); ++i) {
    *abs_sum += std::fabs(double{wd[i]} * ad[i]);
    *sum += double{wd[i]} * ad[i];
  }
}

TEST(KernelsDot, RandomRowsMatchReference) {
  uint32_t seed = 1;
  for (Isa isa : host_isas()) {
    for (DType type : kWeightTypes) {
      const VecDotFn dot = cpu_kernels(isa).for_type(type).vec_dot;
      const VecDotFn ref = type_traits(type).vec_dot;
      const FromFloatFn ref_act = cpu_kernels(Isa::kGeneric).for_type(type).quantize_act;
      ASSERT_NE(dot, nullptr) << isa_name(isa) << " " << dtype_name(type);
      for (int64_t n : row_lengths(type)) {
        for (float scale : {1e-3f, 1.0f, 300.0f}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                          << " scale " << scale);
          const std::vector<uint8_t> w = to_row(type, random_floats(n, ++seed, 0.7f), nullptr);
          const std::vector<uint8_t> a =
              to_row(act_type_of(type), random_floats(n, ++seed, scale), ref_act);
          double mag = 0.0;
          double exact = 0.0;
          magnitudes(type, w, a, n, &mag, &exact);
          const float got = dot(n, w.data(), a.data());
          const float want = ref(n, w.data(), a.data());
          EXPECT_LE(std::fabs(double{got} - want), kRelTol * mag + 1e-30)
              << got << " vs " << want << " (magnitude " << mag << ")";
        }
      }
    }
  }
}

// ---- raw rows with integer values: exact results ---------------------------------------

// A weight row with unit block scales (d = dmin = 1) and random levels; the sub-block
// scales of the k-quants are kept small so that the sum stays below 2^24. With `extreme`,
// every level is at its largest (and Q8_0 at -128) and so are the scales the bound allows
// (Q4_1/Q5_1: the minimum m is -3 there, 1 otherwise).
std::vector<uint8_t> raw_weights(DType type, int64_t n, std::mt19937& rng, bool extreme) {
  std::vector<uint8_t> row(row_size(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : row) b = static_cast<uint8_t>(extreme ? 255 : byte(rng));
  const uint16_t one = fp32_to_fp16(1.0f);
  std::uniform_int_distribution<int> small(0, extreme ? 3 : 15);
  auto pack_small_scales = [&](uint8_t* b) {  // 6-bit scales and mins, all below 16
    for (int s = 0; s < 4; ++s) {
      b[s] = static_cast<uint8_t>(small(rng));
      b[s + 4] = static_cast<uint8_t>(small(rng));
      b[s + 8] = static_cast<uint8_t>(small(rng) | small(rng) << 4);
    }
  };
  const int64_t block = type_traits(type).block_elems;
  for (int64_t i = 0; i < n / block; ++i) {
    switch (type) {
      case DType::kF32: {
        const float v = static_cast<float>(extreme ? 8 : byte(rng) % 17 - 8);
        std::memcpy(row.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        const float v = static_cast<float>(extreme ? -8 : byte(rng) % 17 - 8);
        const uint16_t h = type == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(row.data() + 2 * i, &h, 2);
        break;
      }
      case DType::kQ4_0:
        reinterpret_cast<BlockQ4_0*>(row.data())[i].d = one;
        break;
      case DType::kQ5_0:
        reinterpret_cast<BlockQ5_0*>(row.data())[i].d = one;
        break;
      case DType::kQ4_1: {
        auto& blk = reinterpret_cast<BlockQ4_1*>(row.data())[i];
        blk.d = one;
        blk.m = extreme ? fp32_to_fp16(-3.0f) : one;
        break;
      }
      case DType::kQ5_1: {
        auto& blk = reinterpret_cast<BlockQ5_1*>(row.data())[i];
        blk.d = one;
        blk.m = extreme ? fp32_to_fp16(-3.0f) : one;
        break;
      }
      case DType::kIQ4_NL:
        reinterpret_cast<BlockIQ4_NL*>(row.data())[i].d = one;
        break;
      case DType::kIQ4_XS: {  // block scales ls - 32 in [-3, 3]
        auto& blk = reinterpret_cast<BlockIQ4_XS*>(row.data())[i];
        blk.d = one;
        blk.scales_h = 0;
        std::uniform_int_distribution<int> ls(29, 35);
        for (int s = 0; s < kQKK / kQK; ++s) {
          const int l = extreme ? 29 : ls(rng);
          blk.scales_l[s / 2] =
              static_cast<uint8_t>(s % 2 == 0 ? (l & 15) : blk.scales_l[s / 2] | (l & 15) << 4);
          blk.scales_h = static_cast<uint16_t>(blk.scales_h | (l >> 4) << (2 * s));
        }
        break;
      }
      case DType::kQ8_0: {
        auto& blk = reinterpret_cast<BlockQ8_0*>(row.data())[i];
        blk.d = one;
        if (extreme) std::memset(blk.qs, 0x80, sizeof(blk.qs));
        break;
      }
      case DType::kQ4_K: {
        auto& blk = reinterpret_cast<BlockQ4_K*>(row.data())[i];
        blk.d = one;
        blk.dmin = one;
        pack_small_scales(blk.scales);
        break;
      }
      case DType::kQ5_K: {
        auto& blk = reinterpret_cast<BlockQ5_K*>(row.data())[i];
        blk.d = one;
        blk.dmin = one;
        pack_small_scales(blk.scales);
        break;
      }
      case DType::kQ2_K: {  // random bytes: 4-bit scales and mins 0..15; extreme: all 15
        auto& blk = reinterpret_cast<BlockQ2_K*>(row.data())[i];
        blk.d = one;
        blk.dmin = one;
        if (!extreme) {  // a zero scale with the largest min, and the reverse
          blk.scales[0] = 0xf0;
          blk.scales[15] = 0x0f;
        }
        break;
      }
      case DType::kQ3_K: {
        // Extreme: even super-blocks all zero bytes (levels -4, scales sc - 32 = -32, the
        // largest magnitudes), odd ones all 0xff (levels 3, scales 31); otherwise random
        // levels and scales near 32 (|sc - 32| <= 8), with sub-blocks 0 and 15 at 0 and 63.
        auto& blk = reinterpret_cast<BlockQ3_K*>(row.data())[i];
        if (extreme && i % 2 == 0) std::memset(&blk, 0, sizeof(blk));
        blk.d = one;
        if (!extreme) {
          std::uniform_int_distribution<int> sc(24, 40);
          std::memset(blk.scales, 0, sizeof(blk.scales));
          for (int s = 0; s < 16; ++s) {
            const int code = s == 0 ? 0 : s == 15 ? 63 : sc(rng);
            blk.scales[s % 8] =
                static_cast<uint8_t>(blk.scales[s % 8] | (code & 15) << (4 * (s / 8)));
            blk.scales[8 + s % 4] =
                static_cast<uint8_t>(blk.scales[8 + s % 4] | (code >> 4) << (2 * (s / 4)));
          }
        }
        break;
      }
      case DType::kQ6_K: {
        auto& blk = reinterpret_cast<BlockQ6_K*>(row.data())[i];
        blk.d = one;
        std::uniform_int_distribution<int> sc(-16, 16);
        for (int8_t& s : blk.scales) s = static_cast<int8_t>(extreme ? -16 : sc(rng));
        break;
      }
      default:
        ADD_FAILURE() << "no raw generator for " << dtype_name(type);
    }
  }
  return row;
}

// An activation row with unit scales and levels in [-127, 127] (the quantizers' range):
// pattern 0 all 127, 1 all -127, 2 alternating, 3 random. Float rows hold small integers.
std::vector<uint8_t> raw_acts(DType act_type, int64_t n, std::mt19937& rng, int pattern) {
  std::vector<uint8_t> row(row_size(act_type, n));
  std::uniform_int_distribution<int> level(-127, 127);
  auto pick = [&](int64_t i) {
    switch (pattern) {
      case 0:
        return 127;
      case 1:
        return -127;
      case 2:
        return i % 2 == 0 ? 127 : -127;
      default:
        return level(rng);
    }
  };
  if (act_type == DType::kQ8_0) {
    auto* blk = reinterpret_cast<BlockQ8_0*>(row.data());
    for (int64_t b = 0; b < n / kQK; ++b) {
      blk[b].d = fp32_to_fp16(1.0f);
      for (int i = 0; i < kQK; ++i) blk[b].qs[i] = static_cast<int8_t>(pick(i));
    }
  } else if (act_type == DType::kQ8_1) {
    // s = d * sum(q) is F16, which holds every even integer up to 4096 (|sum| <= 32 * 127):
    // an odd sum is made even so that s is exact.
    auto* blk = reinterpret_cast<BlockQ8_1*>(row.data());
    for (int64_t b = 0; b < n / kQK; ++b) {
      blk[b].d = fp32_to_fp16(1.0f);
      int sum = 0;
      for (int i = 0; i < kQK; ++i) {
        blk[b].qs[i] = static_cast<int8_t>(pick(i));
        sum += blk[b].qs[i];
      }
      if (sum % 2 != 0) {
        const int step = blk[b].qs[0] > 0 ? -1 : 1;
        blk[b].qs[0] = static_cast<int8_t>(blk[b].qs[0] + step);
        sum += step;
      }
      blk[b].s = fp32_to_fp16(static_cast<float>(sum));
    }
  } else if (act_type == DType::kQ8_K) {
    auto* blk = reinterpret_cast<BlockQ8_K*>(row.data());
    for (int64_t b = 0; b < n / kQKK; ++b) {
      blk[b].d = 1.0f;
      for (int i = 0; i < kQKK; ++i) blk[b].qs[i] = static_cast<int8_t>(pick(i));
      for (int k = 0; k < kQKK / 16; ++k) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += blk[b].qs[16 * k + i];
        blk[b].bsums[k] = static_cast<int16_t>(sum);
      }
    }
  } else {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(pick(i) / 16);
    row = to_row(act_type, v, nullptr);
  }
  return row;
}

TEST(KernelsDot, IntegerDotsAreExact) {
  std::mt19937 rng(11);
  for (Isa isa : host_isas()) {
    for (DType type : kWeightTypes) {
      const VecDotFn dot = cpu_kernels(isa).for_type(type).vec_dot;
      const VecDotFn ref = type_traits(type).vec_dot;
      int checked = 0;
      for (int64_t n : row_lengths(type)) {
        for (bool extreme : {false, true}) {
          for (int pattern = 0; pattern < 4; ++pattern) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << " " << dtype_name(type) << " n " << n << " pattern "
                         << pattern << (extreme ? " extreme" : ""));
            const std::vector<uint8_t> w = raw_weights(type, n, rng, extreme);
            const std::vector<uint8_t> a = raw_acts(act_type_of(type), n, rng, pattern);
            double mag = 0.0;
            double exact = 0.0;
            magnitudes(type, w, a, n, &mag, &exact);
            // Every partial sum a kernel forms is bounded by sum |w_i a_i|, except for
            // Q2_K/Q4_K/Q5_K, which sum sc * q * a and m * a apart: each of those is bounded
            // by that plus sum m |a| <= 15 * 127 * n (the raw mins are below 16).
            double bound = mag;
            if (type == DType::kQ2_K || type == DType::kQ4_K || type == DType::kQ5_K) {
              bound += 15.0 * 127.0 * n;
            }
            // Q4_1/Q5_1 sum d * q * a and m * s apart: bounded the same way with |m| <= 3.
            if (type == DType::kQ4_1 || type == DType::kQ5_1) bound += 3.0 * 127.0 * n;
            if (bound >= kExactLimit) continue;
            ++checked;
            EXPECT_EQ(ref(n, w.data(), a.data()), exact) << "reference";
            EXPECT_EQ(dot(n, w.data(), a.data()), exact);
          }
        }
      }
      EXPECT_GE(checked, 8) << isa_name(isa) << " " << dtype_name(type);
    }
  }
}

// The AVX-512 kernels form the same exact integer lanes as the AVX2 ones and run the same
// float steps (llama.cpp's AVX2 order, which the golden outputs depend on): bit for bit.
TEST(KernelsDot, Avx512MatchesAvx2BitForBit) {
  const CpuFeatures host = detect_cpu_features();
  if (!isa_runs_on(Isa::kAvx512, host)) GTEST_SKIP() << "no AVX-512 on this host";
  uint32_t seed = 300;
  for (DType type : kWeightTypes) {
    const VecDotFn a512 = cpu_kernels(Isa::kAvx512).for_type(type).vec_dot;
    const VecDotFn a2 = cpu_kernels(Isa::kAvx2).for_type(type).vec_dot;
    const FromFloatFn ref_act = cpu_kernels(Isa::kGeneric).for_type(type).quantize_act;
    for (int64_t n : row_lengths(type)) {
      for (float scale : {1e-3f, 1.0f, 300.0f}) {
        const std::vector<uint8_t> w = to_row(type, random_floats(n, ++seed, 0.7f), nullptr);
        const std::vector<uint8_t> a =
            to_row(act_type_of(type), random_floats(n, ++seed, scale), ref_act);
        EXPECT_EQ(std::bit_cast<uint32_t>(a512(n, w.data(), a.data())),
                  std::bit_cast<uint32_t>(a2(n, w.data(), a.data())))
            << dtype_name(type) << " n " << n << " scale " << scale;
      }
    }
  }
}

// gemv kernels: rows of every count around their row groups, NaN-prefilled outputs with
// guard lanes, each output the same bits as the ISA's vec_dot of that row.
TEST(KernelsDot, GemvMatchesVecDotBitForBit) {
  uint32_t seed = 700;
  for (Isa isa : host_isas()) {
    for (DType type : kWeightTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemv == nullptr) continue;
      const FromFloatFn ref_act = cpu_kernels(Isa::kGeneric).for_type(type).quantize_act;
      for (int64_t n : row_lengths(type)) {
        for (int64_t n_rows : {1, 3, 4, 5, 7, 8, 9, 13, 16, 67}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                          << " rows " << n_rows);
          std::vector<uint8_t> w;
          for (int64_t r = 0; r < n_rows; ++r) {
            const std::vector<uint8_t> row =
                to_row(type, random_floats(n, ++seed, r % 3 == 0 ? 30.0f : 0.7f), nullptr);
            w.insert(w.end(), row.begin(), row.end());
          }
          const std::vector<uint8_t> a =
              to_row(act_type_of(type), random_floats(n, ++seed, 1.5f), ref_act);
          std::vector<float> y(static_cast<size_t>(n_rows + 3), kNaN);
          mk.gemv(n, w.data(), row_size(type, n), n_rows, a.data(), y.data());
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want =
                mk.vec_dot(n, w.data() + row_size(type, n) * static_cast<size_t>(r), a.data());
            EXPECT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(r)]),
                      std::bit_cast<uint32_t>(want))
                << "row " << r << ": " << y[static_cast<size_t>(r)] << " vs " << want;
          }
          for (size_t i = static_cast<size_t>(n_rows); i < y.size(); ++i) {
            EXPECT_TRUE(std::isnan(y[i])) << "wrote past the rows at " << i;
          }
        }
      }
    }
  }
}

// ---- activation converters --------------------------------------------------------------

// Rows that stress the converters: random data at many scales, zero blocks, blocks whose
// largest magnitude appears with both signs, and exact halves (rounding ties).
std::vector<float> converter_input(int64_t n, int variant, uint32_t seed) {
  const float scales[] = {1e-6f, 1e-3f, 1.0f, 7.5f, 1e3f};
  std::vector<float> v = random_floats(n, seed, scales[variant % 5]);
  if (variant == 5) {
    for (int64_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] = (i / 32) % 2 == 0 ? 0.0f : v[static_cast<size_t>(i)];
    }
  }
  if (variant == 6) {  // ties of the signed max: -5 first in each 32 block, then +5
    for (int64_t i = 0; i < n; ++i)
      v[static_cast<size_t>(i)] = std::fmod(v[static_cast<size_t>(i)], 4.0f);
    for (int64_t i = 0; i + 20 < n; i += 32) {
      v[static_cast<size_t>(i + 4)] = -5.0f;
      v[static_cast<size_t>(i + 20)] = 5.0f;
    }
  }
  if (variant == 7) {  // half-integer multiples of 127 / amax: rounding ties
    for (int64_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] = static_cast<float>(static_cast<int>(i % 255) - 127) + 0.5f;
    }
  }
  return v;
}

TEST(KernelsDot, QuantizeActMatchesReference) {
  constexpr size_t kGuard = 64;
  uint32_t seed = 500;
  for (Isa isa : host_isas()) {
    for (DType type : kWeightTypes) {
      const FromFloatFn got_fn = cpu_kernels(isa).for_type(type).quantize_act;
      const FromFloatFn ref_fn = cpu_kernels(Isa::kGeneric).for_type(type).quantize_act;
      const DType act = act_type_of(type);
      ASSERT_EQ(cpu_kernels(isa).for_type(type).act_type, act);
      if (ref_fn == nullptr) {
        EXPECT_EQ(got_fn, nullptr) << isa_name(isa) << " " << dtype_name(type);
        continue;
      }
      for (int64_t n : row_lengths(type)) {
        for (int variant = 0; variant < 8; ++variant) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                          << " variant " << variant);
          const std::vector<float> x = converter_input(n, variant, ++seed);
          const size_t bytes = row_size(act, n);
          std::vector<uint8_t> got(bytes + kGuard, 0xff);  // 0xff.. reads as NaN
          std::vector<uint8_t> want(bytes + kGuard, 0xff);
          got_fn(x.data(), got.data(), n);
          ref_fn(x.data(), want.data(), n);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
          for (size_t i = bytes; i < got.size(); ++i) {
            ASSERT_EQ(got[i], 0xff) << "wrote past the row at byte " << i;
          }
        }
      }
    }
  }
}

// F16 and BF16 conversions of special values: signed zeros, subnormals, infinities,
// NaNs with payloads, overflow to infinity and values at rounding ties.
TEST(KernelsDot, FloatConvertersMatchReferenceOnSpecialValues) {
  const uint32_t patterns[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x33800000,
                               0x387fe000, 0x38800000, 0x477fe000, 0x477ff000, 0x47800000,
                               0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
                               0xffbfffff, 0x3f808000, 0x3f818000, 0x3f800fff, 0x3f801000,
                               0x3f803000, 0xbf807fff, 0x3f7fffff, 0x40490fdb};
  std::vector<float> x;
  for (int rep = 0; rep < 3; ++rep) {
    for (uint32_t p : patterns) x.push_back(std::bit_cast<float>(p ^ (rep == 1 ? 0x80000000 : 0)));
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (Isa isa : host_isas()) {
    for (DType type : {DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type));
      const FromFloatFn fn = cpu_kernels(isa).for_type(type).quantize_act;
      ASSERT_NE(fn, nullptr);
      std::vector<uint16_t> got(x.size(), 0xffff);
      std::vector<uint16_t> want(x.size(), 0xffff);
      fn(x.data(), got.data(), n);
      type_traits(type).from_float(x.data(), want.data(), n);
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(got[i], want[i]) << "input 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
      }
    }
  }
}

// ---- the decode matmul ------------------------------------------------------------------

// One token through CpuBackend::matmul (the vec_dot path) with 1 and 2 threads, against
// the generic backend, into NaN-prefilled outputs.
TEST(KernelsDot, DecodeMatmulMatchesGenericBackend) {
  CpuBackend generic(1, Isa::kGeneric);
  uint32_t seed = 900;
  for (Isa isa : host_isas()) {
    CpuBackend one(1, isa);
    CpuBackend two(2, isa);
    for (DType type : kWeightTypes) {
      const int64_t n = row_lengths(type).back();
      for (int64_t n_out : {1, 7, 67}) {
        SCOPED_TRACE(testing::Message()
                     << isa_name(isa) << " " << dtype_name(type) << " n_out " << n_out);
        std::vector<uint8_t> w;
        for (int64_t r = 0; r < n_out; ++r) {
          const std::vector<uint8_t> row = to_row(type, random_floats(n, ++seed, 0.7f), nullptr);
          w.insert(w.end(), row.begin(), row.end());
        }
        const Tensor wt{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
        const std::vector<float> x = random_floats(n, ++seed, 1.5f);
        std::vector<float> y_ref(static_cast<size_t>(n_out + 2), kNaN);
        std::vector<float> y1(y_ref.size(), kNaN);
        std::vector<float> y2(y_ref.size(), kNaN);
        generic.matmul(wt, x.data(), 1, y_ref.data());
        one.matmul(wt, x.data(), 1, y1.data());
        two.matmul(wt, x.data(), 1, y2.data());
        // Threads split rows only: not a bit changes.
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
        // Both backends convert x alike (QuantizeActMatchesReference), so the bound of
        // RandomRowsMatchReference applies to every row.
        const std::vector<uint8_t> a =
            to_row(act_type_of(type), x, cpu_kernels(Isa::kGeneric).for_type(type).quantize_act);
        const size_t w_row = row_size(type, n);
        for (int64_t r = 0; r < n_out; ++r) {
          const std::vector<uint8_t> wr(
              w.begin() + static_cast<ptrdiff_t>(w_row * static_cast<size_t>(r)),
              w.begin() + static_cast<ptrdiff_t>(w_row * static_cast<size_t>(r + 1)));
          double mag = 0.0;
          double exact = 0.0;
          magnitudes(type, wr, a, n, &mag, &exact);
          const size_t i = static_cast<size_t>(r);
          EXPECT_LE(std::fabs(double{y1[i]} - y_ref[i]), kRelTol * mag + 1e-30)
              << "row " << r << ": " << y1[i] << " vs " << y_ref[i];
        }
        EXPECT_TRUE(std::isnan(y1[static_cast<size_t>(n_out)]));
        EXPECT_TRUE(std::isnan(y1[static_cast<size_t>(n_out + 1)]));
      }
    }
  }
}

}  // namespace
}  // namespace qrun::kernels
