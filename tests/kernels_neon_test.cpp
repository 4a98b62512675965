// The NEON kernels (arm64 builds only; scripts/test-neon.sh runs them under qemu on CPUs
// with I8MM and dotprod, with dotprod only, and with neither), each variant called directly
// against its generic twin:
// dot products of every registered weight type on awkward lengths and extreme levels
// (tolerance |y - ref| <= 1e-5 * sum |x_i y_i|; the SDOT variants, where the CPU has
// them, bit-identical to the baseline ones), activation quantizers and conversions bit for
// bit, row ops on awkward lengths with NaN-prefilled outputs (add and to_f16 exact,
// rms_norm within 2.5e-7 relative, swiglu 4e-7), the Q4_0/Q5_0/Q8_0/Q4_1/Q5_1/IQ4_NL gemv
// variants bit for bit against the baseline vec_dot (random and extreme rows), Q5_0's and Q5_1's
// vec_dot and gemv bit for bit against dot_impl.h's float chain, the three gemm variants of
// every type with gemm tiles against vec_dot (the SDOT and SMMLA ones bit for bit against
// the baseline one), ISA selection, the level the host runs (QRUN_EXPECT_ISA, set by
// scripts/test-neon.sh for each emulated CPU) and the kernels of every table entry at each
// level. (Attention, the k-quant and IQ4_XS gemv and the repacked gemv are tested through the
// table with every ISA in kernels_ops_test.cpp, kernels_dot_test.cpp and
// kernels_repack_test.cpp; IQ4_NL's and IQ4_XS's float chains in kernels_neon_iq4_test.cpp,
// Q2_K's and Q3_K's, with their gemv at each level, in kernels_neon_k_low_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon/neon_kernels.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kAwkward[] = {1, 7, 31, 32, 33, 255, 4097};

struct DotVariant {
  DType type;
  VecDotFn baseline;
  VecDotFn dotprod;  // null: one variant only
};

const DotVariant kDots[] = {
    {DType::kQ4_0, neon::vec_dot_q4_0_q8_0, neon::vec_dot_q4_0_q8_0_dotprod},
    {DType::kQ5_0, neon::vec_dot_q5_0_q8_0, neon::vec_dot_q5_0_q8_0_dotprod},
    {DType::kQ8_0, neon::vec_dot_q8_0_q8_0, neon::vec_dot_q8_0_q8_0_dotprod},
    {DType::kQ4_1, neon::vec_dot_q4_1_q8_1, neon::vec_dot_q4_1_q8_1_dotprod},
    {DType::kQ5_1, neon::vec_dot_q5_1_q8_1, neon::vec_dot_q5_1_q8_1_dotprod},
    {DType::kIQ4_NL, neon::vec_dot_iq4_nl_q8_0, neon::vec_dot_iq4_nl_q8_0_dotprod},
    {DType::kQ2_K, neon::vec_dot_q2_k_q8_k, neon::vec_dot_q2_k_q8_k_dotprod},
    {DType::kQ3_K, neon::vec_dot_q3_k_q8_k, neon::vec_dot_q3_k_q8_k_dotprod},
    {DType::kQ4_K, neon::vec_dot_q4_k_q8_k, neon::vec_dot_q4_k_q8_k_dotprod},
    {DType::kQ5_K, neon::vec_dot_q5_k_q8_k, neon::vec_dot_q5_k_q8_k_dotprod},
    {DType::kQ6_K, neon::vec_dot_q6_k_q8_k, neon::vec_dot_q6_k_q8_k_dotprod},
    {DType::kIQ4_XS, neon::vec_dot_iq4_xs_q8_k, neon::vec_dot_iq4_xs_q8_k_dotprod},
    {DType::kF32, neon::vec_dot_f32_f32, nullptr},
    {DType::kF16, neon::vec_dot_f16_f16, nullptr},
    {DType::kBF16, neon::vec_dot_bf16_bf16, nullptr},
};

struct GemvVariant {
  DType type;
  GemvFn baseline;
  GemvFn dotprod;
  VecDotFn vec_dot;  // the baseline vec_dot, whose bits every gemv output must have
};

const GemvVariant kGemvs[] = {
    {DType::kQ4_0, neon::gemv_q4_0_q8_0, neon::gemv_q4_0_q8_0_dotprod, neon::vec_dot_q4_0_q8_0},
    {DType::kQ5_0, neon::gemv_q5_0_q8_0, neon::gemv_q5_0_q8_0_dotprod, neon::vec_dot_q5_0_q8_0},
    {DType::kQ8_0, neon::gemv_q8_0_q8_0, neon::gemv_q8_0_q8_0_dotprod, neon::vec_dot_q8_0_q8_0},
    {DType::kQ4_1, neon::gemv_q4_1_q8_1, neon::gemv_q4_1_q8_1_dotprod, neon::vec_dot_q4_1_q8_1},
    {DType::kQ5_1, neon::gemv_q5_1_q8_1, neon::gemv_q5_1_q8_1_dotprod, neon::vec_dot_q5_1_q8_1},
    {DType::kIQ4_NL, neon::gemv_iq4_nl_q8_0, neon::gemv_iq4_nl_q8_0_dotprod,
     neon::vec_dot_iq4_nl_q8_0},
};

