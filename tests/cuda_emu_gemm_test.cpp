// The CUDA prefill matmul (ops_gemm.cu: dequantize_f16, convert_f32_to_f16, matmul_gemm,
// and the runtime's gemm_f16), run under the SIMT emulator, and as cuda_gpu_gemm_test on a
// GPU with cuBLAS. Outputs start NaN-filled under the emulator. Oracles:
//  - dequantize_f16 gives, bit for bit, the F16 nearest to the reference dequantizer's
//    float (type_traits(type).to_float), on quantized rows and on blocks of random bytes
//    (every scale and high-bit pattern, not only those a quantizer writes);
//  - convert_f32_to_f16 gives fp32_to_fp16's bits (ties, subnormals, overflow to inf);
//  - gemm_f16 on padded operands (lda, ldb, ldc larger than needed) equals the double dot
//    of the F16 values within float summation, and leaves the padding of c alone; so does
//    gemm_f16_batched, with either layout of a, padding between problems, and beta 0 or 1;
//  - matmul_gemm, on awkward shapes and with scratch small enough for several tiles, is
//    compared with two double-precision products:
//      ref16, of the F16-rounded weights and x: what the GEMM computes, so only the float
//        summation differs: |got - ref16| <= kSumTol * eps * sum_i |w16_i x16_i|;
//      ref, of the reference's float weights and x: the F16 rounding of both operands
//        adds up to 2^-11 relative per operand, so |got - ref| <= (2 * 2^-11 + 2^-22) *
//        sum_i |w_i x_i| + the summation term, plus 2^-25 * |other operand| per element
//        for values that round to F16 subnormals.
//    kSumTol and the measured worst ratios are stated below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cuda/ops.h"
#include "tests/support/random_data.h"

namespace qrun::kernels::cuda {
namespace {

using test::random_activations;

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ5_0,   DType::kQ4_1,   DType::kQ5_1,
                            DType::kQ8_0, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K,
                            DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,   DType::kQ6_K,
                            DType::kF16,  DType::kF32};

// Float summation error of the GEMM against ref16, in units of eps * sum |w16 x16|. A
// recursive float sum of n terms is bounded by n * eps; random signs and blocked sums
// (cuBLAS) stay far below that. Measured worst (printed by each run): 6.1 under the
// emulator (n_in up to 2048). A wrong row, column, tile or leading dimension errs by the
// order of the result itself (a ratio near 1 / eps).
constexpr double kSumTol = 64.0;

std::vector<uint8_t> quantize(DType type, const std::vector<float>& src) {
  const TypeTraits& tt = type_traits(type);
  std::vector<uint8_t> out(row_size(type, static_cast<int64_t>(src.size())));
  tt.from_float(src.data(), out.data(), static_cast<int64_t>(src.size()));
  return out;
}

// n elements of `type` as random bytes, with finite F16 scales (d, dmin; Q4_1 and Q5_1's d
// and m) of either sign so that the reference's floats are finite: every other bit pattern
// (IQ4_XS's and Q3_K's 6-bit sub-block scales, Q2_K's 4-bit scales and mins, Q3_K's high
// bits too) is allowed.
std::vector<uint8_t> random_blocks(DType type, int64_t n, uint32_t seed) {
  const TypeTraits& tt = type_traits(type);
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(row_size(type, n));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const auto set_f16 = [&](size_t at, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(out.data() + at, &h, 2);
  };
  for (size_t b = 0; b < out.size() / tt.block_bytes; ++b) {
    const size_t at = b * tt.block_bytes;
    switch (type) {
      case DType::kQ4_1:
      case DType::kQ5_1:  // m
      case DType::kQ4_K:
      case DType::kQ5_K:  // dmin
        set_f16(at + 2, scale(rng));
        [[fallthrough]];
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kQ8_0:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS:
        set_f16(at, scale(rng));
        break;
      case DType::kQ2_K:  // d, dmin
        set_f16(at + 80, scale(rng));
        set_f16(at + 82, scale(rng));
        break;
      case DType::kQ3_K:
        set_f16(at + 108, scale(rng));
        break;
      case DType::kQ6_K:
        set_f16(at + 208, scale(rng));
        break;
      default:
        break;
    }
  }
  return out;
}

std::vector<uint16_t> reference_f16(DType type, const std::vector<uint8_t>& src, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  type_traits(type).to_float(src.data(), f.data(), n);
  std::vector<uint16_t> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = fp32_to_fp16(f[i]);
  return out;
}

std::vector<uint16_t> device_dequantize(DType type, const std::vector<uint8_t>& src, int64_t n) {
  DeviceArray<uint8_t> d_src{std::span<const uint8_t>(src)};
  DeviceArray<uint16_t> d_dst(static_cast<size_t>(n));
  dequantize_f16(type, WeightLayout::kBlocks, d_src.data(), n, d_dst.data(), Stream{});
  return d_dst.download();
}

void expect_same_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "element " << i << ": got " << fp16_to_fp32(got[i]) << ", want "
                               << fp16_to_fp32(want[i]);
  }
}

