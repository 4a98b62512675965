// The NEON IQ4_NL and IQ4_XS kernels (arm64 builds only) bit for bit against the float chains
// that dot_impl.h documents, computed here in scalar code from the levels and scales as
// quants.h defines them (kIq4Values, iq4_xs_scale), so that a wrong table lookup, nibble
// half or block scale fails exactly rather than within a tolerance. Baseline and (where the
// CPU has it) SDOT variants, vec_dot and IQ4_NL's multi-row gemv, on awkward block counts
// with quantized rows, raw random bytes and every nibble at one end of the table, against
// quantized activations and raw ones at -128 and 127. kernels_neon_test.cpp checks the same
// kernels against the generic ones within a tolerance and their table entries.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
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

bool host_has_dotprod() {
  return detect_cpu_features().neon_dotprod;
}

// The exact integer dot of the 32 levels packed in qs (element j: low nibble of byte j,
// element j + 16: its high nibble) with 32 activation levels.
int32_t iq4_block_sum(const uint8_t* qs, const int8_t* a) {
  int32_t sum = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    sum += kIq4Values[qs[j] & 15] * a[j] + kIq4Values[qs[j] >> 4] * a[j + kQK / 2];
  }
  return sum;
}

// IQ4_NL, the 32-element chain of the other legacy types: acc[b % 4] = fma(float(exact
// block sum), d_x * d_y, acc[b % 4]), then (acc0 + acc1) + (acc2 + acc3).
float iq4_nl_chain(int64_t n, const BlockIQ4_NL* x, const BlockQ8_0* y) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
    acc[b % 4] = std::fma(static_cast<float>(iq4_block_sum(x[b].qs, y[b].qs)), d, acc[b % 4]);
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// IQ4_XS: per super-block sumi = sum_s (ls_s - 32) * (exact sub-block sum), then
// sum = fma(d_x * d_y, float(sumi), sum).
float iq4_xs_chain(int64_t n, const BlockIQ4_XS* x, const BlockQ8_K* y) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int32_t sumi = 0;
    for (int s = 0; s < kQKK / kQK; ++s) {
      sumi +=
          (iq4_xs_scale(x[b], s) - 32) * iq4_block_sum(x[b].qs + s * (kQK / 2), y[b].qs + s * kQK);
    }
    sum = std::fma(fp16_to_fp32(x[b].d) * y[b].d, static_cast<float>(sumi), sum);
  }
  return sum;
}

// Weight rows: pattern 0 quantized from random floats, 1 random bytes (every level and
// 6-bit scale; the fp16 scales set to 0.75 as bytes could make them NaN), 2 every byte 0
// (level -127, IQ4_XS scale -32), 3 every byte 0xff (level 113, scale 31).
template <class Block>
std::vector<uint8_t> weight_rows(int64_t n, int64_t n_rows, int pattern, uint32_t seed) {
  constexpr bool kXs = std::is_same_v<Block, BlockIQ4_XS>;
  constexpr int64_t kBlockElems = kXs ? kQKK : kQK;
  const size_t row_bytes = static_cast<size_t>(n / kBlockElems) * sizeof(Block);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(n_rows));
  std::mt19937 rng(seed);
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = w.data() + row_bytes * static_cast<size_t>(r);
    if (pattern == 0) {
      const std::vector<float> x = test::random_vector(n, seed + static_cast<uint32_t>(r), 0.7f);
      (kXs ? quantize_iq4_xs : quantize_iq4_nl)(x.data(), row, n);
      continue;
    }
    for (size_t i = 0; i < row_bytes; ++i) {
      row[i] = pattern == 1 ? static_cast<uint8_t>(rng()) : pattern == 2 ? 0x00 : 0xff;
    }
    for (int64_t b = 0; b < n / kBlockElems; ++b) {
      reinterpret_cast<Block*>(row)[b].d = fp32_to_fp16(0.75f);
    }
  }
  return w;
}