struct GemmVariant {
  DType type;
  GemmKernels (*baseline)();
  GemmKernels (*dotprod)();
  GemmKernels (*i8mm)();
};

const GemmVariant kGemms[] = {
    {DType::kQ4_0, neon::gemm_q4_0_q8_0, neon::gemm_q4_0_q8_0_dotprod, neon::gemm_q4_0_q8_0_i8mm},
    {DType::kQ5_0, neon::gemm_q5_0_q8_0, neon::gemm_q5_0_q8_0_dotprod, neon::gemm_q5_0_q8_0_i8mm},
    {DType::kQ8_0, neon::gemm_q8_0_q8_0, neon::gemm_q8_0_q8_0_dotprod, neon::gemm_q8_0_q8_0_i8mm},
    {DType::kQ4_K, neon::gemm_q4_k_q8_k, neon::gemm_q4_k_q8_k_dotprod, neon::gemm_q4_k_q8_k_i8mm},
    {DType::kQ5_K, neon::gemm_q5_k_q8_k, neon::gemm_q5_k_q8_k_dotprod, neon::gemm_q5_k_q8_k_i8mm},
    {DType::kQ6_K, neon::gemm_q6_k_q8_k, neon::gemm_q6_k_q8_k_dotprod, neon::gemm_q6_k_q8_k_i8mm},
};

struct RepackedVariant {
  DType type;
  GemvRepackedFn baseline;
  GemvRepackedFn dotprod;
};

const RepackedVariant kRepacked[] = {
    {DType::kQ4_0, neon::gemv_q4_0_x16, neon::gemv_q4_0_x16_dotprod},
    {DType::kQ5_0, neon::gemv_q5_0_x16, neon::gemv_q5_0_x16_dotprod},
    {DType::kQ8_0, neon::gemv_q8_0_x16, neon::gemv_q8_0_x16_dotprod},
    {DType::kQ4_K, neon::gemv_q4_k_x16, neon::gemv_q4_k_x16_dotprod},
    {DType::kQ6_K, neon::gemv_q6_k_x16, neon::gemv_q6_k_x16_dotprod},
};

bool host_has_dotprod() {
  return detect_cpu_features().neon_dotprod;
}

bool host_has_i8mm() {
  return isa_runs_on(Isa::kNeonI8mm, detect_cpu_features());
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  for (size_t i = 0; i < n; i += 97) v[i] *= 12.0f;  // outliers, as real activations have
  return v;
}

// Row lengths: awkward block counts, or awkward element counts for the float types.
std::vector<int64_t> lengths(DType type) {
  const int64_t block = type_traits(type).block_elems;
  if (block == 256) return {256, 3 * 256, 17 * 256};
  if (block == 32) return {32, 7 * 32, 31 * 32, 33 * 32, 255 * 32};
  return {kAwkward, kAwkward + std::size(kAwkward)};
}

