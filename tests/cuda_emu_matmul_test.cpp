// The CUDA decode matmul (quantize_q8_1 + mmvq), run under the SIMT emulator, for every
// weight type and every kernel variant (mmvq_variant), odd row counts, 1, 3 and 9 tokens and
// weights at an address only 2-byte aligned, into NaN-filled outputs.
// Oracles:
//  - quantize_q8_1 gives the bits of the CPU reference's activation quantizer
//    (quantize_q8_0_act; quantize_q8_1_act's d and qs), so the legacy types see the very
//    activations the CPU backend multiplies with;
//  - mmvq equals, within float rounding, the double-precision dot of the reference
//    dequantization of the weights with the dequantized activation blocks: each chunk's
//    integer sum is exact, and the rest is about n_in / 32 float additions and a few float
//    products per chunk, so |error| <= (n_chunks + 64) * eps * sum_j |w_j * a_j|. One wrong
//    element out of n_in moves the result by about sum_j |w_j * a_j| / n_in, 10x the bound
//    even at n_in = 4096. (Q4_1 and Q5_1 round d * q . a and m * sum(a) apart, each up to a
//    few times sum_j |w_j * a_j| where the block minimum is large: measured 5.7 eps times
//    it, against 0.9 for the other 32-element types, and 0.09 of the bound);
//  - mmvq is within the activation quantization error of the exact float product w . x:
//    |x_j - a_j| <= d / 2 plus d's rounding to F16 (127 * 2^-11 * d), under 0.6 * d;
//  - for the 32-element types, the reference vec_dot over the same activations: Q8_0, and
//    Q8_1 for Q4_1 and Q5_1, whose s = d * sum(q) is F16 where the CUDA blocks keep the
//    integer sum, so that the reference adds m * (s - a.d * sum) more per block; the check
//    takes that sum, computed from the blocks, off the reference (without it the Q4_1 and
//    Q5_1 rows differed by up to 280x the bound; with it, 0.025x).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cuda/ops.h"
#include "tests/support/random_data.h"