// Activation rows: quantized from random floats, or raw levels at -128 and 127 (scale 0.25).
template <class Act>
std::vector<uint8_t> act_row(int64_t n, bool raw, uint32_t seed) {
  constexpr bool kK = std::is_same_v<Act, BlockQ8_K>;
  constexpr int64_t kBlockElems = kK ? kQKK : kQK;
  std::vector<uint8_t> a(static_cast<size_t>(n / kBlockElems) * sizeof(Act));
  if (!raw) {
    const std::vector<float> x = test::random_activations(n, seed);
    (kK ? quantize_q8_k : quantize_q8_0_act)(x.data(), a.data(), n);
    return a;
  }
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < n / kBlockElems; ++b) {
    Act& blk = reinterpret_cast<Act*>(a.data())[b];
    for (int64_t i = 0; i < kBlockElems; ++i) blk.qs[i] = rng() % 2 ? 127 : -128;
    if constexpr (kK) {
      blk.d = 0.25f;  // (bsums unused by these kernels)
    } else {
      blk.d = fp32_to_fp16(0.25f);
    }
  }
  return a;
}

TEST(KernelsNeon, Iq4NlIsTheExactChain) {
  uint32_t seed = 80;
  for (int64_t blocks : {1, 2, 3, 4, 5, 7, 33}) {
    const int64_t n = blocks * kQK;
    const size_t w_row = static_cast<size_t>(blocks) * sizeof(BlockIQ4_NL);
    for (int pattern = 0; pattern < 4; ++pattern) {
      for (bool raw : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "blocks " << blocks << " pattern " << pattern << (raw ? " raw" : ""));
        constexpr int64_t kRows = 6;  // a 4-row pass and 2 single rows
        const std::vector<uint8_t> w = weight_rows<BlockIQ4_NL>(n, kRows, pattern, ++seed);
        const std::vector<uint8_t> a = act_row<BlockQ8_0>(n, raw, ++seed);
        const auto* y = reinterpret_cast<const BlockQ8_0*>(a.data());
        for (bool dotprod : {false, true}) {
          if (dotprod && !host_has_dotprod()) continue;
          SCOPED_TRACE(dotprod ? "dotprod" : "baseline");
          std::vector<float> got(kRows + 1, kNaN);
          (dotprod ? neon::gemv_iq4_nl_q8_0_dotprod : neon::gemv_iq4_nl_q8_0)(
              n, w.data(), w_row, kRows, a.data(), got.data());
          for (int64_t r = 0; r < kRows; ++r) {
            const size_t i = static_cast<size_t>(r);
            const uint8_t* x = w.data() + w_row * i;
            const float want = iq4_nl_chain(n, reinterpret_cast<const BlockIQ4_NL*>(x), y);
            const float d = (dotprod ? neon::vec_dot_iq4_nl_q8_0_dotprod
                                     : neon::vec_dot_iq4_nl_q8_0)(n, x, a.data());
            EXPECT_EQ(std::bit_cast<uint32_t>(d), std::bit_cast<uint32_t>(want))
                << "vec_dot row " << r << ": " << d << " vs " << want;
            EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
                << "gemv row " << r << ": " << got[i] << " vs " << want;
          }
          EXPECT_TRUE(std::isnan(got[kRows])) << "wrote past the rows";
        }
      }
    }
  }
}

TEST(KernelsNeon, Iq4XsIsTheExactChain) {
  uint32_t seed = 90;
  for (int64_t blocks : {1, 2, 3, 5}) {
    const int64_t n = blocks * kQKK;
    const size_t w_row = static_cast<size_t>(blocks) * sizeof(BlockIQ4_XS);
    for (int pattern = 0; pattern < 4; ++pattern) {
      for (bool raw : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "blocks " << blocks << " pattern " << pattern << (raw ? " raw" : ""));
        constexpr int64_t kRows = 3;
        const std::vector<uint8_t> w = weight_rows<BlockIQ4_XS>(n, kRows, pattern, ++seed);
        const std::vector<uint8_t> a = act_row<BlockQ8_K>(n, raw, ++seed);
        const auto* y = reinterpret_cast<const BlockQ8_K*>(a.data());
        for (int64_t r = 0; r < kRows; ++r) {
          const uint8_t* x = w.data() + w_row * static_cast<size_t>(r);
          const float want = iq4_xs_chain(n, reinterpret_cast<const BlockIQ4_XS*>(x), y);
          const float got = neon::vec_dot_iq4_xs_q8_k(n, x, a.data());
          EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
              << "row " << r << ": " << got << " vs " << want;
          if (!host_has_dotprod()) continue;
          const float dp = neon::vec_dot_iq4_xs_q8_k_dotprod(n, x, a.data());
          EXPECT_EQ(std::bit_cast<uint32_t>(dp), std::bit_cast<uint32_t>(want))
              << "dotprod row " << r << ": " << dp << " vs " << want;
        }
      }
    }
  }
}

}  // namespace
}  // namespace qrun::kernels