// A row of `type` from floats: the reference quantizer, or the generic activation one.
std::vector<uint8_t> to_row(DType type, const std::vector<float>& x, bool activation) {
  std::vector<uint8_t> out(row_size(type, static_cast<int64_t>(x.size())));
  const TypeTraits& t = type_traits(type);
  const FromFloatFn fn =
      activation && t.from_float_act != nullptr ? t.from_float_act : t.from_float;
  fn(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

double magnitude(DType wt, const std::vector<uint8_t>& w, DType at, const std::vector<uint8_t>& a,
                 int64_t n) {
  std::vector<float> wd(static_cast<size_t>(n));
  std::vector<float> ad(static_cast<size_t>(n));
  dequantize_row(wt, w.data(), wd.data(), n);
  dequantize_row(at, a.data(), ad.data(), n);
  double mag = 0.0;
  for (size_t i = 0; i < wd.size(); ++i) mag += std::fabs(double{wd[i]} * ad[i]);
  return mag;
}

void expect_dot(const DotVariant& v, int64_t n, const std::vector<uint8_t>& w,
                const std::vector<uint8_t>& a) {
  const MatmulKernels& g = cpu_kernels(Isa::kGeneric).for_type(v.type);
  const float ref = g.vec_dot(n, w.data(), a.data());
  const double tol = 1e-5 * magnitude(v.type, w, g.act_type, a, n) + 1e-30;
  const float got = v.baseline(n, w.data(), a.data());
  EXPECT_LE(std::fabs(double{got} - ref), tol) << "baseline " << got << " vs " << ref;
  if (v.dotprod != nullptr && host_has_dotprod()) {
    const float dp = v.dotprod(n, w.data(), a.data());
    EXPECT_EQ(std::bit_cast<uint32_t>(dp), std::bit_cast<uint32_t>(got))
        << "dotprod " << dp << " vs baseline " << got;
  }
}

TEST(KernelsNeon, HostFeatures) {
  const CpuFeatures f = detect_cpu_features();
  EXPECT_TRUE(f.neon);
  std::cout << "host cpu features: " << f.to_string() << "\n";
}

TEST(KernelsNeon, SelectionPicksTheBestNeonLevel) {
  CpuFeatures f;
  f.neon = true;
  EXPECT_EQ(best_isa(f), Isa::kNeon);
  f.neon_i8mm = true;  // no level without dotprod uses i8mm
  EXPECT_EQ(best_isa(f), Isa::kNeon);
  f.neon_i8mm = false;
  f.neon_dotprod = true;
  EXPECT_EQ(best_isa(f), Isa::kNeonDotprod);
  f.neon_i8mm = true;
  EXPECT_EQ(best_isa(f), Isa::kNeonI8mm);
  // Every level at or below the CPU's can be forced, none above it.
  f.neon_i8mm = false;
  for (const char* name : {"neon", "dotprod", "NEON", "DotProd"}) {
    Result<Isa> forced = resolve_isa(name, f);
    ASSERT_TRUE(forced.ok()) << name;
    EXPECT_EQ(isa_name(*forced), std::string_view(name).size() == 4 ? "neon" : "dotprod");
  }
  Result<Isa> i8mm = resolve_isa("i8mm", f);
  ASSERT_FALSE(i8mm.ok());
  EXPECT_EQ(i8mm.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(i8mm.error().message.find("QRUN_FORCE_ISA=i8mm"), std::string::npos);
  Result<Isa> avx2 = resolve_isa("avx2", f);
  ASSERT_FALSE(avx2.ok());
  EXPECT_EQ(avx2.error().code, ErrorCode::kUnsupported);
  for (Isa isa : {Isa::kNeon, Isa::kNeonDotprod, Isa::kNeonI8mm}) {
    EXPECT_EQ(cpu_kernels(isa).isa, isa);
  }
}

// scripts/test-neon.sh names the level each emulated CPU must select; the run fails if the
// emulator (or the detection) gives another, so that each run tests what it claims.
TEST(KernelsNeon, HostRunsTheExpectedLevel) {
  const char* want = std::getenv("QRUN_EXPECT_ISA");
  if (want == nullptr || *want == '\0') GTEST_SKIP() << "QRUN_EXPECT_ISA is not set";
  const Isa best = best_isa(detect_cpu_features());
  EXPECT_STREQ(isa_name(best), want) << "cpu features: " << detect_cpu_features().to_string();
  EXPECT_EQ(default_isa(), best) << "QRUN_FORCE_ISA must not be set for this run";
  std::cout << "host runs the " << isa_name(best) << " kernels\n";
}

TEST(KernelsNeon, EachLevelTakesItsKernels) {
  for (Isa level : {Isa::kNeon, Isa::kNeonDotprod, Isa::kNeonI8mm}) {
    const bool dotprod = level != Isa::kNeon;
    CpuKernels k;
    fill_generic_kernels(k);
    neon::fill_kernels(k, level);
    SCOPED_TRACE(isa_name(level));
    for (const DotVariant& v : kDots) {
      SCOPED_TRACE(dtype_name(v.type));
      const VecDotFn want = dotprod && v.dotprod != nullptr ? v.dotprod : v.baseline;
      EXPECT_EQ(k.for_type(v.type).vec_dot, want);
    }
    for (const GemvVariant& v : kGemvs) {
      SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " gemv");
      EXPECT_EQ(k.for_type(v.type).gemv, dotprod ? v.dotprod : v.baseline);
    }
    for (DType type :
         {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
      EXPECT_NE(k.for_type(type).gemv, nullptr) << dtype_name(type);
    }
    for (const RepackedVariant& v : kRepacked) {
      SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " gemv_repacked");
      EXPECT_EQ(k.for_type(v.type).gemv_repacked, dotprod ? v.dotprod : v.baseline);
    }
    for (const GemmVariant& v : kGemms) {
      SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " gemm");
      const GemmKernels want = (level == Isa::kNeonI8mm ? v.i8mm
                                : dotprod               ? v.dotprod
                                                        : v.baseline)();
      EXPECT_EQ(k.for_type(v.type).gemm.gemm, want.gemm);
      EXPECT_EQ(k.for_type(v.type).gemm.pack_act, want.pack_act);
    }
    EXPECT_EQ(k.attend_f32, neon::attend_f32);
    EXPECT_EQ(k.attend_f16, neon::attend_f16);
  }
  // The table of each level is built from that level alone, whatever the host has.
  EXPECT_EQ(cpu_kernels(Isa::kNeon).for_type(DType::kQ4_0).vec_dot, neon::vec_dot_q4_0_q8_0);
  EXPECT_EQ(cpu_kernels(Isa::kNeonDotprod).for_type(DType::kQ4_0).vec_dot,
            neon::vec_dot_q4_0_q8_0_dotprod);
}

TEST(KernelsNeon, DotsMatchGeneric) {
  uint32_t seed = 10;
  for (const DotVariant& v : kDots) {
    const DType act = cpu_kernels(Isa::kGeneric).for_type(v.type).act_type;
    for (int64_t n : lengths(v.type)) {
      SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " n " << n);
      const auto w = to_row(v.type, random_floats(static_cast<size_t>(n), ++seed, 0.7f), false);
      const auto a = to_row(act, random_floats(static_cast<size_t>(n), ++seed, 1.5f), true);
      expect_dot(v, n, w, a);
    }
  }
}

