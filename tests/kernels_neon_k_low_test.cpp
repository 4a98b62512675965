// The NEON Q2_K and Q3_K kernels (arm64 builds only) bit for bit against the float chains
// that dot_impl.h documents, computed here in scalar code from the levels and scales as
// quants.h lays them out (2-bit parts, hmask bits, q3_k_scale), so that a wrong bit plane,
// high bit, scale offset or a dropped min term fails exactly rather than within a
// tolerance. Baseline and (where the CPU has it) SDOT vec_dot, and the gemv of every NEON
// table the CPU runs, on awkward super-block counts with quantized rows, raw random bytes
// and both ends of the levels and scales, against quantized activations and raw ones at
// -128 and 127. kernels_neon_test.cpp checks the same kernels against the generic ones
// within a tolerance and their table entries.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon/neon_kernels.h"
#include "tests/support/random_data.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kSub = 16;  // elements per sub-block (one scale) of both types

bool host_has_dotprod() {
  return detect_cpu_features().neon_dotprod;
}

// The 2-bit part (0 .. 3) of element e = 128h + 32j + l: bits 2j, 2j + 1 of qs[32h + l].
int two_bit(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Q2_K: per super-block the exact sumi = sum_s (sc & 15) * (levels . acts) and sum_mins =
// sum_s (sc >> 4) * (sum of the activation levels of s), then sum = fma(d_x * d_y,
// float(sumi), sum), then sum = fma(-(dmin_x * d_y), float(sum_mins), sum). The activation
// sums are taken from qs, not bsums, which act_row keeps equal to them.
float q2_k_chain(int64_t n, const BlockQ2_K* x, const BlockQ8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int32_t sumi = 0;
    int32_t sum_mins = 0;
    for (int s = 0; s < kQKK / kSub; ++s) {
      int32_t dot = 0;
      int32_t act = 0;
      for (int l = 0; l < kSub; ++l) {
        dot += two_bit(x[b].qs, kSub * s + l) * y[b].qs[kSub * s + l];
        act += y[b].qs[kSub * s + l];
      }
      sumi += (x[b].scales[s] & 15) * dot;
      sum_mins += (x[b].scales[s] >> 4) * act;
    }
    sum = std::fma(fp16_to_fp32(x[b].d) * y[b].d, static_cast<float>(sumi), sum);
    sum = std::fma(-(fp16_to_fp32(x[b].dmin) * y[b].d), static_cast<float>(sum_mins), sum);
  }
  return sum;
}

// Q3_K: level = 2-bit part - 4 unless bit e / 32 of hmask[e % 32] is set; per super-block
// the exact sumi = sum_s (q3_k_scale - 32) * (levels . acts), then sum = fma(d_x * d_y,
// float(sumi), sum).
float q3_k_chain(int64_t n, const BlockQ3_K* x, const BlockQ8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int32_t sumi = 0;
    for (int s = 0; s < kQKK / kSub; ++s) {
      int32_t dot = 0;
      for (int l = 0; l < kSub; ++l) {
        const int e = kSub * s + l;
        const bool high = (x[b].hmask[e % 32] >> (e / 32)) & 1;
        dot += (two_bit(x[b].qs, e) - (high ? 0 : 4)) * y[b].qs[e];
      }
      sumi += (q3_k_scale(x[b].scales, s) - 32) * dot;
    }
    sum = std::fma(fp16_to_fp32(x[b].d) * y[b].d, static_cast<float>(sumi), sum);
  }
  return sum;
}

// Weight rows: pattern 0 quantized from random floats, 1 random bytes (every level, high
// bit, scale and min; the fp16 scales set to 0.75 as bytes could make them NaN), 2 the low
// ends (every byte 0: Q3_K levels -4 and scales -32; Q2_K levels 0 with scales 0 and mins
// 15, so only the min term), 3 every byte 0xff (levels 3; Q2_K scales and mins 15, Q3_K
// scales 31).
template <class Block>
std::vector<uint8_t> weight_rows(int64_t n, int64_t n_rows, int pattern, uint32_t seed) {
  constexpr bool kQ2 = std::is_same_v<Block, BlockQ2_K>;
  const size_t row_bytes = static_cast<size_t>(n / kQKK) * sizeof(Block);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(n_rows));
  std::mt19937 rng(seed);
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = w.data() + row_bytes * static_cast<size_t>(r);
    if (pattern == 0) {
      const std::vector<float> x = test::random_vector(n, seed + static_cast<uint32_t>(r), 0.7f);
      (kQ2 ? quantize_q2_k : quantize_q3_k)(x.data(), row, n);
      continue;
    }
    for (size_t i = 0; i < row_bytes; ++i) {
      row[i] = pattern == 1 ? static_cast<uint8_t>(rng()) : pattern == 2 ? 0x00 : 0xff;
    }
    for (int64_t b = 0; b < n / kQKK; ++b) {
      Block& blk = reinterpret_cast<Block*>(row)[b];
      blk.d = fp32_to_fp16(0.75f);
      if constexpr (kQ2) {
        blk.dmin = fp32_to_fp16(0.75f);
        if (pattern == 2) std::memset(blk.scales, 0xf0, sizeof(blk.scales));
      }
    }
  }
  return w;
}