TEST(CudaEmuGemm, DequantizeF16EqualsTheReferenceRoundedToF16) {
  for (DType type : kTypes) {
    const TypeTraits& tt = type_traits(type);
    SCOPED_TRACE(tt.name);
    // 2^15 elements: enough blocks of random bytes to meet every scale and bit pattern.
    const int64_t n = int64_t{1} << 15;
    // Quantized data, one block of it all zeros (d = 0).
    std::vector<float> x = random_activations(n, 7);
    std::fill(x.begin(), x.begin() + tt.block_elems, 0.0f);
    const std::vector<uint8_t> q = quantize(type, x);
    expect_same_bits(device_dequantize(type, q, n), reference_f16(type, q, n));
    if (tt.is_quantized) {
      const std::vector<uint8_t> r = random_blocks(type, n, 8);
      expect_same_bits(device_dequantize(type, r, n), reference_f16(type, r, n));
    }
  }
}

// Eight elements a thread and one 16-byte store where the destination is 16-byte aligned
// and n a multiple of 8, else one element a thread: the same bits either way (a
// destination one F16 past an aligned one; F32 sources of 8 and 13 elements).
TEST(CudaEmuGemm, DequantizeF16AtAnyDestinationAlignment) {
  for (const DType type : {DType::kQ8_0, DType::kQ4_K, DType::kF32}) {
    SCOPED_TRACE(dtype_name(type));
    for (const int64_t n : {int64_t{8}, int64_t{13}, int64_t{4096}}) {
      if (n % type_traits(type).block_elems != 0) continue;
      const std::vector<uint8_t> q = quantize(type, random_activations(n, 11));
      const std::vector<uint16_t> want = reference_f16(type, q, n);
      DeviceArray<uint8_t> d_src{std::span<const uint8_t>(q)};
      for (const int64_t offset : {0, 1}) {
        DeviceArray<uint16_t> dst(static_cast<size_t>(n + offset));
        dequantize_f16(type, WeightLayout::kBlocks, d_src.data(), n, dst.data() + offset, Stream{});
        std::vector<uint16_t> got = dst.download();
        got.erase(got.begin(), got.begin() + offset);
        expect_same_bits(got, want);
      }
    }
  }
}

// Q4_0 and Q8_0 repacked for the decode kernels (WeightLayout::kGroups8) dequantize to the
// very F16s of the file's blocks: rows of 1 and 5 runs of 8 blocks, random block bytes.
TEST(CudaEmuGemm, DequantizeF16OfGroupedWeightsHasTheBlocksBits) {
  for (const DType type : {DType::kQ4_0, DType::kQ8_0}) {
    for (const int64_t n_in : {int64_t{256}, int64_t{1280}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in " << n_in);
      const int64_t n_rows = 7, n = n_in * n_rows;
      const std::vector<uint8_t> r = random_blocks(type, n, 9);
      DeviceArray<uint8_t> blocks{std::span<const uint8_t>(r)};
      DeviceArray<uint8_t> grouped(r.size());
      repack_groups8(type, blocks.data(), n_in, n_rows, grouped.data(), Stream{});
      DeviceArray<uint16_t> dst(static_cast<size_t>(n));
      dequantize_f16(type, WeightLayout::kGroups8, grouped.data(), n, dst.data(), Stream{});
      expect_same_bits(dst.download(), reference_f16(type, r, n));
    }
  }
}

TEST(CudaEmuGemm, DequantizeF16CopiesF16Bits) {
  std::vector<uint16_t> h(4099);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 16411u);
  h[0] = 0x7d01;  // a signalling NaN stays one
  h[1] = 0x8000;
  std::vector<uint8_t> bytes(h.size() * 2);
  std::memcpy(bytes.data(), h.data(), bytes.size());
  expect_same_bits(device_dequantize(DType::kF16, bytes, static_cast<int64_t>(h.size())), h);
}

