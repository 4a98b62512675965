// Properties of the reference kernels of every weight type: full traits rows, quantize ->
// dequantize error within a per-type bound (relative RMS error), dot products within a
// bound of the float dot and consistent with dequantize-then-dot, awkward sizes with
// canaries around the outputs, degenerate blocks (zero, constant, tiny, huge), and the
// row conveniences of quants.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"

namespace qrun {
namespace {

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ8_0,
                              DType::kQ4_0, DType::kQ5_0,   DType::kQ4_1,  DType::kQ5_1,
                              DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K,  DType::kQ5_K,
                              DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};
const DType kActivationTypes[] = {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K};

// A small deterministic generator (xorshift64*), uniform in [-1, 1) and roughly normal.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  float uniform() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    const uint64_t r = s_ * 0x2545f4914f6cdd1dull;
    return static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)) / (1 << 23);
  }
  float normal() {  // Irwin-Hall: the sum of 12 uniforms on [-1, 1) has variance 4
    float s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s * 0.5f;
  }

 private:
  uint64_t s_;
};

enum class Dist { kNormal, kUniform, kOutliers, kShifted };

std::vector<float> make_input(Dist dist, int64_t n, uint64_t seed, float scale = 0.02f) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    switch (dist) {
      case Dist::kNormal:
        v = scale * rng.normal();
        break;
      case Dist::kUniform:
        v = scale * rng.uniform();
        break;
      case Dist::kOutliers:
        v = scale * rng.normal() * (rng.uniform() > 0.98f ? 12.0f : 1.0f);
        break;
      case Dist::kShifted:
        v = scale * (rng.normal() + 0.7f);
        break;
    }
  }
  return x;
}

double rel_rmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0;
  double norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(err / norm);
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(row_size(type, n));
  std::vector<float> back(x.size(), std::numeric_limits<float>::quiet_NaN());
  quantize_rows(type, x.data(), q.data(), 1, n);
  dequantize_row(type, q.data(), back.data(), n);
  return back;
}

// Worst relative RMS error allowed per type. The measured figures (normal / uniform /
// outliers / shifted inputs of RoundTripErrorWithinBound) are in the comments; the bounds
// leave about 20% headroom over the worst of them.
double error_bound(DType type) {
  switch (type) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 2.6e-4;  // 2.1e-4 / 2.2e-4 / 1.9e-4 / 2.1e-4
    case DType::kBF16:
      return 2.1e-3;  // 1.6e-3 / 1.8e-3 / 1.7e-3 / 1.7e-3
    case DType::kQ8_0:
      return 0.0125;  // 0.0052 / 0.0038 / 0.0102 / 0.0051
    case DType::kQ4_0:
      return 0.19;  // 0.083 / 0.066 / 0.158 / 0.080
    case DType::kQ5_0:
      return 0.095;  // 0.042 / 0.031 / 0.079 / 0.040
    case DType::kQ4_1:
      return 0.125;  // 0.077 / 0.061 / 0.101 / 0.063
    case DType::kQ5_1:
      return 0.062;  // 0.037 / 0.029 / 0.050 / 0.031
    case DType::kQ8_1:
      return 0.0125;  // 0.0052 / 0.0038 / 0.0102 / 0.0051
    case DType::kIQ4_NL:
      return 0.145;  // 0.075 / 0.064 / 0.119 / 0.072
    case DType::kIQ4_XS:
      return 0.145;  // 0.076 / 0.065 / 0.121 / 0.072
    case DType::kQ2_K:
      return 0.385;  // 0.294 / 0.233 / 0.319 / 0.231
    case DType::kQ3_K:
      return 0.235;  // 0.148 / 0.125 / 0.196 / 0.142
    case DType::kQ4_K:
      return 0.115;  // 0.070 / 0.054 / 0.096 / 0.058
    case DType::kQ5_K:
      return 0.058;  // 0.036 / 0.028 / 0.048 / 0.029
    case DType::kQ6_K:
      return 0.036;  // 0.017 / 0.014 / 0.030 / 0.017
    case DType::kQ8_K:
      return 0.030;  // 0.0065 / 0.0039 / 0.0245 / 0.0065
    default:
      return 0;
  }
}