// Raw blocks with every level byte at 0xff or random and activation levels at +-127, so
// that integer lanes meet their worst case; scales at 1.
TEST(KernelsNeon, DotsOfExtremeLevels) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const DotVariant& v : kDots) {
    const int64_t block = type_traits(v.type).block_elems;
    if (block == 1) continue;
    const DType act = cpu_kernels(Isa::kGeneric).for_type(v.type).act_type;
    const int64_t n = 5 * block;
    for (int pattern = 0; pattern < 4; ++pattern) {
      SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " pattern " << pattern);
      std::vector<uint8_t> w(row_size(v.type, n));
      for (uint8_t& b : w) b = static_cast<uint8_t>(pattern < 2 ? 0xff : byte(rng));
      std::vector<uint8_t> a(row_size(act, n));
      const int8_t level = pattern % 2 == 0 ? 127 : -127;
      const uint16_t one = fp32_to_fp16(1.0f);
      for (int64_t b = 0; b < n / block; ++b) {
        switch (v.type) {
          case DType::kQ4_0:
            std::memcpy(&reinterpret_cast<BlockQ4_0*>(w.data())[b].d, &one, 2);
            break;
          case DType::kQ5_0:
            std::memcpy(&reinterpret_cast<BlockQ5_0*>(w.data())[b].d, &one, 2);
            break;
          case DType::kIQ4_NL:
            reinterpret_cast<BlockIQ4_NL*>(w.data())[b].d = one;
            break;
          case DType::kIQ4_XS:  // 0xff: every block scale ls - 32 = 31, the largest
            reinterpret_cast<BlockIQ4_XS*>(w.data())[b].d = one;
            break;
          case DType::kQ4_1: {  // m = -1: the offset term of the same size as the dot's
            auto& blk = reinterpret_cast<BlockQ4_1*>(w.data())[b];
            blk.d = one;
            blk.m = fp32_to_fp16(-1.0f);
            break;
          }
          case DType::kQ5_1: {
            auto& blk = reinterpret_cast<BlockQ5_1*>(w.data())[b];
            blk.d = one;
            blk.m = fp32_to_fp16(-1.0f);
            break;
          }
          case DType::kQ2_K: {  // 0xff: levels 3, scales and mins 15, the largest
            auto& blk = reinterpret_cast<BlockQ2_K*>(w.data())[b];
            blk.d = one;
            blk.dmin = one;
            break;
          }
          case DType::kQ3_K: {  // 0xff: levels 3, scales sc - 32 = 31; pattern 1 the other
            auto& blk = reinterpret_cast<BlockQ3_K*>(w.data())[b];  // ends: -4 and -32
            blk.d = one;
            if (pattern == 1) {
              std::memset(blk.hmask, 0, sizeof(blk.hmask));
              std::memset(blk.qs, 0, sizeof(blk.qs));
              std::memset(blk.scales, 0, sizeof(blk.scales));
            }
            break;
          }
          case DType::kQ5_K: {
            auto& blk = reinterpret_cast<BlockQ5_K*>(w.data())[b];
            std::memcpy(&blk.d, &one, 2);
            std::memcpy(&blk.dmin, &one, 2);
            break;
          }
          case DType::kQ8_0: {
            auto& blk = reinterpret_cast<BlockQ8_0*>(w.data())[b];
            std::memcpy(&blk.d, &one, 2);
            if (pattern < 2) std::memset(blk.qs, 0x80, sizeof(blk.qs));  // -128 everywhere
            break;
          }
          case DType::kQ4_K: {
            auto& blk = reinterpret_cast<BlockQ4_K*>(w.data())[b];
            std::memcpy(&blk.d, &one, 2);
            std::memcpy(&blk.dmin, &one, 2);
            break;
          }
          case DType::kQ6_K: {
            auto& blk = reinterpret_cast<BlockQ6_K*>(w.data())[b];
            std::memcpy(&blk.d, &one, 2);
            if (pattern < 2) std::memset(blk.scales, 0x80, sizeof(blk.scales));  // -128
            break;
          }
          default:
            break;
        }
      }
      if (act == DType::kQ8_0) {
        auto* blk = reinterpret_cast<BlockQ8_0*>(a.data());
        for (int64_t b = 0; b < n / kQK; ++b) {
          blk[b].d = fp32_to_fp16(0.25f);
          for (int i = 0; i < kQK; ++i) blk[b].qs[i] = pattern < 2 ? level : byte(rng) % 255 - 127;
        }
      } else if (act == DType::kQ8_1) {
        auto* blk = reinterpret_cast<BlockQ8_1*>(a.data());
        for (int64_t b = 0; b < n / kQK; ++b) {
          blk[b].d = fp32_to_fp16(0.25f);
          int sum = 0;
          for (int i = 0; i < kQK; ++i) {
            blk[b].qs[i] = static_cast<int8_t>(pattern < 2 ? level : byte(rng) % 255 - 127);
            sum += blk[b].qs[i];
          }
          blk[b].s = fp32_to_fp16(0.25f * static_cast<float>(sum));
        }
      } else {
        auto* blk = reinterpret_cast<BlockQ8_K*>(a.data());
        for (int64_t b = 0; b < n / kQKK; ++b) {
          blk[b].d = 0.25f;
          for (int i = 0; i < kQKK; ++i) blk[b].qs[i] = pattern < 2 ? level : byte(rng) % 255 - 127;
          for (int k = 0; k < kQKK / 16; ++k) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += blk[b].qs[16 * k + i];
            blk[b].bsums[k] = static_cast<int16_t>(sum);
          }
        }
      }
      expect_dot(v, n, w, a);
    }
  }
}