TEST(CudaEmuGemm, ConvertF32ToF16RoundsToNearestEven) {
  std::vector<float> x = random_activations(4097, 3);
  for (size_t i = 0; i < x.size(); i += 3) x[i] *= 1e-5f;  // F16 subnormals
  const float specials[] = {0.0f,          -0.0f,           65504.0f,
                            65520.0f,      -70000.0f,       1e-8f,
                            2.98e-8f,      1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                            0x1p-24f,      0x1.8p-24f,      std::numeric_limits<float>::infinity(),
                            6.1035156e-5f, 6.1e-5f,         -3.0e-6f};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = fp32_to_fp16(x[i]);
  DeviceArray<float> dx{std::span<const float>(x)};
  DeviceArray<uint16_t> dy(x.size());
  convert_f32_to_f16(dx.data(), static_cast<int64_t>(x.size()), dy.data(), Stream{});
  expect_same_bits(dy.download(), want);
}

// Row-major operands with padding between rows: a wrong transpose or leading dimension in
// the column-major cuBLAS call reads the padding (a huge value) or the wrong elements.
TEST(CudaEmuGemm, GemmF16HonoursLeadingDimensions) {
  const int64_t m = 5, n = 3, k = 7, lda = 9, ldb = 11, ldc = 6;
  constexpr float kPad = 1000.0f;
  std::vector<uint16_t> a(static_cast<size_t>(m * lda), fp32_to_fp16(kPad));
  std::vector<uint16_t> b(static_cast<size_t>(n * ldb), fp32_to_fp16(kPad));
  const std::vector<float> av = random_activations(m * k, 1), bv = random_activations(n * k, 2);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) a[i * lda + p] = fp32_to_fp16(av[i * k + p]);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) b[j * ldb + p] = fp32_to_fp16(bv[j * k + p]);
  std::vector<float> c(static_cast<size_t>(n * ldc), -7.0f);
  DeviceArray<uint16_t> da{std::span<const uint16_t>(a)}, db{std::span<const uint16_t>(b)};
  DeviceArray<float> dc{std::span<const float>(c)};
  gemm_f16(m, n, k, da.data(), lda, db.data(), ldb, dc.data(), ldc, Stream{});
  const std::vector<float> got = dc.download();
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < ldc; ++i) {
      if (i >= m) {
        EXPECT_EQ(got[j * ldc + i], -7.0f) << "padding of c at " << j << ", " << i;
        continue;
      }
      double want = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = double{fp16_to_fp32(a[i * lda + p])} * fp16_to_fp32(b[j * ldb + p]);
        want += prod;
        magnitude += std::fabs(prod);
      }
      EXPECT_NEAR(got[j * ldc + i], want, kSumTol * 0x1p-23 * magnitude) << j << ", " << i;
    }
  }
}

// gemm_f16_batched on the same kind of padded operands, with padding between the problems
// too: a holds rows of k (a_rows) or rows of m, and with beta 1 the products are added to
// c's values; c's padding stays.
TEST(CudaEmuGemm, GemmF16BatchedHonoursLayoutsStridesAndBeta) {
  const int64_t m = 5, n = 3, k = 7, ldb = 11, ldc = 6, batch = 3;
  constexpr float kPad = 1000.0f, kC = -7.0f;
  for (const bool a_rows : {true, false}) {
    for (const float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "a_rows " << a_rows << " beta " << beta);
      const int64_t lda = a_rows ? 9 : 8;
      const int64_t stride_a = (a_rows ? m : k) * lda + 4;
      const int64_t stride_b = n * ldb + 2, stride_c = n * ldc + 3;
      std::vector<uint16_t> a(static_cast<size_t>(batch * stride_a), fp32_to_fp16(kPad));
      std::vector<uint16_t> b(static_cast<size_t>(batch * stride_b), fp32_to_fp16(kPad));
      const std::vector<float> av = random_activations(batch * m * k, 3);
      const std::vector<float> bv = random_activations(batch * n * k, 4);
      auto a_at = [&](int64_t l, int64_t i, int64_t p) -> uint16_t& {
        return a[l * stride_a + (a_rows ? i * lda + p : p * lda + i)];
      };
      for (int64_t l = 0; l < batch; ++l) {
        for (int64_t p = 0; p < k; ++p) {
          for (int64_t i = 0; i < m; ++i) a_at(l, i, p) = fp32_to_fp16(av[(l * m + i) * k + p]);
          for (int64_t j = 0; j < n; ++j) {
            b[l * stride_b + j * ldb + p] = fp32_to_fp16(bv[(l * n + j) * k + p]);
          }
        }
      }
      std::vector<float> c(static_cast<size_t>(batch * stride_c), kC);
      DeviceArray<uint16_t> da{std::span<const uint16_t>(a)}, db{std::span<const uint16_t>(b)};
      DeviceArray<float> dc{std::span<const float>(c)};
      gemm_f16_batched(m, n, k, da.data(), lda, stride_a, a_rows, db.data(), ldb, stride_b,
                       dc.data(), ldc, stride_c, batch, beta, Stream{});
      const std::vector<float> got = dc.download();
      for (int64_t e = 0; e < batch * stride_c; ++e) {
        const int64_t l = e / stride_c, j = (e % stride_c) / ldc, i = (e % stride_c) % ldc;
        if (j >= n || i >= m) {
          EXPECT_EQ(got[e], kC) << "padding of c at " << e;
          continue;
        }
        double want = beta * kC, magnitude = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double prod =
              double{fp16_to_fp32(a_at(l, i, p))} * fp16_to_fp32(b[l * stride_b + j * ldb + p]);
          want += prod;
          magnitude += std::fabs(prod);
        }
        EXPECT_NEAR(got[e], want, kSumTol * 0x1p-23 * (magnitude + std::fabs(kC)))
            << l << ": " << j << ", " << i;
      }
    }
  }
}