TEST(QuantTraits, EveryWeightTypeHasAFullRow) {
  for (DType type : kWeightTypes) {
    const TypeTraits& t = type_traits(type);
    EXPECT_TRUE(is_supported(type)) << t.name;
    EXPECT_NE(t.to_float, nullptr) << t.name;
    EXPECT_NE(t.from_float, nullptr) << t.name;
    EXPECT_NE(t.vec_dot, nullptr) << t.name;
    const TypeTraits& act = type_traits(t.vec_dot_type);
    EXPECT_NE(act.from_float, nullptr) << t.name << " -> " << act.name;
    EXPECT_NE(act.to_float, nullptr) << t.name << " -> " << act.name;
    EXPECT_EQ(act.block_elems, t.block_elems) << t.name << ": activation blocks must line up";
  }
  for (DType type : kActivationTypes) {
    EXPECT_NE(type_traits(type).to_float, nullptr) << dtype_name(type);
    EXPECT_NE(type_traits(type).from_float, nullptr) << dtype_name(type);
  }
}

TEST(QuantTraits, RowsAreAllOrNothingAndListedHere) {
  // A row with any kernel must be complete and named above, so adding a type means
  // adding it to these tests.
  for (const TypeTraits& t : all_types()) {
    const bool any = t.to_float || t.from_float || t.vec_dot;
    if (!any) {
      EXPECT_FALSE(is_supported(t.type)) << t.name;
      continue;
    }
    EXPECT_TRUE(t.to_float && t.from_float && t.from_float_act) << t.name << " has a partial row";
    if (t.type != DType::kQ8_0 && t.type != DType::kQ8_1) {
      EXPECT_EQ(t.from_float_act, t.from_float) << t.name << ": activations quantize as weights";
    }
    bool listed = false;
    for (DType w : kWeightTypes) listed |= w == t.type;
    for (DType a : kActivationTypes) listed |= a == t.type;
    EXPECT_TRUE(listed) << t.name << " has kernels but no tests";
    if (t.vec_dot) {
      EXPECT_NE(type_traits(t.vec_dot_type).from_float, nullptr) << t.name;
    }
  }
  EXPECT_FALSE(is_supported(DType::kQ8_K));  // activation only
  EXPECT_FALSE(is_supported(DType::kQ8_1));
  EXPECT_FALSE(is_supported(DType::kIQ2_XXS));
}