namespace qrun::kernels::cuda {
namespace {

using test::random_activations;

// The reference's activation blocks, as BlockQ8_1.
std::vector<BlockQ8_1> reference_q8_1(const std::vector<float>& x) {
  const int64_t n_blocks = static_cast<int64_t>(x.size()) / 32;
  std::vector<BlockQ8_0> q(static_cast<size_t>(n_blocks));
  quantize_q8_0_act(x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<BlockQ8_1> out(q.size());
  for (size_t b = 0; b < q.size(); ++b) {
    out[b].d = fp16_to_fp32(q[b].d);
    out[b].sum = 0;
    for (int j = 0; j < 32; ++j) {
      out[b].qs[j] = q[b].qs[j];
      out[b].sum += q[b].qs[j];
    }
  }
  return out;
}

// Weights in device memory in the layout a variant reads: the file's blocks where it reads
// those, else a repacked copy (repack_groups8).
class DeviceWeights {
 public:
  DeviceWeights(int variant, DType type, const uint8_t* blocks, int64_t n_in, int64_t n_out)
      : blocks_(blocks) {
    if (mmvq_variant_layout(variant, type, n_in) != WeightLayout::kGroups8) return;
    grouped_ = DeviceArray<uint8_t>(row_size(type, n_in) * static_cast<size_t>(n_out));
    repack_groups8(type, blocks, n_in, n_out, grouped_.data(), Stream{});
  }
  const uint8_t* data() const { return grouped_.size() != 0 ? grouped_.data() : blocks_; }

 private:
  const uint8_t* blocks_;
  DeviceArray<uint8_t> grouped_;
};

TEST(CudaEmuMatmul, QuantizeQ8_1MatchesTheReferenceBits) {
  for (int64_t n : {32, 96, 4096}) {
    std::vector<float> x = random_activations(2 * n, 11);
    x[3] = 0.0f;
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0
    const std::vector<BlockQ8_1> want = reference_q8_1(x);
    DeviceArray<float> dx{std::span<const float>(x)};
    DeviceArray<BlockQ8_1> dq(want.size());
    quantize_q8_1(dx.data(), 2, n, dq.data(), Stream{});
    const std::vector<BlockQ8_1> got = dq.download();
    for (size_t b = 0; b < want.size(); ++b) {
      ASSERT_EQ(got[b].d, want[b].d) << "block " << b;
      ASSERT_EQ(got[b].sum, want[b].sum) << "block " << b;
      ASSERT_EQ(std::memcmp(got[b].qs, want[b].qs, 32), 0) << "block " << b;
    }
  }
}

// For Q4_1 and Q5_1 against the reference's Q8_1 activations q8_1 (quantize_q8_1_act: the
// same d and qs as act, and s = d * sum(q) rounded to F16): the sum over blocks of
// m * (s - act.d * act.sum), by which the reference's m * s terms exceed the CUDA kernel's
// m * (a.d * a.sum). 0 for the other types.
double carried_sum_excess(DType type, const uint8_t* w_row, const uint8_t* q8_1,
                          const BlockQ8_1* act, int64_t n_in) {
  if (type != DType::kQ4_1 && type != DType::kQ5_1) return 0.0;
  const size_t block_bytes = type_traits(type).block_bytes;
  const auto* ref = reinterpret_cast<const ::qrun::BlockQ8_1*>(q8_1);
  double excess = 0.0;
  for (int64_t b = 0; b < n_in / 32; ++b) {
    uint16_t m = 0;  // bytes 2-3 of both block types
    std::memcpy(&m, w_row + static_cast<size_t>(b) * block_bytes + 2, 2);
    const double s = fp16_to_fp32(ref[b].s);
    excess += double{fp16_to_fp32(m)} * (s - static_cast<double>(act[b].d) * act[b].sum);
  }
  return excess;
}

class CudaEmuMmvq : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(CudaEmuMmvq, MatchesReferences) {
  const auto [type, variant] = GetParam();
  ASSERT_TRUE(mmvq_supports(type));
  const TypeTraits& tt = type_traits(type);
  const bool super_blocks = tt.block_elems == 256;  // the K types and IQ4_XS
  // 4608: rows of 3 tiles of the tile kernels (v9 puts 4 warps on them, one with none).
  const std::vector<int64_t> n_ins = super_blocks ? std::vector<int64_t>{256, 768, 2304, 4096, 4608}
                                                  : std::vector<int64_t>{32, 96, 1280, 4096, 4608};
  for (int64_t n_in : n_ins) {
    for (int64_t n_out : {1, 7, 33}) {
      if (n_in >= 4096 && n_out == 33) continue;  // slow emulated; 33 rows at the other n_in
      // 9 tokens: groups of 8 and 1; 3: one group of 4 with a token missing.
      const int64_t n_tokens = n_out == 1 ? 1 : n_out == 7 ? 9 : 3;
      // The 7-row weights start 2 bytes into their allocation: no wide loads.
      const size_t offset = n_out == 7 ? 2 : 0;
      SCOPED_TRACE(::testing::Message() << tt.name << " " << mmvq_variant_name(variant) << " n_in "
                                        << n_in << " n_out " << n_out << " n_tokens " << n_tokens);
      const size_t row_bytes = row_size(type, n_in);
      std::vector<uint8_t> w(row_bytes * static_cast<size_t>(n_out));
      std::vector<uint8_t> w_at(offset + w.size());
      const std::vector<float> wf =
          random_activations(n_in * n_out, 21 + static_cast<uint32_t>(n_in));
      for (int64_t o = 0; o < n_out; ++o)
        tt.from_float(wf.data() + o * n_in, w.data() + o * row_bytes, n_in);
      const std::vector<float> x =
          random_activations(n_in * n_tokens, 31 + static_cast<uint32_t>(n_out));

      std::memcpy(w_at.data() + offset, w.data(), w.size());

      DeviceArray<uint8_t> dw{std::span<const uint8_t>(w_at)};
      const DeviceWeights weights(variant, type, dw.data() + offset, n_in, n_out);
      DeviceArray<float> dx{std::span<const float>(x)};
      DeviceArray<BlockQ8_1> dq(static_cast<size_t>(n_in / 32 * n_tokens));
      const std::vector<float> nans(static_cast<size_t>(n_out * n_tokens),
                                    std::numeric_limits<float>::quiet_NaN());
      DeviceArray<float> dy{std::span<const float>(nans)};
      quantize_q8_1(dx.data(), n_tokens, n_in, dq.data(), Stream{});
      mmvq_variant(variant, type, weights.data(), n_in, n_out, dq.data(), n_tokens, dy.data(),
                   Stream{});
      const std::vector<float> y = dy.download();

      const std::vector<BlockQ8_1> act = reference_q8_1(x);
      std::vector<float> wd(static_cast<size_t>(n_in));
      // The reference's activations (Q8_0, or Q8_1 for Q4_1 and Q5_1) for its vec_dot.
      const DType act_type = super_blocks ? DType::kQ8_0 : tt.vec_dot_type;
      std::vector<uint8_t> act_ref(row_size(act_type, n_in));
      for (int64_t t = 0; t < n_tokens; ++t) {
        const BlockQ8_1* a = act.data() + t * (n_in / 32);
        type_traits(act_type).from_float_act(x.data() + t * n_in, act_ref.data(), n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          tt.to_float(w.data() + o * row_bytes, wd.data(), n_in);
          double same_math = 0.0, magnitude = 0.0, exact = 0.0, quant_bound = 0.0;
          for (int64_t j = 0; j < n_in; ++j) {
            const BlockQ8_1& blk = a[j / 32];
            const double aj = static_cast<double>(blk.d) * blk.qs[j % 32];
            same_math += static_cast<double>(wd[j]) * aj;
            magnitude += std::fabs(static_cast<double>(wd[j]) * aj);
            exact += static_cast<double>(wd[j]) * x[t * n_in + j];
            quant_bound += 0.6 * blk.d * std::fabs(wd[j]);
          }
          const double eps = std::numeric_limits<float>::epsilon();
          const double tol = (static_cast<double>(n_in / 32) + 64.0) * eps * magnitude;
          const float got = y[t * n_out + o];
          ASSERT_FALSE(std::isnan(got)) << "row " << o << " token " << t << " not written";
          EXPECT_NEAR(got, same_math, tol) << "row " << o << " token " << t;
          EXPECT_NEAR(got, exact, quant_bound + tol) << "row " << o << " token " << t;
          if (!super_blocks) {
            const uint8_t* w_row = w.data() + o * row_bytes;
            const float ref = tt.vec_dot(n_in, w_row, act_ref.data());
            const double excess = carried_sum_excess(type, w_row, act_ref.data(), a, n_in);
            EXPECT_NEAR(got, ref - excess, 2.0 * tol) << "row " << o << " token " << t;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAndVariants, CudaEmuMmvq,
    ::testing::Combine(::testing::Values(DType::kQ4_0, DType::kQ5_0, DType::kQ4_1, DType::kQ5_1,
                                         DType::kQ8_0, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K,
                                         DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                       ::testing::Range(0, mmvq_variant_count())),
    [](const auto& p) {
      return std::string(dtype_name(std::get<0>(p.param))) + "_" +
             mmvq_variant_name(std::get<1>(p.param));
    });

// mmvq itself runs the variant QRUN_CUDA_MMVQ names (v8 when unset), on weights in that
// variant's layout: its output has the bits of that variant's, on Q4_K (the file's blocks)
// and Q4_0 (repacked for v7 and v8).
TEST(CudaEmuMatmul, MmvqRunsTheSelectedVariant) {
  const char* env = std::getenv("QRUN_CUDA_MMVQ");
  int want = 7;  // v8
  for (int v = 0; v < mmvq_variant_count(); ++v) {
    if (env != nullptr && std::string(env) == mmvq_variant_name(v)) want = v;
  }
  const int64_t n_in = 4096, n_out = 16, n_tokens = 2;
  for (const DType type : {DType::kQ4_K, DType::kQ4_0}) {
    EXPECT_EQ(mmvq_layout(type, n_in), mmvq_variant_layout(want, type, n_in));
    const TypeTraits& tt = type_traits(type);
    const std::vector<float> wf = random_activations(n_in * n_out, 5);
    std::vector<uint8_t> w(row_size(type, n_in) * n_out);
    tt.from_float(wf.data(), w.data(), n_in * n_out);
    const std::vector<float> x = random_activations(n_in * n_tokens, 6);
    DeviceArray<uint8_t> dw{std::span<const uint8_t>(w)};
    const DeviceWeights weights(want, type, dw.data(), n_in, n_out);
    DeviceArray<float> dx{std::span<const float>(x)};
    DeviceArray<BlockQ8_1> dq(static_cast<size_t>(n_in / 32 * n_tokens));
    DeviceArray<float> dy(static_cast<size_t>(n_out * n_tokens));
    DeviceArray<float> dv(static_cast<size_t>(n_out * n_tokens));
    quantize_q8_1(dx.data(), n_tokens, n_in, dq.data(), Stream{});
    mmvq(type, weights.data(), n_in, n_out, dq.data(), n_tokens, dy.data(), Stream{});
    mmvq_variant(want, type, weights.data(), n_in, n_out, dq.data(), n_tokens, dv.data(), Stream{});
    const std::vector<float> got = dy.download(), expected = dv.download();
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
        << tt.name << " QRUN_CUDA_MMVQ=" << (env != nullptr ? env : "(unset)");
  }
}

// mmvq_group (one launch for Q, K and V, or gate and up) writes each output with the bits
// of mmvq on that matrix alone: groups of 1 to kMaxGroup matrices of odd row counts (a
// partial last block of rows at each seam of the grid), rows the tile kernel takes and
// rows it does not (Q4_0 and IQ4_NL at n_in 96: 54-byte rows; Q5_0 at 640: 440-byte rows, as
// Gemma 3 270M's; Q4_1 and Q5_1 at 96: 60 and 72 bytes; Q6_K below 2048; IQ4_XS only tiled,
// at 512 and 2048; Q2_K and Q3_K tiled at 2048 only: 168- and 220-byte rows at 512), Q4_0 rows of
// 512 and 2048 in the layout of mmvq's variant (grouped for v7 and v8), 1 to 5 tokens. Under the
// emulator, the group is one launch where the variant has a group kernel (v5, v7, v8), tiled or
// not.
TEST(CudaEmuMatmul, GroupedMatmulsMatchOneLaunchEach) {
  const int64_t rows[] = {13, 1, 6, 33};
#if defined(QRUN_SIMT_EMU)
  const char* env = std::getenv("QRUN_CUDA_MMVQ");
  const bool one_launch = env == nullptr || *env == '\0' || std::strcmp(env, "v5") == 0 ||
                          std::strcmp(env, "v7") == 0 || std::strcmp(env, "v8") == 0;
#endif
  for (const DType type : {DType::kQ4_0, DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kIQ4_NL,
                           DType::kIQ4_XS, DType::kQ2_K, DType::kQ3_K, DType::kQ6_K}) {
    for (const int64_t n_in : {int64_t{96}, int64_t{512}, int64_t{640}, int64_t{2048}}) {
      if (n_in % type_traits(type).block_elems != 0) continue;
      const TypeTraits& tt = type_traits(type);
      for (const int64_t n_tokens : {1, 2, 5}) {
        const std::vector<float> x = random_activations(n_in * n_tokens, 8);
        DeviceArray<float> dx{std::span<const float>(x)};
        DeviceArray<BlockQ8_1> dq(static_cast<size_t>(n_in / 32 * n_tokens));
        quantize_q8_1(dx.data(), n_tokens, n_in, dq.data(), Stream{});
        for (int count = 1; count <= kMaxGroup; ++count) {
          std::vector<DeviceArray<uint8_t>> dw;
          std::vector<DeviceArray<float>> grouped, alone;
          std::vector<MmvqJob> jobs;
          for (int g = 0; g < count; ++g) {
            const std::vector<float> wf = random_activations(n_in * rows[g], 40 + g);
            std::vector<uint8_t> w(row_size(type, n_in) * static_cast<size_t>(rows[g]));
            tt.from_float(wf.data(), w.data(), n_in * rows[g]);
            DeviceArray<uint8_t> blocks{std::span<const uint8_t>(w)};
            if (mmvq_layout(type, n_in) == WeightLayout::kGroups8) {
              dw.emplace_back(w.size());
              repack_groups8(type, blocks.data(), n_in, rows[g], dw.back().data(), Stream{});
            } else {
              dw.push_back(std::move(blocks));
            }
            const std::vector<float> nans(static_cast<size_t>(rows[g] * n_tokens),
                                          std::numeric_limits<float>::quiet_NaN());
            grouped.emplace_back(std::span<const float>(nans));
            alone.emplace_back(std::span<const float>(nans));
            jobs.push_back(MmvqJob{dw.back().data(), rows[g], grouped.back().data()});
          }
#if defined(QRUN_SIMT_EMU)
          const int64_t launched = kernels_launched();
#endif
          mmvq_group(type, n_in, jobs, dq.data(), n_tokens, Stream{});
#if defined(QRUN_SIMT_EMU)
          EXPECT_EQ(kernels_launched() - launched, one_launch ? 1 : count)
              << dtype_name(type) << " n_in " << n_in << ", a group of " << count;
#endif
          for (int g = 0; g < count; ++g) {
            mmvq(type, dw[g].data(), n_in, rows[g], dq.data(), n_tokens, alone[g].data(), Stream{});
            const std::vector<float> got = grouped[g].download(), want = alone[g].download();
            EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << dtype_name(type) << " n_in " << n_in << ", " << n_tokens << " tokens, matrix "
                << g << " of " << count;
          }
        }
      }
    }
  }
}

// v7 and v8 read repacked weights but sum the same block values in the same order as v1
// (lane l: blocks l, l + 32, ...; then the warp's butterfly), so they give v1's bits:
// Q4_0 and Q8_0, rows of 1 to 33 runs of 8 blocks (lanes with 2 blocks and with none; 33:
// rows v8 gives one warp each for up to 2 tokens), 1, 2, 3 and 9 tokens, odd row counts
// (v8's last warp has one row).
TEST(CudaEmuMatmul, GroupedVariantsGiveV1Bits) {
  for (const DType type : {DType::kQ4_0, DType::kQ8_0}) {
    const TypeTraits& tt = type_traits(type);
    for (const int64_t n_in : {int64_t{256}, int64_t{1280}, int64_t{4608}, int64_t{8448}}) {
      for (const int64_t n_out : {int64_t{1}, int64_t{9}}) {
        const std::vector<float> wf =
            random_activations(n_in * n_out, 70 + static_cast<uint32_t>(n_in));
        std::vector<uint8_t> w(row_size(type, n_in) * static_cast<size_t>(n_out));
        tt.from_float(wf.data(), w.data(), n_in * n_out);
        DeviceArray<uint8_t> dw{std::span<const uint8_t>(w)};
        for (const int64_t n_tokens : {1, 2, 3, 9}) {
          const std::vector<float> x = random_activations(n_in * n_tokens, 80);
          DeviceArray<float> dx{std::span<const float>(x)};
          DeviceArray<BlockQ8_1> dq(static_cast<size_t>(n_in / 32 * n_tokens));
          quantize_q8_1(dx.data(), n_tokens, n_in, dq.data(), Stream{});
          DeviceArray<float> want(static_cast<size_t>(n_out * n_tokens));
          mmvq_variant(0, type, dw.data(), n_in, n_out, dq.data(), n_tokens, want.data(), Stream{});
          for (const char* name : {"v7", "v8"}) {
            int variant = 0;
            while (std::string(mmvq_variant_name(variant)) != name) ++variant;
            ASSERT_EQ(mmvq_variant_layout(variant, type, n_in), WeightLayout::kGroups8);
            const DeviceWeights weights(variant, type, dw.data(), n_in, n_out);
            const std::vector<float> nans(static_cast<size_t>(n_out * n_tokens),
                                          std::numeric_limits<float>::quiet_NaN());
            DeviceArray<float> got{std::span<const float>(nans)};
            mmvq_variant(variant, type, weights.data(), n_in, n_out, dq.data(), n_tokens,
                         got.data(), Stream{});
            const std::vector<float> g = got.download(), v1 = want.download();
            EXPECT_EQ(std::memcmp(g.data(), v1.data(), g.size() * sizeof(float)), 0)
                << tt.name << " " << name << " n_in " << n_in << " n_out " << n_out << ", "
                << n_tokens << " tokens";
          }
        }
      }
    }
  }
}

// Only Q4_0 and Q8_0 rows of whole runs of 8 blocks are repacked, and only for v7 and v8.
TEST(CudaEmuMatmul, GroupedLayoutOnlyWhereItApplies) {
  for (int v = 0; v < mmvq_variant_count(); ++v) {
    const bool grouped = std::string(mmvq_variant_name(v)) >= "v7";
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ4_0, 4096) == WeightLayout::kGroups8, grouped);
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ8_0, 256) == WeightLayout::kGroups8, grouped);
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ4_0, 96), WeightLayout::kBlocks);
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ4_0, 4064), WeightLayout::kBlocks);
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ4_K, 4096), WeightLayout::kBlocks);
    EXPECT_EQ(mmvq_variant_layout(v, DType::kQ6_K, 4096), WeightLayout::kBlocks);
  }
}