// Q5_0 and Q5_1 levels come from nibbles and scattered high bits (block_levels.h's
// q5_high_masks), so the NEON vec_dot and gemv are checked bit for bit against the float
// chain that dot_impl.h documents, computed here in scalar code from the levels as quants.h
// defines them: acc[b % 4] = fma(float(exact block sum), d_x * d_y, acc[b % 4]), then
// (acc0 + acc1) + (acc2 + acc3); Q5_1 adds (mins0 + mins1) + (mins2 + mins3) with
// mins[b % 4] = fma(m_x, s_y, mins[b % 4]). Awkward block counts, random rows and rows
// whose high bits alternate.
template <class Block, class Act>
float q5_chain(int64_t n, const Block* x, const Act* y) {
  constexpr bool kOffset = std::is_same_v<Block, BlockQ5_1>;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float mins[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < n / kQK; ++b) {
    uint32_t qh;
    std::memcpy(&qh, x[b].qh, sizeof qh);
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) {
      const int nibble = i < 16 ? x[b].qs[i] & 15 : x[b].qs[i - 16] >> 4;
      sum += (nibble + 16 * static_cast<int>((qh >> i) & 1) - (kOffset ? 0 : 16)) * y[b].qs[i];
    }
    const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
    acc[b % 4] = std::fma(static_cast<float>(sum), d, acc[b % 4]);
    if constexpr (kOffset) {
      mins[b % 4] = std::fma(fp16_to_fp32(x[b].m), fp16_to_fp32(y[b].s), mins[b % 4]);
    }
  }
  const float dots = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return kOffset ? dots + ((mins[0] + mins[1]) + (mins[2] + mins[3])) : dots;
}

template <class Variant, size_t kN>
const Variant& variant_of(const Variant (&table)[kN], DType type) {
  return *std::find_if(table, table + kN, [type](const Variant& v) { return v.type == type; });
}

template <class Block, class Act>
void expect_q5_chain(DType type) {
  const DotVariant& dots = variant_of(kDots, type);
  const GemvVariant& gemvs = variant_of(kGemvs, type);
  const DType act = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
  uint32_t seed = 70;
  for (int64_t blocks : {1, 2, 3, 5, 7, 33}) {
    const int64_t n = blocks * kQK;
    const size_t w_row = row_size(type, n);
    for (int pattern = 0; pattern < 3; ++pattern) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(type) << " blocks " << blocks << " pattern " << pattern);
      constexpr int64_t kRows = 5;
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < kRows; ++r) {
        std::vector<uint8_t> row =
            to_row(type, random_floats(static_cast<size_t>(n), ++seed, 0.7f), false);
        auto* blk = reinterpret_cast<Block*>(row.data());
        for (int64_t b = 0; pattern > 0 && b < blocks; ++b) {
          const uint32_t bits = pattern == 1 ? 0x5555AAAAu : 0xF00F0FF0u;
          std::memcpy(blk[b].qh, &bits, sizeof bits);
        }
        w.insert(w.end(), row.begin(), row.end());
      }
      const std::vector<uint8_t> a =
          to_row(act, random_floats(static_cast<size_t>(n), ++seed, 1.5f), true);
      const auto* y = reinterpret_cast<const Act*>(a.data());
      std::vector<float> want(kRows);
      for (int64_t r = 0; r < kRows; ++r) {
        want[static_cast<size_t>(r)] = q5_chain(
            n, reinterpret_cast<const Block*>(w.data() + w_row * static_cast<size_t>(r)), y);
      }
      for (bool dotprod : {false, true}) {
        if (dotprod && !host_has_dotprod()) continue;
        SCOPED_TRACE(dotprod ? "dotprod" : "baseline");
        const VecDotFn dot = dotprod ? dots.dotprod : dots.baseline;
        std::vector<float> got(kRows + 1, kNaN);
        (dotprod ? gemvs.dotprod : gemvs.baseline)(n, w.data(), w_row, kRows, a.data(), got.data());
        for (int64_t r = 0; r < kRows; ++r) {
          const size_t i = static_cast<size_t>(r);
          const float d = dot(n, w.data() + w_row * i, a.data());
          EXPECT_EQ(std::bit_cast<uint32_t>(d), std::bit_cast<uint32_t>(want[i]))
              << "vec_dot row " << r << ": " << d << " vs " << want[i];
          EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << "gemv row " << r << ": " << got[i] << " vs " << want[i];
        }
        EXPECT_TRUE(std::isnan(got[kRows])) << "wrote past the rows";
      }
    }
  }
}