TEST(QuantTraits, ActivationTypesAreLlamaCppChoices) {
  EXPECT_EQ(type_traits(DType::kF32).vec_dot_type, DType::kF32);
  EXPECT_EQ(type_traits(DType::kF16).vec_dot_type, DType::kF16);
  EXPECT_EQ(type_traits(DType::kBF16).vec_dot_type, DType::kBF16);
  for (DType t : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
    EXPECT_EQ(type_traits(t).vec_dot_type, DType::kQ8_0) << dtype_name(t);
  }
  for (DType t : {DType::kQ4_1, DType::kQ5_1}) {
    EXPECT_EQ(type_traits(t).vec_dot_type, DType::kQ8_1) << dtype_name(t);
  }
  EXPECT_EQ(type_traits(DType::kIQ4_NL).vec_dot_type, DType::kQ8_0);
  for (DType t :
       {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
    EXPECT_EQ(type_traits(t).vec_dot_type, DType::kQ8_K) << dtype_name(t);
  }
}

// Activations are quantized to Q8_0 as llama.cpp's x86 CPU code does: ties to even, where
// the weight quantizer (llama.cpp's reference) rounds ties away from zero.
TEST(QuantRef, Q8_0ActivationsRoundTiesToEven) {
  std::vector<float> x(kQK, 0.0f);
  x[0] = 127.0f;  // amax 127: multiplier exactly 1, scale 1
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 1.25f;
  BlockQ8_0 act{}, weight{};
  const TypeTraits& t = type_traits(DType::kQ8_0);
  t.from_float_act(x.data(), &act, kQK);
  t.from_float(x.data(), &weight, kQK);
  EXPECT_EQ(act.qs[0], 127);
  EXPECT_EQ(act.qs[1], 2);   // 2.5 -> 2
  EXPECT_EQ(act.qs[2], -4);  // -3.5 -> -4
  EXPECT_EQ(act.qs[3], 1);
  EXPECT_EQ(weight.qs[1], 3);   // 2.5 -> 3
  EXPECT_EQ(weight.qs[2], -4);  // -3.5 -> -4
  EXPECT_EQ(act.d, weight.d);
}

// Q8_1 activations round as Q8_0's, and carry s = d * sum(q) in F16 with the float d (not
// its F16 rounding): with amax 127 both are exact here.
TEST(QuantRef, Q8_1ActivationsRoundTiesToEvenAndCarryTheirSum) {
  std::vector<float> x(kQK, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = -0.5f;
  BlockQ8_1 act{}, weight{};
  const TypeTraits& t = type_traits(DType::kQ8_1);
  t.from_float_act(x.data(), &act, kQK);
  t.from_float(x.data(), &weight, kQK);
  EXPECT_EQ(act.qs[1], 2);
  EXPECT_EQ(act.qs[2], -4);
  EXPECT_EQ(act.qs[3], 0);
  EXPECT_EQ(weight.qs[1], 3);
  EXPECT_EQ(weight.qs[3], -1);
  EXPECT_EQ(fp16_to_fp32(act.s), 127.0f + 2 - 4);
  EXPECT_EQ(fp16_to_fp32(weight.s), 127.0f + 3 - 4 - 1);
  EXPECT_EQ(act.d, weight.d);
}

TEST(QuantTraits, BlockStructsMatchTheTable) {
  EXPECT_EQ(type_traits(DType::kQ4_0).block_bytes, sizeof(BlockQ4_0));
  EXPECT_EQ(type_traits(DType::kQ5_0).block_bytes, sizeof(BlockQ5_0));
  EXPECT_EQ(type_traits(DType::kQ8_0).block_bytes, sizeof(BlockQ8_0));
  EXPECT_EQ(type_traits(DType::kQ4_1).block_bytes, sizeof(BlockQ4_1));
  EXPECT_EQ(type_traits(DType::kQ5_1).block_bytes, sizeof(BlockQ5_1));
  EXPECT_EQ(type_traits(DType::kQ8_1).block_bytes, sizeof(BlockQ8_1));
  EXPECT_EQ(type_traits(DType::kIQ4_NL).block_bytes, sizeof(BlockIQ4_NL));
  EXPECT_EQ(type_traits(DType::kIQ4_XS).block_bytes, sizeof(BlockIQ4_XS));
  EXPECT_EQ(type_traits(DType::kQ2_K).block_bytes, sizeof(BlockQ2_K));
  EXPECT_EQ(type_traits(DType::kQ3_K).block_bytes, sizeof(BlockQ3_K));
  EXPECT_EQ(type_traits(DType::kQ4_K).block_bytes, sizeof(BlockQ4_K));
  EXPECT_EQ(type_traits(DType::kQ5_K).block_bytes, sizeof(BlockQ5_K));
  EXPECT_EQ(type_traits(DType::kQ6_K).block_bytes, sizeof(BlockQ6_K));
  EXPECT_EQ(type_traits(DType::kQ8_K).block_bytes, sizeof(BlockQ8_K));
  for (DType t :
       {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_1, DType::kQ5_1, DType::kQ8_1}) {
    EXPECT_EQ(type_traits(t).block_elems, kQK);
  }
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                  DType::kQ8_K, DType::kIQ4_XS}) {
    EXPECT_EQ(type_traits(t).block_elems, kQKK);
  }
}

TEST(QuantRef, RoundTripErrorWithinBound) {
  constexpr int64_t kN = 4096;
  std::vector<DType> types(std::begin(kWeightTypes), std::end(kWeightTypes));
  types.push_back(DType::kQ8_1);
  types.push_back(DType::kQ8_K);
  for (DType type : types) {
    for (Dist dist : {Dist::kNormal, Dist::kUniform, Dist::kOutliers, Dist::kShifted}) {
      const std::vector<float> x = make_input(dist, kN, 7 + static_cast<int>(dist));
      const double err = rel_rmse(x, round_trip(type, x));
      EXPECT_LE(err, error_bound(type)) << dtype_name(type) << " dist " << static_cast<int>(dist);
      if (type != DType::kF32) {
        EXPECT_GT(err, 0.0) << dtype_name(type);
      }
    }
  }
}