struct Shape {
  int64_t n_out;
  int64_t n_tokens;
  int64_t tile_rows;  // 0: the scratch matmul_gemm_scratch_bytes asks for
};

// Worst |got - ref16| / (eps * sum|w16 x16|) and |got - ref| / bound over all cases.
double g_worst_sum_ratio = 0.0;
double g_worst_f16_ratio = 0.0;

void check_matmul(DType type, int64_t n_in, const Shape& s) {
  const TypeTraits& tt = type_traits(type);
  SCOPED_TRACE(::testing::Message() << tt.name << " n_in " << n_in << " n_out " << s.n_out
                                    << " n_tokens " << s.n_tokens << " tile " << s.tile_rows);
  const std::vector<float> wf =
      random_activations(n_in * s.n_out, 21 + static_cast<uint32_t>(n_in));
  const std::vector<uint8_t> w = quantize(type, wf);
  const std::vector<float> x =
      random_activations(n_in * s.n_tokens, 31 + static_cast<uint32_t>(s.n_out));

  const size_t row16 = static_cast<size_t>(n_in) * 2;
  const size_t x16 = (static_cast<size_t>(s.n_tokens) * row16 + 255) / 256 * 256;
  const size_t scratch_bytes = s.tile_rows == 0
                                   ? matmul_gemm_scratch_bytes(n_in, s.n_out, s.n_tokens)
                                   : x16 + static_cast<size_t>(s.tile_rows) * row16;
  DeviceArray<uint8_t> dw{std::span<const uint8_t>(w)};
  DeviceArray<float> dx{std::span<const float>(x)};
  DeviceArray<uint8_t> scratch(scratch_bytes);
  DeviceArray<float> dy(static_cast<size_t>(s.n_out * s.n_tokens));
  matmul_gemm(type, WeightLayout::kBlocks, dw.data(), n_in, s.n_out, dx.data(), s.n_tokens,
              dy.data(), scratch.data(), scratch_bytes, Stream{});
  const std::vector<float> y = dy.download();
  if ((type == DType::kQ4_0 || type == DType::kQ8_0) && n_in % 256 == 0) {
    // The same weights repacked for the decode kernels: the same dequantized tiles, so the
    // same bits.
    DeviceArray<uint8_t> grouped(w.size());
    repack_groups8(type, dw.data(), n_in, s.n_out, grouped.data(), Stream{});
    DeviceArray<float> dg(static_cast<size_t>(s.n_out * s.n_tokens));
    matmul_gemm(type, WeightLayout::kGroups8, grouped.data(), n_in, s.n_out, dx.data(), s.n_tokens,
                dg.data(), scratch.data(), scratch_bytes, Stream{});
    const std::vector<float> yg = dg.download();
    EXPECT_EQ(std::memcmp(yg.data(), y.data(), y.size() * sizeof(float)), 0) << "grouped layout";
  }

  std::vector<float> wd(static_cast<size_t>(n_in * s.n_out));
  tt.to_float(w.data(), wd.data(), n_in * s.n_out);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    for (int64_t o = 0; o < s.n_out; ++o) {
      const float* wo = wd.data() + o * n_in;
      const float* xt = x.data() + t * n_in;
      double ref = 0, ref16 = 0, mag = 0, mag16 = 0, subnormal = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        const double w16 = fp16_to_fp32(fp32_to_fp16(wo[i]));
        const double x16v = fp16_to_fp32(fp32_to_fp16(xt[i]));
        ref += double{wo[i]} * xt[i];
        mag += std::fabs(double{wo[i]} * xt[i]);
        ref16 += w16 * x16v;
        mag16 += std::fabs(w16 * x16v);
        subnormal += 0x1p-25 * (std::fabs(double{xt[i]}) + std::fabs(double{wo[i]}));
      }
      const float got = y[t * s.n_out + o];
      ASSERT_FALSE(std::isnan(got)) << "row " << o << " token " << t << " not written";
      const double sum_tol = kSumTol * eps * mag16;
      const double f16_bound = (2 * 0x1p-11 + 0x1p-22) * mag + subnormal + sum_tol;
      EXPECT_NEAR(got, ref16, sum_tol) << "row " << o << " token " << t;
      EXPECT_NEAR(got, ref, f16_bound) << "row " << o << " token " << t;
      if (mag16 > 0)
        g_worst_sum_ratio = std::max(g_worst_sum_ratio, std::fabs(got - ref16) / (eps * mag16));
      if (mag > 0) g_worst_f16_ratio = std::max(g_worst_f16_ratio, std::fabs(got - ref) / mag);
    }
  }
}