TEST(KernelsNeon, Q5_0IsTheExactChain) {
  expect_q5_chain<BlockQ5_0, BlockQ8_0>(DType::kQ5_0);
}

TEST(KernelsNeon, Q5_1IsTheExactChain) {
  expect_q5_chain<BlockQ5_1, BlockQ8_1>(DType::kQ5_1);
}

// The multi-row gemv of the 32-element block types, baseline and (where the CPU has it)
// SDOT, against the baseline vec_dot of each row bit for bit: random rows at two scales
// and rows of extreme levels (every byte 0xff, Q8_0 at -128; d = 0.5, and the offset types'
// m = -0.25) against activations at +-127, on row counts around the 4-row pass and block counts
// around the 4-block group, into NaN-prefilled outputs with guard lanes.
TEST(KernelsNeon, GemvVariantsMatchVecDotBitForBit) {
  uint32_t seed = 40;
  std::mt19937 rng(41);
  for (const GemvVariant& v : kGemvs) {
    const DType act = cpu_kernels(Isa::kGeneric).for_type(v.type).act_type;
    for (int64_t n : {32, 3 * 32, 4 * 32, 9 * 32, 33 * 32}) {
      const size_t w_row = row_size(v.type, n);
      for (int64_t n_rows : {1, 3, 4, 5, 8, 13}) {
        for (bool extreme : {false, true}) {
          SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " n " << n << " rows " << n_rows
                                          << (extreme ? " extreme" : ""));
          std::vector<uint8_t> w;
          for (int64_t r = 0; r < n_rows; ++r) {
            std::vector<uint8_t> row = to_row(
                v.type, random_floats(static_cast<size_t>(n), ++seed, r % 2 ? 30.0f : 0.7f), false);
            if (extreme) {
              std::memset(row.data(), 0xff, row.size());
              const uint16_t half_one = fp32_to_fp16(0.5f);
              const uint16_t min = fp32_to_fp16(-0.25f);
              for (int64_t b = 0; b < n / kQK; ++b) {  // d (the first 2 bytes) = 0.5
                uint8_t* blk = row.data() + static_cast<size_t>(b) * row_size(v.type, kQK);
                std::memcpy(blk, &half_one, 2);
                if (v.type == DType::kQ8_0) std::memset(blk + 2, 0x80, kQK);
                if (v.type == DType::kQ4_1 || v.type == DType::kQ5_1) std::memcpy(blk + 2, &min, 2);
              }
            }
            w.insert(w.end(), row.begin(), row.end());
          }
          std::vector<float> x = random_floats(static_cast<size_t>(n), ++seed, 1.5f);
          if (extreme) {
            for (size_t i = 0; i < x.size(); ++i) x[i] = rng() % 2 ? 1.0f : -1.0f;
          }
          const std::vector<uint8_t> a = to_row(act, x, true);
          for (GemvFn gemv : {v.baseline, v.dotprod}) {
            if (gemv == v.dotprod && !host_has_dotprod()) continue;
            SCOPED_TRACE(gemv == v.dotprod ? "dotprod" : "baseline");
            std::vector<float> y(static_cast<size_t>(n_rows) + 2, kNaN);
            gemv(n, w.data(), w_row, n_rows, a.data(), y.data());
            for (int64_t r = 0; r < n_rows; ++r) {
              const float want = v.vec_dot(n, w.data() + w_row * static_cast<size_t>(r), a.data());
              const float got = y[static_cast<size_t>(r)];
              EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
                  << "row " << r << ": " << got << " vs " << want;
            }
            EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n_rows)])) << "wrote past the rows";
            EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n_rows) + 1])) << "wrote past the rows";
          }
        }
      }
    }
  }
}