TEST(QuantRef, ErrorDoesNotDependOnScale) {
  // Block scales are relative, so inputs 0.1x and 1000x the usual lose the same share
  // (much smaller inputs hit the fp16 subnormal range of the block scales).
  for (DType type : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_1, DType::kQ5_1,
                     DType::kQ8_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                     DType::kQ6_K, DType::kQ8_K, DType::kIQ4_NL, DType::kIQ4_XS}) {
    for (float scale : {2e-3f, 20.0f}) {
      const std::vector<float> x = make_input(Dist::kNormal, 1024, 99, scale);
      EXPECT_LE(rel_rmse(x, round_trip(type, x)), error_bound(type))
          << dtype_name(type) << " scale " << scale;
    }
  }
}

// |dot_q - dot_f| / (|x| |y|) for two correlated rows.
double dot_error(DType type, int64_t n, uint64_t seed) {
  const TypeTraits& t = type_traits(type);
  const TypeTraits& act = type_traits(t.vec_dot_type);
  const std::vector<float> x = make_input(Dist::kNormal, n, seed);
  std::vector<float> y = make_input(Dist::kOutliers, n, seed + 1);
  for (size_t i = 0; i < y.size(); ++i) y[i] += 0.5f * x[i];
  std::vector<uint8_t> qx(row_size(type, n));
  std::vector<uint8_t> qy(row_size(act.type, n));
  t.from_float(x.data(), qx.data(), n);
  act.from_float(y.data(), qy.data(), n);
  const double got = t.vec_dot(n, qx.data(), qy.data());
  double want = 0;
  double xx = 0;
  double yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    want += static_cast<double>(x[i]) * y[i];
    xx += static_cast<double>(x[i]) * x[i];
    yy += static_cast<double>(y[i]) * y[i];
  }
  return std::fabs(got - want) / std::sqrt(xx * yy);
}

TEST(QuantRef, DotProductCloseToFloatDot) {
  for (DType type : kWeightTypes) {
    // Element errors mostly cancel in a long dot: measured at most 6e-9 (f32), 3.6e-6 (f16),
    // 2.3e-5 (bf16), 1.6e-4 (q8_0), 1.4e-3 (q4_0), 1.6e-3 (q5_0), 1.1e-3 (q4_k),
    // 3.5e-4 (q5_k), 7e-4 (q6_k), 2.2e-3 (iq4_nl), 1.6e-3 (iq4_xs), 4.3e-3 (q2_k), 8e-4
    // (q3_k); the bounds are 3x or more above those.
    // Q4_1 and Q5_1 measured 1.5e-3 and 1.9e-3: their F16 activation sums (Q8_1's s, times
    // the block minimum) add to the levels' error, so their bounds are error_bound / 10.
    const bool offset = type == DType::kQ4_1 || type == DType::kQ5_1;
    const double bound = type == DType::kF32 ? 1e-7 : error_bound(type) / (offset ? 10 : 20);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const int64_t n = type_traits(type).block_elems == 1 ? 4097 : 16 * kQKK;
      EXPECT_LE(dot_error(type, n, seed), bound) << dtype_name(type) << " seed " << seed;
    }
  }
}