class CudaEmuMatmulGemm : public ::testing::TestWithParam<DType> {};

TEST_P(CudaEmuMatmulGemm, MatchesTheDoubleProducts) {
  const DType type = GetParam();
  ASSERT_TRUE(gemm_supports(type));
  const bool k_quant = type_traits(type).block_elems == 256;
  const std::vector<int64_t> n_ins =
      k_quant ? std::vector<int64_t>{256, 1280} : std::vector<int64_t>{32, 352, 2048};
  // n_out odd and prime, so no tile size divides it; tiles of 1, 5 and 7 rows, and room for
  // 100 rows, which matmul_gemm rounds down to tiles of 64.
  const Shape shapes[] = {{1, 1, 0},   {37, 3, 5}, {67, 17, 7},  {67, 64, 0},
                          {37, 64, 1}, {3, 1, 2},  {131, 3, 100}};
  for (int64_t n_in : n_ins) {
    for (const Shape& s : shapes) {
      if (n_in >= 2048 && s.n_tokens > 17) continue;  // keeps the emulated run short
      check_matmul(type, n_in, s);
    }
  }
  std::printf(
      "%s: worst |got - ref16| = %.2f eps * sum|w16 x16|, worst |got - ref| = %.3g * "
      "sum|w x| (F16 bound %.3g)\n",
      dtype_name(type), g_worst_sum_ratio, g_worst_f16_ratio, 2 * 0x1p-11 + 0x1p-22);
  g_worst_sum_ratio = g_worst_f16_ratio = 0.0;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaEmuMatmulGemm, ::testing::ValuesIn(kTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(CudaEmuGemm, ScratchIsBoundedAndHoldsOneRow) {
  // Gemma 3's output matrix: 262144 rows of 640, 512 tokens: the tile stays at 64 MiB.
  const size_t x16 = 512 * 640 * 2;
  EXPECT_LE(matmul_gemm_scratch_bytes(640, 262144, 512), x16 + (size_t{64} << 20));
  EXPECT_GE(matmul_gemm_scratch_bytes(640, 262144, 512), x16 + (size_t{63} << 20));
  // Small matrices get a tile of all their rows, huge rows a tile of one.
  EXPECT_EQ(matmul_gemm_scratch_bytes(32, 3, 1), 256u + 3 * 64);
  EXPECT_EQ(matmul_gemm_scratch_bytes(int64_t{1} << 26, 2, 0), size_t{1} << 27);
}

TEST(CudaEmuGemm, SupportedTypes) {
  for (const TypeTraits& t : all_types()) {
    bool want = false;
    for (DType type : kTypes) want = want || t.type == type;
    EXPECT_EQ(gemm_supports(t.type), want) << t.name;
  }
}

}  // namespace
}  // namespace qrun::kernels::cuda