// F16 and F32 weights: against the reference vec_dot over x converted to the weight's
// vec_dot_type (F16: x rounded to F16), both float sums of the same exact products, so
// within (n_in / 32 + 64) * eps * sum|w x| of each other.
TEST(CudaEmuMatmul, FloatWeightsMatchTheReference) {
  for (DType type : {DType::kF16, DType::kF32}) {
    const TypeTraits& tt = type_traits(type);
    for (int64_t n_in : {1, 7, 33, 172, 4097}) {
      const int64_t n_out = 5, n_tokens = 2;
      SCOPED_TRACE(::testing::Message() << tt.name << " n_in " << n_in);
      const std::vector<float> wf = random_activations(n_in * n_out, 41);
      const std::vector<float> x = random_activations(n_in * n_tokens, 42);
      std::vector<uint8_t> w(row_size(type, n_in) * n_out);
      tt.from_float(wf.data(), w.data(), n_in * n_out);
      DeviceArray<uint8_t> dw{std::span<const uint8_t>(w)};
      DeviceArray<float> dx{std::span<const float>(x)};
      DeviceArray<float> dy(static_cast<size_t>(n_out * n_tokens));
      mmv_float(type, dw.data(), n_in, n_out, dx.data(), n_tokens, dy.data(), Stream{});
      const std::vector<float> y = dy.download();
      const TypeTraits& act = type_traits(tt.vec_dot_type);
      std::vector<uint8_t> xa(row_size(tt.vec_dot_type, n_in));
      std::vector<float> wd(static_cast<size_t>(n_in)), xd(static_cast<size_t>(n_in));
      for (int64_t t = 0; t < n_tokens; ++t) {
        act.from_float(x.data() + t * n_in, xa.data(), n_in);
        act.to_float(xa.data(), xd.data(), n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          const uint8_t* row = w.data() + o * row_size(type, n_in);
          tt.to_float(row, wd.data(), n_in);
          double magnitude = 0.0;
          for (int64_t j = 0; j < n_in; ++j) magnitude += std::fabs(double{wd[j]} * xd[j]);
          const double tol = (static_cast<double>(n_in) / 32.0 + 64.0) *
                             std::numeric_limits<float>::epsilon() * magnitude;
          EXPECT_NEAR(y[t * n_out + o], tt.vec_dot(n_in, row, xa.data()), tol)
              << "row " << o << " token " << t;
        }
      }
    }
  }
}

TEST(CudaEmuMatmul, SupportedTypes) {
  for (const TypeTraits& t : all_types()) {
    const bool want = t.type == DType::kQ4_0 || t.type == DType::kQ5_0 || t.type == DType::kQ4_1 ||
                      t.type == DType::kQ5_1 || t.type == DType::kQ8_0 ||
                      t.type == DType::kIQ4_NL || t.type == DType::kIQ4_XS ||
                      t.type == DType::kQ2_K || t.type == DType::kQ3_K || t.type == DType::kQ4_K ||
                      t.type == DType::kQ5_K || t.type == DType::kQ6_K;
    EXPECT_EQ(mmvq_supports(t.type), want) << t.name;
  }
}

}  // namespace
}  // namespace qrun::kernels::cuda