// Activation rows: quantized from random floats, or raw levels at -128 and 127 (scale
// 0.25, bsums the sums of the levels as quantize_q8_k keeps them).
std::vector<uint8_t> act_row(int64_t n, bool raw, uint32_t seed) {
  std::vector<uint8_t> a(static_cast<size_t>(n / kQKK) * sizeof(BlockQ8_K));
  if (!raw) {
    const std::vector<float> x = test::random_activations(n, seed);
    quantize_q8_k(x.data(), a.data(), n);
    return a;
  }
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ8_K& blk = reinterpret_cast<BlockQ8_K*>(a.data())[b];
    blk.d = 0.25f;
    for (int s = 0; s < kQKK / kSub; ++s) {
      int sum = 0;
      for (int l = 0; l < kSub; ++l) {
        blk.qs[kSub * s + l] = rng() % 2 ? 127 : -128;
        sum += blk.qs[kSub * s + l];
      }
      blk.bsums[s] = static_cast<int16_t>(sum);
    }
  }
  return a;
}

using ChainFn = float (*)(int64_t, const void*, const BlockQ8_K*);

template <class Block, float (*kChain)(int64_t, const Block*, const BlockQ8_K*)>
float chain_of(int64_t n, const void* x, const BlockQ8_K* y) {
  return kChain(n, static_cast<const Block*>(x), y);
}

template <class Block>
void expect_chain(DType type, ChainFn chain, VecDotFn baseline, VecDotFn dotprod) {
  uint32_t seed = 100;
  const size_t block_bytes = sizeof(Block);
  for (int64_t blocks : {1, 2, 3, 5, 17}) {
    const int64_t n = blocks * kQKK;
    const size_t w_row = static_cast<size_t>(blocks) * block_bytes;
    for (int pattern = 0; pattern < 4; ++pattern) {
      for (bool raw : {false, true}) {
        SCOPED_TRACE(testing::Message() << dtype_name(type) << " blocks " << blocks << " pattern "
                                        << pattern << (raw ? " raw" : ""));
        constexpr int64_t kRows = 5;
        const std::vector<uint8_t> w = weight_rows<Block>(n, kRows, pattern, ++seed);
        const std::vector<uint8_t> a = act_row(n, raw, ++seed);
        const auto* y = reinterpret_cast<const BlockQ8_K*>(a.data());
        std::vector<float> want(kRows);
        for (int64_t r = 0; r < kRows; ++r) {
          const size_t i = static_cast<size_t>(r);
          want[i] = chain(n, w.data() + w_row * i, y);
        }
        for (bool sdot : {false, true}) {
          if (sdot && !host_has_dotprod()) continue;
          for (int64_t r = 0; r < kRows; ++r) {
            const size_t i = static_cast<size_t>(r);
            const float got = (sdot ? dotprod : baseline)(n, w.data() + w_row * i, a.data());
            EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[i]))
                << (sdot ? "dotprod" : "baseline") << " vec_dot row " << r << ": " << got << " vs "
                << want[i];
          }
        }
        // The gemv of each NEON table the CPU runs, into a NaN-prefilled output.
        for (Isa level : {Isa::kNeon, Isa::kNeonDotprod, Isa::kNeonI8mm}) {
          if (!isa_runs_on(level, detect_cpu_features())) continue;
          const GemvFn gemv = cpu_kernels(level).for_type(type).gemv;
          ASSERT_NE(gemv, nullptr) << isa_name(level);
          std::vector<float> got(kRows + 1, kNaN);
          gemv(n, w.data(), w_row, kRows, a.data(), got.data());
          for (int64_t r = 0; r < kRows; ++r) {
            const size_t i = static_cast<size_t>(r);
            EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << isa_name(level) << " gemv row " << r << ": " << got[i] << " vs " << want[i];
          }
          EXPECT_TRUE(std::isnan(got[kRows])) << isa_name(level) << " gemv wrote past the rows";
        }
      }
    }
  }
}

TEST(KernelsNeon, Q2KIsTheExactChain) {
  expect_chain<BlockQ2_K>(DType::kQ2_K, chain_of<BlockQ2_K, q2_k_chain>, neon::vec_dot_q2_k_q8_k,
                          neon::vec_dot_q2_k_q8_k_dotprod);
}

TEST(KernelsNeon, Q3KIsTheExactChain) {
  expect_chain<BlockQ3_K>(DType::kQ3_K, chain_of<BlockQ3_K, q3_k_chain>, neon::vec_dot_q3_k_q8_k,
                          neon::vec_dot_q3_k_q8_k_dotprod);
}

}  // namespace
}  // namespace qrun::kernels
