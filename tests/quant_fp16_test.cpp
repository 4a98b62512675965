// Exhaustive checks of fp16.h: every one of the 2^32 floats converted to half, and every
// half converted to float, compared bit for bit with the F16C instructions (round to
// nearest even, NaN payloads included). Skips only on a CPU without F16C.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "ggml-like/fp16.h"
#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qrun {
namespace {

#if defined(__x86_64__)

struct Mismatches {
  uint64_t count = 0;
  std::string first;  // "input -> got, want" of the first few
};

// Converts floats with bit patterns [begin, end) both ways; compiled for F16C only here.
__attribute__((target("f16c"))) Mismatches check_fp32_to_fp16(uint64_t begin, uint64_t end) {
  Mismatches m;
  for (uint64_t i = begin; i < end; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(i));
    const uint16_t got = fp32_to_fp16(f);
    const uint16_t want = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    if (got != want) {
      if (m.count < 4) {
        char buf[96];
        std::snprintf(buf, sizeof buf, " 0x%08x -> 0x%04x, want 0x%04x;", static_cast<unsigned>(i),
                      got, want);
        m.first += buf;
      }
      ++m.count;
    }
  }
  return m;
}

__attribute__((target("f16c"))) float f16c_to_fp32(uint16_t h) {
  return _cvtsh_ss(h);
}

bool host_has_f16c() {
  return kernels::detect_cpu_features().f16c;
}

TEST(Fp16, EveryFloatToHalfMatchesF16c) {
  if (!host_has_f16c()) GTEST_SKIP() << "CPU has no F16C";
  // Two halves of the range on two threads (the check takes a few seconds per 2^31).
  constexpr uint64_t kHalf = uint64_t{1} << 31;
  Mismatches upper;
  std::thread worker([&] { upper = check_fp32_to_fp16(kHalf, 2 * kHalf); });
  const Mismatches lower = check_fp32_to_fp16(0, kHalf);
  worker.join();
  EXPECT_EQ(lower.count + upper.count, 0u) << lower.first << upper.first;
}

TEST(Fp16, EveryHalfToFloatMatchesF16c) {
  if (!host_has_f16c()) GTEST_SKIP() << "CPU has no F16C";
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t got = std::bit_cast<uint32_t>(fp16_to_fp32(static_cast<uint16_t>(h)));
    const uint32_t want = std::bit_cast<uint32_t>(f16c_to_fp32(static_cast<uint16_t>(h)));
    if (got != want && ++mismatches <= 4) {
      ADD_FAILURE() << std::hex << "half 0x" << h << " -> 0x" << got << ", want 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

#endif  // __x86_64__

TEST(Fp16, RoundTripOfEveryHalfIsExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      const uint16_t back = fp32_to_fp16(fp16_to_fp32(half));
      EXPECT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(half)), half) << std::hex << h;
    }
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // halfway to the next binade rounds to even: inf
  EXPECT_EQ(fp32_to_fp16(5.9604644775390625e-8f), 0x0001);   // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(2.98023223876953125e-8f), 0x0000);  // half of it: ties to even
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);       // tie between 1 and 1+2^-10
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);       // tie rounds up to even
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
}

TEST(Bf16, RoundsToNearestEvenAndQuietsNan) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // signalling NaN quietened
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    if (!is_nan) {
      ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(b)), b) << std::hex << h;
    }
  }
}

}  // namespace
}  // namespace qrun