TEST(QuantRef, DotEqualsDotOfDequantizedRows) {
  // Decoding inside the dot product must agree with dequantize: the only difference
  // allowed is float rounding of the accumulation.
  for (DType type : kWeightTypes) {
    const TypeTraits& t = type_traits(type);
    const TypeTraits& act = type_traits(t.vec_dot_type);
    const int64_t n = 8 * kQKK;
    const std::vector<float> x = make_input(Dist::kShifted, n, 5);
    const std::vector<float> y = make_input(Dist::kOutliers, n, 6);
    std::vector<uint8_t> qx(row_size(type, n));
    std::vector<uint8_t> qy(row_size(act.type, n));
    t.from_float(x.data(), qx.data(), n);
    act.from_float(y.data(), qy.data(), n);
    std::vector<float> dx(static_cast<size_t>(n));
    std::vector<float> dy(static_cast<size_t>(n));
    t.to_float(qx.data(), dx.data(), n);
    act.to_float(qy.data(), dy.data(), n);
    double want = 0;
    double mag = 0;
    for (size_t i = 0; i < dx.size(); ++i) {
      want += static_cast<double>(dx[i]) * dy[i];
      mag += std::fabs(static_cast<double>(dx[i]) * dy[i]);
    }
    // Q8_1 activations carry their block's d * sum(q) as F16 (llama.cpp's format), which the
    // offset types' dot multiplies by the block minimum m: half an F16 ulp of it per block
    // on top of the accumulation's rounding.
    double carried_sum = 0;
    if (act.type == DType::kQ8_1) {
      const auto* a = reinterpret_cast<const BlockQ8_1*>(qy.data());
      for (int64_t b = 0; b < n / kQK; ++b) {
        const uint16_t m = type == DType::kQ4_1
                               ? reinterpret_cast<const BlockQ4_1*>(qx.data())[b].m
                               : reinterpret_cast<const BlockQ5_1*>(qx.data())[b].m;
        carried_sum += std::fabs(fp16_to_fp32(m) * fp16_to_fp32(a[b].s)) * 0x1p-11;
      }
    }
    const double got = t.vec_dot(n, qx.data(), qy.data());
    EXPECT_NEAR(got, want, 2e-6 * mag + carried_sum) << t.name;
  }
}

TEST(QuantRef, AwkwardSizesStayInBoundsAndFinite) {
  constexpr uint8_t kCanary = 0xA5;
  for (DType type : kWeightTypes) {
    const TypeTraits& t = type_traits(type);
    const std::vector<int64_t> sizes = t.block_elems == 1
                                           ? std::vector<int64_t>{1, 7, 31, 32, 33, 255, 4097}
                                           : std::vector<int64_t>{1, 3, 7, 17, 33};
    for (int64_t count : sizes) {
      const int64_t n = t.block_elems == 1 ? count : count * t.block_elems;
      const std::vector<float> x = make_input(Dist::kOutliers, n, static_cast<uint64_t>(n));
      const size_t bytes = row_size(type, n);
      std::vector<uint8_t> q(bytes + 64, kCanary);
      t.from_float(x.data(), q.data(), n);
      for (size_t i = bytes; i < q.size(); ++i) {
        ASSERT_EQ(q[i], kCanary) << t.name << " n=" << n << " wrote past the row";
      }
      std::vector<float> back(static_cast<size_t>(n) + 16, std::numeric_limits<float>::quiet_NaN());
      t.to_float(q.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(back[static_cast<size_t>(i)]))
            << t.name << " n=" << n << " i=" << i;
      }
      for (size_t i = static_cast<size_t>(n); i < back.size(); ++i) {
        ASSERT_TRUE(std::isnan(back[i])) << t.name << " n=" << n << " wrote past the output";
      }
      back.resize(static_cast<size_t>(n));
      EXPECT_LE(rel_rmse(x, back), error_bound(type) * 1.2) << t.name << " n=" << n;
    }
  }
}