// The three gemm variants, called directly (the table holds one of them): packed in 8-token
// groups, past the 4-row micro-tiles, the 16-row by 64-token driver tiles and the 16-block
// weight chunks, into NaN-prefilled outputs wider than the tile. The baseline output is
// within 1e-5 * sum |w_i a_i| of the generic vec_dot; the SDOT and SMMLA ones, where the CPU
// has them, bit-identical to the baseline one (the same exact block sums in the same float
// order).
TEST(KernelsNeon, GemmVariantsMatchVecDot) {
  uint32_t seed = 60;
  for (const GemmVariant& v : kGemms) {
    const MatmulKernels& g = cpu_kernels(Isa::kGeneric).for_type(v.type);
    const int64_t block = type_traits(v.type).block_elems;
    const GemmKernels base = v.baseline();
    for (int64_t n : {block, 3 * block, 17 * block}) {
      const size_t w_row = row_size(v.type, n);
      const size_t a_row = row_size(g.act_type, n);
      for (int64_t n_rows : {1, 4, 6, 17}) {
        for (int64_t n_tokens : {1, 7, 9, 65}) {
          SCOPED_TRACE(testing::Message() << dtype_name(v.type) << " n " << n << " rows " << n_rows
                                          << " tokens " << n_tokens);
          std::vector<std::vector<uint8_t>> w_rows;
          std::vector<uint8_t> w;
          for (int64_t r = 0; r < n_rows; ++r) {
            w_rows.push_back(
                to_row(v.type, random_floats(static_cast<size_t>(n), ++seed, 0.7f), false));
            w.insert(w.end(), w_rows.back().begin(), w_rows.back().end());
          }
          std::vector<std::vector<uint8_t>> a_rows;
          std::vector<uint8_t> a;
          for (int64_t t = 0; t < n_tokens; ++t) {
            a_rows.push_back(
                to_row(g.act_type, random_floats(static_cast<size_t>(n), ++seed, 1.5f), true));
            a.insert(a.end(), a_rows.back().begin(), a_rows.back().end());
          }
          // Packed into a garbage-filled, 64-byte aligned buffer, the last group first.
          std::vector<uint8_t> storage(base.packed_bytes(n, n_tokens) + 64, 0xa5);
          uint8_t* packed =
              storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
          const int64_t ldy = n_rows + 2;
          std::vector<float> y_base;
          for (Isa level : {Isa::kNeon, Isa::kNeonDotprod, Isa::kNeonI8mm}) {
            if (level == Isa::kNeonDotprod && !host_has_dotprod()) continue;
            if (level == Isa::kNeonI8mm && !host_has_i8mm()) continue;
            SCOPED_TRACE(isa_name(level));
            const GemmKernels gk = (level == Isa::kNeonI8mm      ? v.i8mm
                                    : level == Isa::kNeonDotprod ? v.dotprod
                                                                 : v.baseline)();
            ASSERT_EQ(gk.group_tokens, base.group_tokens);
            for (int64_t t0 = (n_tokens - 1) / gk.group_tokens * gk.group_tokens; t0 >= 0;
                 t0 -= gk.group_tokens) {
              gk.pack_act(n, a.data() + a_row * static_cast<size_t>(t0), a_row,
                          std::min(gk.group_tokens, n_tokens - t0),
                          packed + gk.group_bytes(n) * static_cast<size_t>(t0 / gk.group_tokens));
            }
            std::vector<float> y(static_cast<size_t>(n_tokens * ldy), kNaN);
            gk.gemm(n, w.data(), w_row, n_rows, packed, n_tokens, y.data(), ldy);
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = 0; r < ldy; ++r) {
                const float got = y[static_cast<size_t>(t * ldy + r)];
                if (r >= n_rows) {
                  EXPECT_TRUE(std::isnan(got)) << "wrote outside the tile: token " << t;
                  continue;
                }
                const float ref = g.vec_dot(n, w_rows[r].data(), a_rows[t].data());
                const double tol =
                    1e-5 * magnitude(v.type, w_rows[r], g.act_type, a_rows[t], n) + 1e-30;
                EXPECT_LE(std::fabs(double{got} - ref), tol)
                    << "token " << t << " row " << r << ": " << got << " vs " << ref;
              }
            }
            if (level != Isa::kNeon) {
              EXPECT_EQ(std::memcmp(y.data(), y_base.data(), y.size() * sizeof(float)), 0)
                  << isa_name(level) << " output differs from the baseline one";
            } else {
              y_base = y;
            }
          }
        }
      }
    }
  }
}

// Inputs with exact rounding ties for both activation quantizers: multiples of amax / 254
// round half to even at every odd multiple.
std::vector<float> tie_floats(int64_t n, float amax) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = amax * static_cast<float>(i % 255 - 127) / 127.0f;
  for (int64_t i = 5; i < n; i += 32) x[i] = amax * (static_cast<float>(i % 64) + 0.5f) / 127.0f;
  return x;
}