TEST(QuantRef, DegenerateBlocks) {
  std::vector<DType> types(std::begin(kWeightTypes), std::end(kWeightTypes));
  types.push_back(DType::kQ8_1);
  types.push_back(DType::kQ8_K);
  for (DType type : types) {
    const TypeTraits& t = type_traits(type);
    const int64_t n = 2 * kQKK;
    // All zero: exact zeros back.
    const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    const std::vector<float> z = round_trip(type, zeros);
    for (float v : z) ASSERT_EQ(v, 0.0f) << t.name;
    // Tiny values may flush to zero through the fp16 block scales, but stay finite.
    for (float v : round_trip(type, std::vector<float>(static_cast<size_t>(n), 3e-9f))) {
      ASSERT_TRUE(std::isfinite(v)) << t.name;
    }
    // Constant and huge blocks: finite and close.
    for (float c : {0.37f, -1.5f, 1e4f}) {
      const std::vector<float> x(static_cast<size_t>(n), c);
      const std::vector<float> back = round_trip(type, x);
      for (float v : back) {
        ASSERT_TRUE(std::isfinite(v)) << t.name << " c=" << c;
        EXPECT_NEAR(v, c, std::fabs(c) * 0.02f) << t.name << " c=" << c;
      }
    }
    // One spike in a zero block: the spike survives, the rest stays near zero.
    std::vector<float> spike(static_cast<size_t>(n), 0.0f);
    spike[37] = -0.8f;
    spike[300] = 0.5f;
    const std::vector<float> back = round_trip(type, spike);
    EXPECT_NEAR(back[37], -0.8f, 0.8f * 0.01f) << t.name;
    EXPECT_NEAR(back[300], 0.5f, 0.5f * 0.01f) << t.name;
    for (size_t i = 0; i < back.size(); ++i) {
      if (i != 37 && i != 300) {
        ASSERT_LE(std::fabs(back[i]), 0.01f) << t.name << " i=" << i;
      }
    }
  }
}

TEST(QuantRef, Q8KBlockSumsMatchQuants) {
  const std::vector<float> x = make_input(Dist::kOutliers, 3 * kQKK, 11);
  std::vector<BlockQ8_K> blocks(3);
  quantize_q8_k(x.data(), blocks.data(), 3 * kQKK);
  for (const BlockQ8_K& b : blocks) {
    for (int k = 0; k < kQKK / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * k + i];
      EXPECT_EQ(b.bsums[k], sum);
    }
  }
}

TEST(QuantRef, LegacyExtremesMapToTheEndLevels) {
  // Q4_0/Q5_0: the signed absmax becomes level 0 (d = -max/8 or -max/16); Q8_0: +-127.
  std::vector<float> x(kQK, 0.1f);
  x[3] = -2.0f;
  BlockQ4_0 q4{};
  quantize_q4_0(x.data(), &q4, kQK);
  EXPECT_EQ(q4.qs[3] & 15, 0);
  BlockQ5_0 q5{};
  quantize_q5_0(x.data(), &q5, kQK);
  EXPECT_EQ(q5.qs[3] & 15, 0);
  EXPECT_EQ(q5.qh[0] & 8, 0);
  BlockQ8_0 q8{};
  quantize_q8_0(x.data(), &q8, kQK);
  EXPECT_EQ(q8.qs[3], -127);
}

TEST(QuantRows, RowsAreIndependentAndMatchSingleRowCalls) {
  for (DType type : kWeightTypes) {
    const int64_t row_len = type_traits(type).block_elems == 1 ? 96 : kQKK;
    constexpr int64_t kRows = 5;
    const std::vector<float> x = make_input(Dist::kNormal, kRows * row_len, 3);
    const size_t rb = row_size(type, row_len);
    std::vector<uint8_t> all(kRows * rb);
    quantize_rows(type, x.data(), all.data(), kRows, row_len);
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<uint8_t> one(rb);
      type_traits(type).from_float(x.data() + r * row_len, one.data(), row_len);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * rb, rb), 0)
          << dtype_name(type) << " row " << r;
      std::vector<float> back(static_cast<size_t>(row_len));
      dequantize_row(type, all.data() + r * rb, back.data(), row_len);
      std::vector<float> ref(x.begin() + r * row_len, x.begin() + (r + 1) * row_len);
      EXPECT_LE(rel_rmse(ref, back), error_bound(type)) << dtype_name(type) << " row " << r;
    }
  }
}

TEST(QuantRowsDeathTest, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> q(256);
  EXPECT_DEATH(quantize_rows(DType::kQ4_0, x.data(), q.data(), 1, 33), "whole number of blocks");
  EXPECT_DEATH(quantize_rows(DType::kIQ2_XXS, x.data(), q.data(), 1, 256),
               "no reference quantizer");
  EXPECT_DEATH(dequantize_row(DType::kQ8_0, q.data(), x.data(), 31), "whole number of blocks");
}

}  // namespace
}  // namespace qrun