TEST(KernelsNeon, ActivationQuantizersAreBitIdentical) {
  struct Q {
    DType type;
    FromFloatFn neon;
    FromFloatFn ref;
  };
  const Q quantizers[] = {{DType::kQ8_0, neon::quantize_q8_0_act, quantize_q8_0_act},
                          {DType::kQ8_1, neon::quantize_q8_1_act, quantize_q8_1_act},
                          {DType::kQ8_K, neon::quantize_q8_k, quantize_q8_k}};
  uint32_t seed = 50;
  for (const Q& q : quantizers) {
    const int64_t block = type_traits(q.type).block_elems;
    for (int64_t blocks : {1, 3, 17}) {
      const int64_t n = blocks * block;
      std::vector<std::vector<float>> inputs = {random_floats(static_cast<size_t>(n), ++seed, 1.0f),
                                                tie_floats(n, 3.0f),
                                                std::vector<float>(static_cast<size_t>(n), 0.0f)};
      // Both signs at the absmax (the first one decides the sign of Q8_K's scale).
      std::vector<float> both = random_floats(static_cast<size_t>(n), ++seed, 1.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        both[b * block + 3] = -40.0f;
        both[b * block + 9] = 40.0f;
      }
      inputs.push_back(both);
      for (size_t k = 0; k < inputs.size(); ++k) {
        SCOPED_TRACE(testing::Message() << dtype_name(q.type) << " n " << n << " input " << k);
        std::vector<uint8_t> got(row_size(q.type, n), 0xff);
        std::vector<uint8_t> want(got.size(), 0xee);
        q.neon(inputs[k].data(), got.data(), n);
        q.ref(inputs[k].data(), want.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
      }
    }
  }
}

// Every float class: random normals, F16 subnormals and overflow, rounding ties, zeros,
// infinities and NaNs with payloads.
std::vector<float> special_floats(int64_t n, uint32_t seed) {
  std::vector<float> x = random_floats(static_cast<size_t>(n), seed, 100.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            kNaN,
                            std::bit_cast<float>(0xffc12345u),
                            std::bit_cast<float>(0x7f812345u),
                            1e-6f,
                            -3e-7f,
                            65520.0f,
                            70000.0f,
                            1.0f + 1.0f / 2048.0f,
                            std::bit_cast<float>(0x3f808000u),
                            std::bit_cast<float>(0x3f818000u)};
  for (size_t i = 0; i < x.size(); i += 3) x[i] = specials[(i / 3) % std::size(specials)];
  return x;
}

TEST(KernelsNeon, ConversionsAreBitIdentical) {
  uint32_t seed = 70;
  for (int64_t n : kAwkward) {
    SCOPED_TRACE(n);
    const std::vector<float> x = special_floats(n, ++seed);
    std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcd);
    std::vector<uint16_t> want(got.size(), 0xabcd);
    neon::from_float_f16(x.data(), got.data(), n);
    from_float_f16(x.data(), want.data(), n);
    EXPECT_EQ(got, want) << "f16";
    std::fill(got.begin(), got.end(), 0xabcd);
    neon::to_f16(x.data(), got.data(), n);
    EXPECT_EQ(got, want) << "to_f16";
    neon::from_float_bf16(x.data(), got.data(), n);
    from_float_bf16(x.data(), want.data(), n);
    EXPECT_EQ(got, want) << "bf16";
  }
}

// |got - ref| <= rel * |ref| + abs, NaN where the reference is NaN, and nothing written
// past n (the buffers hold one NaN beyond).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t n,
                  double rel, double abs, const char* what) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[static_cast<size_t>(i)];
    const double r = ref[static_cast<size_t>(i)];
    const bool ok =
        std::isnan(r) ? std::isnan(g) : (g == r || std::fabs(g - r) <= rel * std::fabs(r) + abs);
    if (!ok && ++bad <= 3) ADD_FAILURE() << what << " [" << i << "]: " << g << " vs " << r;
  }
  EXPECT_TRUE(std::isnan(got[static_cast<size_t>(n)])) << what << " wrote past the row";
}

TEST(KernelsNeon, RowOpsMatchGeneric) {
  uint32_t seed = 90;
  for (int64_t n : kAwkward) {
    SCOPED_TRACE(n);
    const auto size = static_cast<size_t>(n) + 1;
    const std::vector<float> a = random_floats(size, ++seed, 3.0f);
    const std::vector<float> b = random_floats(size, ++seed, 3.0f);
    std::vector<float> got(size, kNaN);
    std::vector<float> ref(size, kNaN);

    neon::add(a.data(), b.data(), n, got.data());
    ref::add(a.data(), b.data(), n, ref.data());
    expect_close(got, ref, n, 0.0, 0.0, "add");

    std::fill(got.begin(), got.end(), kNaN);
    neon::rms_norm_row(a.data(), b.data(), n, 1e-5f, got.data());
    ref::rms_norm_row(a.data(), b.data(), n, 1e-5f, ref.data());
    expect_close(got, ref, n, 2.5e-7, 0.0, "rms_norm");

    // Gates across exp's whole range, with its overflow and underflow edges and specials.
    std::vector<float> gate = random_floats(size, ++seed, 8.0f);
    const float edges[] = {0.0f,
                           -0.0f,
                           88.5f,
                           -88.5f,
                           89.5f,
                           -89.5f,
                           104.5f,
                           -104.5f,
                           120.0f,
                           -120.0f,
                           kNaN,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           1e-30f,
                           -1e-30f};
    for (size_t i = 0; i < size; i += 5) gate[i] = edges[(i / 5) % std::size(edges)];
    std::fill(got.begin(), got.end(), kNaN);
    std::fill(ref.begin(), ref.end(), kNaN);
    neon::swiglu(gate.data(), b.data(), n, got.data());
    ref::swiglu(gate.data(), b.data(), n, ref.data());
    expect_close(got, ref, n, 4e-7, 1e-37, "swiglu");
  }
}

TEST(KernelsNeon, SwigluInPlace) {
  const int64_t n = 37;
  std::vector<float> gate = random_floats(static_cast<size_t>(n), 5, 4.0f);
  const std::vector<float> up = random_floats(static_cast<size_t>(n), 6, 4.0f);
  std::vector<float> ref(static_cast<size_t>(n) + 1, kNaN);
  ref::swiglu(gate.data(), up.data(), n, ref.data());
  gate.push_back(kNaN);
  neon::swiglu(gate.data(), up.data(), n, gate.data());
  expect_close(gate, ref, n, 4e-7, 1e-37, "swiglu in place");
}

}  // namespace
}  // namespace qrun::kernels
