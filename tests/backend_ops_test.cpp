// The CPU backend's ops against naive double-precision references, on awkward sizes
// (1, 7, 31, 32, 33, 255), with NaN-filled outputs so that an unwritten element fails.
// Tolerances are stated per op: matmul is bounded by the activation rounding of its
// vec_dot_type (a wrong row or a transposed access misses by orders of magnitude), the
// float ops by a few float ulps, the F16-cache attention by F16 rounding. Results must
// not depend on the thread count or on how tokens are batched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "ggml-like/backend.h"
#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kAwkward[] = {1, 7, 31, 32, 33, 255};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A weight matrix [n_in, n_out] of `type` built from random floats, and its dequantized copy.
struct Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [n_out][n_in]
  Tensor tensor;
};

Weight make_weight(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  Weight w;
  const std::vector<float> src = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.5f);
  const size_t row = row_size(type, n_in);
  w.bytes.resize(row * static_cast<size_t>(n_out));
  if (type == DType::kF32) {
    std::memcpy(w.bytes.data(), src.data(), w.bytes.size());
  } else {
    quantize_rows(type, src.data(), w.bytes.data(), n_out, n_in);
  }
  w.deq.resize(src.size());
  for (int64_t r = 0; r < n_out; ++r) {
    dequantize_row(type, w.bytes.data() + row * static_cast<size_t>(r), w.deq.data() + r * n_in,
                   n_in);
  }
  w.tensor = Tensor{type, 2, {n_in, n_out, 1, 1}, w.bytes.data(), "w"};
  return w;
}

// Largest error the conversion of activations to `dot_type` can put on element i of a row.
std::vector<double> activation_error(DType dot_type, const float* x, int64_t n) {
  std::vector<double> err(static_cast<size_t>(n), 0.0);
  const int64_t block = type_traits(dot_type).block_elems;
  for (int64_t b = 0; b < n; b += block) {
    double amax = 0.0;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = b; i < b + block; ++i) {
      const double ax = std::fabs(double{x[i]});
      switch (dot_type) {
        case DType::kF32:
          err[static_cast<size_t>(i)] = 0.0;
          break;
        case DType::kF16:
          err[static_cast<size_t>(i)] = ax * 0x1p-11 + 1e-7;
          break;
        case DType::kBF16:
          err[static_cast<size_t>(i)] = ax * 0x1p-8 + 1e-30;
          break;
        // Half a step of amax/127, plus the F16 rounding of the Q8_0 scale.
        case DType::kQ8_0:
        case DType::kQ8_1:
          err[static_cast<size_t>(i)] = amax * (0.5 / 127 + 0x1p-11) * 1.01;
          break;
        case DType::kQ8_K:
          err[static_cast<size_t>(i)] = amax * (0.5 / 127) * 1.01;
          break;
        default:
          ADD_FAILURE() << "no error model for " << dtype_name(dot_type);
      }
    }
  }
  return err;
}

// x converted to `type` with the reference quantizer and back.
std::vector<float> through_type(DType type, const float* x, int64_t n) {
  std::vector<float> out(x, x + n);
  if (type == DType::kF32) return out;
  std::vector<uint8_t> q(row_size(type, n));
  quantize_rows(type, x, q.data(), 1, n);
  dequantize_row(type, q.data(), out.data(), n);
  return out;
}

TEST(BackendOps, SupportTable) {
  kernels::CpuBackend be(1);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0,
                  DType::kQ4_1, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K,
                  DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_TRUE(be.supports(Op::kMatMul, t)) << dtype_name(t);
    EXPECT_TRUE(be.supports(Op::kGetRows, t)) << dtype_name(t);
  }
  EXPECT_FALSE(be.supports(Op::kMatMul, DType::kIQ2_XXS));
  EXPECT_FALSE(be.supports(Op::kMatMul, DType::kQ8_1));  // activation types only
  EXPECT_FALSE(be.supports(Op::kMatMul, DType::kQ8_K));
  EXPECT_FALSE(be.supports(Op::kGetRows, DType::kIQ2_XXS));
  EXPECT_TRUE(be.supports(Op::kAttention, DType::kF16));
  EXPECT_TRUE(be.supports(Op::kAttention, DType::kF32));
  EXPECT_TRUE(be.supports(Op::kAttention, DType::kQ8_0));
  EXPECT_FALSE(be.supports(Op::kAttention, DType::kQ4_K));
  EXPECT_TRUE(be.supports(Op::kRmsNorm, DType::kF32));
  EXPECT_FALSE(be.supports(Op::kRmsNorm, DType::kF16));
}

TEST(BackendOps, MatMulEveryWeightTypeWithinActivationRounding) {
  kernels::CpuBackend be(3);
  kernels::CpuBackend be1(1);
  uint32_t seed = 1;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                     DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS,
                     DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const TypeTraits& tt = type_traits(type);
    std::vector<int64_t> n_ins;
    if (tt.block_elems == 1) n_ins = {1, 7, 33, 255};
    if (tt.block_elems == 32) n_ins = {32, 96, 256};
    if (tt.block_elems == 256) n_ins = {256, 512};
    for (int64_t n_in : n_ins) {
      for (int64_t n_out : kAwkward) {
        for (int64_t n_tokens : {int64_t{1}, int64_t{7}, int64_t{33}}) {
          SCOPED_TRACE(testing::Message() << tt.name << " n_in " << n_in << " n_out " << n_out
                                          << " n_tokens " << n_tokens);
          const Weight w = make_weight(type, n_in, n_out, ++seed);
          const std::vector<float> x =
              random_floats(static_cast<size_t>(n_in * n_tokens), ++seed, 2.0f);
          std::vector<float> y(static_cast<size_t>(n_out * n_tokens), kNaN);
          be.matmul(w.tensor, x.data(), n_tokens, y.data());
          int bad = 0;
          int64_t not_exact = 0;
          std::vector<double> mags(y.size());
          for (int64_t t = 0; t < n_tokens; ++t) {
            const float* xt = x.data() + t * n_in;
            const std::vector<double> err = activation_error(tt.vec_dot_type, xt, n_in);
            const std::vector<float> xq = through_type(tt.vec_dot_type, xt, n_in);
            for (int64_t o = 0; o < n_out; ++o) {
              double ref = 0.0;    // exact activations
              double ref_q = 0.0;  // activations through the reference quantizer
              double bound = 1e-6;
              double mag = 1e-6;
              // Q8_1 blocks carry d * sum(q) as F16, which Q4_1 and Q5_1 multiply by their
              // block minimum m (|m| <= the block's largest |w|): half an F16 ulp of it.
              double carried_sum = 0.0;
              double w_max = 0.0;
              double xq_sum = 0.0;
              for (int64_t i = 0; i < n_in; ++i) {
                const double wi = w.deq[static_cast<size_t>(o * n_in + i)];
                ref += wi * xt[i];
                ref_q += wi * xq[static_cast<size_t>(i)];
                bound += std::fabs(wi) * err[static_cast<size_t>(i)] + 1e-5 * std::fabs(wi * xt[i]);
                mag += std::fabs(wi * xq[static_cast<size_t>(i)]);
                w_max = std::max(w_max, std::fabs(wi));
                xq_sum += std::fabs(xq[static_cast<size_t>(i)]);
                if (tt.vec_dot_type == DType::kQ8_1 && i % kQK == kQK - 1) {
                  carried_sum += 0x1p-11 * 1.01 * w_max * xq_sum;
                  w_max = xq_sum = 0.0;
                }
              }
              bound += carried_sum;
              const double got = y[static_cast<size_t>(t * n_out + o)];
              if (!(std::fabs(got - ref) <= bound) && ++bad <= 3) {
                ADD_FAILURE() << "token " << t << " row " << o << ": " << got << " vs " << ref
                              << " (bound " << bound << ")";
              }
              if (!(std::fabs(got - ref_q) <= 1e-5 * mag + carried_sum)) ++not_exact;
              mags[static_cast<size_t>(t * n_out + o)] = mag;
            }
          }
          // The backend quantizes Q8_0 and Q8_1 activations as llama.cpp's x86 code does, which
          // differs from the reference quantizer only on rare rounding ties; every other
          // type converts activations exactly as the reference does.
          const int64_t allowed = tt.vec_dot_type == DType::kQ8_0 || tt.vec_dot_type == DType::kQ8_1
                                      ? n_out * n_tokens / 100
                                      : 0;
          EXPECT_LE(not_exact, allowed) << "outputs off the reference-quantized dot product";
          // The thread count does not change a single bit.
          std::vector<float> y1(y.size(), kNaN);
          be1.matmul(w.tensor, x.data(), n_tokens, y1.data());
          EXPECT_EQ(std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)), 0);
          // A lone token goes through vec_dot, a batch may go through the ISA's gemm tile
          // kernel, which sums the same exact block products in another float order.
          std::vector<float> y_last(static_cast<size_t>(n_out), kNaN);
          be.matmul(w.tensor, x.data() + (n_tokens - 1) * n_in, 1, y_last.data());
          for (int64_t o = 0; o < n_out; ++o) {
            const size_t i = static_cast<size_t>((n_tokens - 1) * n_out + o);
            EXPECT_LE(std::fabs(y_last[static_cast<size_t>(o)] - y[i]), 1e-5 * mags[i])
                << "row " << o;
          }
        }
      }
    }
  }
}

// A row range of a weight (Tensor::rows, the parts of Phi-3's fused QKV and gate-up
// matrices) multiplies like those rows of the whole: same outputs, in batches (gemm tiles)
// and for one token (vec_dot or a repacked copy, which the same address must not confuse).
TEST(BackendOps, MatMulOnARowRangeGivesThoseRowsOfTheWhole) {
  kernels::CpuBackend be(2);
  uint32_t seed = 100;
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ2_K,
                     DType::kQ3_K, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n_in = type_traits(type).block_elems == 256 ? 256 : 64;
    const int64_t n_out = 40;
    const Weight w = make_weight(type, n_in, n_out, ++seed);
    for (int64_t n_tokens : {int64_t{1}, int64_t{9}}) {
      const std::vector<float> x = random_floats(static_cast<size_t>(n_in * n_tokens), ++seed);
      std::vector<float> whole(static_cast<size_t>(n_out * n_tokens), kNaN);
      be.matmul(w.tensor, x.data(), n_tokens, whole.data());
      for (const auto& [first, n] : {std::pair<int64_t, int64_t>{0, 16}, {16, 12}, {28, 12}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(type) << " tokens " << n_tokens << " rows "
                                        << first << " + " << n);
        const Tensor part = w.tensor.rows(first, n);
        EXPECT_EQ(part.ne[1], n);
        EXPECT_EQ(part.data, w.tensor.row(first));
        std::vector<float> y(static_cast<size_t>(n * n_tokens), kNaN);
        be.matmul(part, x.data(), n_tokens, y.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t o = 0; o < n; ++o) {
            const float want = whole[static_cast<size_t>(t * n_out + first + o)];
            // Exact block products; tiles may sum them in another order.
            EXPECT_NEAR(y[static_cast<size_t>(t * n + o)], want, 1e-5 * (1.0 + std::fabs(want)))
                << "token " << t << " row " << o;
          }
        }
      }
    }
  }
}

TEST(BackendOps, GetRowsDequantizesExactly) {
  kernels::CpuBackend be(2);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                     DType::kQ5_0, DType::kQ4_1, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS,
                     DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t n = type_traits(type).block_elems == 256 ? 256 : 64;
    const Weight w = make_weight(type, n, 33, 7);
    const std::vector<int32_t> ids = {0, 32, 5, 5, 17, 1, 31};
    std::vector<float> out(ids.size() * static_cast<size_t>(n), kNaN);
    be.get_rows(w.tensor, ids, out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(std::memcmp(out.data() + i * n, w.deq.data() + ids[i] * n, n * sizeof(float)), 0)
          << "id " << ids[i];
    }
  }
}

TEST(BackendOps, RmsNormMatchesDoubleReference) {
  kernels::CpuBackend be(2);
  for (int64_t n : kAwkward) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{33}}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " rows " << rows);
      const std::vector<float> x = random_floats(static_cast<size_t>(n * rows), 3, 3.0f);
      const std::vector<float> w = random_floats(static_cast<size_t>(n), 4);
      const Tensor wt{DType::kF32, 1, {n, 1, 1, 1}, w.data(), "norm"};
      std::vector<float> y(x.size(), kNaN);
      be.rms_norm(x.data(), wt, rows, n, 1e-5f, y.data());
      std::vector<float> in_place = x;
      be.rms_norm(in_place.data(), wt, rows, n, 1e-5f, in_place.data());
      EXPECT_EQ(std::memcmp(in_place.data(), y.data(), y.size() * sizeof(float)), 0);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += double{x[r * n + i]} * x[r * n + i];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = x[r * n + i] * scale * w[i];
          EXPECT_NEAR(y[r * n + i], ref, 4e-7 * std::fabs(ref) + 1e-30) << r << "," << i;
        }
      }
    }
  }
}

TEST(BackendOps, RopeMatchesDoubleReference) {
  kernels::CpuBackend be(2);
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f, 1.5f, 3.0f, 1.0f, 10.0f,
                                      1.0f, 1.0f, 2.0f, 2.0f, 1.0f, 5.0f, 1.0f, 1.0f};
  struct Case {
    int64_t head_dim, n_rot;
    float base, scale;
    bool with_factors;
    RopeMode mode = RopeMode::kNormal;
    float attn_factor = 1.0f;
    float ext_factor = 0.0f;  // YaRN: pairs 3 .. 11 ramp from unscaled to interpolated
  };
  for (const Case& c :
       {Case{4, 4, 10000.0f, 1.0f, false}, Case{8, 8, 10000.0f, 1.0f, false},
        Case{64, 32, 500000.0f, 0.25f, false}, Case{32, 32, 10000.0f, 1.0f, true},
        Case{128, 128, 1000000.0f, 1.0f, false}, Case{4, 4, 10000.0f, 1.0f, false, RopeMode::kNeox},
        Case{64, 32, 500000.0f, 0.25f, false, RopeMode::kNeox},
        Case{32, 32, 10000.0f, 1.0f, true, RopeMode::kNeox},
        Case{128, 128, 1000000.0f, 1.0f, false, RopeMode::kNeox},
        Case{32, 32, 10000.0f, 1.0f, true, RopeMode::kNeox, 1.19f},
        Case{48, 32, 10000.0f, 1.0f, true, RopeMode::kNeox, 0.75f},
        Case{64, 32, 500000.0f, 0.25f, false, RopeMode::kNeox, 1.14f, 1.0f},
        Case{32, 32, 10000.0f, 0.125f, true, RopeMode::kNormal, 1.0f, 0.5f}}) {
    const bool neox = c.mode == RopeMode::kNeox;
    for (int64_t n_head : {int64_t{1}, int64_t{7}, int64_t{32}}) {
      for (int64_t n_tokens : {int64_t{1}, int64_t{7}, int64_t{33}}) {
        SCOPED_TRACE(testing::Message()
                     << "neox " << neox << " head_dim " << c.head_dim << " n_rot " << c.n_rot
                     << " n_head " << n_head << " n_tokens " << n_tokens);
        std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
        for (int64_t t = 0; t < n_tokens; ++t) pos[t] = static_cast<int32_t>(t * 37 % 300);
        const std::vector<float> x =
            random_floats(static_cast<size_t>(n_tokens * n_head * c.head_dim), 5);
        std::vector<float> y = x;
        RopeParams p{
            c.n_rot, c.base,        c.scale,      c.with_factors ? factors.data() : nullptr,
            c.mode,  c.attn_factor, c.ext_factor, {3.0f, 11.0f}};
        be.rope(y.data(), n_tokens, n_head, c.head_dim, pos, p);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t h = 0; h < n_head; ++h) {
            const float* xv = x.data() + (t * n_head + h) * c.head_dim;
            const float* yv = y.data() + (t * n_head + h) * c.head_dim;
            for (int64_t i = 0; i < c.n_rot / 2; ++i) {
              const double ff = c.with_factors ? factors[i] : 1.0;
              const double extrap =
                  pos[t] * std::pow(double{c.base}, -2.0 * i / double(c.n_rot)) / ff;
              // YaRN: the weight of the unscaled angle falls from 1 at pair 3 to 0 at 11.
              const double mix =
                  c.ext_factor * (1.0 - std::clamp((static_cast<double>(i) - 3.0) / 8.0, 0.0, 1.0));
              const double theta = c.scale * extrap * (1.0 - mix) + extrap * mix;
              // The pair's two indices: adjacent (normal) or half a rotation apart (neox).
              const int64_t i0 = neox ? i : 2 * i;
              const int64_t i1 = neox ? i + c.n_rot / 2 : 2 * i + 1;
              const double m = c.attn_factor;  // scales the rotated pair only
              const double r0 = m * (xv[i0] * std::cos(theta) - xv[i1] * std::sin(theta));
              const double r1 = m * (xv[i0] * std::sin(theta) + xv[i1] * std::cos(theta));
              const double tol =
                  2e-6 * m * (1.0 + pos[t]) * (std::fabs(xv[i0]) + std::fabs(xv[i1]));
              EXPECT_NEAR(yv[i0], r0, tol) << "t " << t << " pair " << i;
              EXPECT_NEAR(yv[i1], r1, tol) << "t " << t << " pair " << i;
            }
            for (int64_t d = c.n_rot; d < c.head_dim; ++d) EXPECT_EQ(yv[d], xv[d]);
          }
        }
      }
    }
  }
}

// Naive attention in double over dequantized cache rows: all scores (soft-capped when
// softcap > 0), softmax, weighted sum.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t n_tokens, int64_t pos0,
                                    int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                    float scale, bool round_q, float softcap = 0.0f) {
  std::vector<double> out(static_cast<size_t>(n_tokens * n_head * head_dim));
  const int64_t kv_row = n_head_kv * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / (n_head / n_head_kv);
      const int64_t n_kv = pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n_kv));
      double mx = -1e300;
      for (int64_t j = 0; j < n_kv; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
          float qd = q[(t * n_head + h) * head_dim + d];
          if (round_q) qd = fp16_to_fp32(fp32_to_fp16(qd));
          dot += double{qd} * k[j * kv_row + kvh * head_dim + d];
        }
        s[j] = softcap > 0.0f ? softcap * std::tanh(dot * scale / softcap) : dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < n_kv; ++j) acc += s[j] * v[j * kv_row + kvh * head_dim + d];
        out[(t * n_head + h) * head_dim + d] = acc / sum;
      }
    }
  }
  return out;
}

TEST(BackendOps, AttentionGroupedQueryMatchesNaiveSoftmax) {
  kernels::CpuBackend be(3);
  kernels::CpuBackend be1(1);
  const int64_t n_ctx = 300;
  for (DType cache_type : {DType::kF32, DType::kF16}) {
    for (int64_t head_dim : {int64_t{4}, int64_t{8}, int64_t{64}}) {
      for (int64_t n_head_kv : {int64_t{1}, int64_t{2}, int64_t{8}}) {
        for (int64_t n_tokens : {int64_t{1}, int64_t{7}, int64_t{33}}) {
          for (int64_t pos0 : {int64_t{0}, int64_t{31}, int64_t{255}}) {
            const int64_t n_head = 8;
            SCOPED_TRACE(testing::Message()
                         << dtype_name(cache_type) << " head_dim " << head_dim << " n_head_kv "
                         << n_head_kv << " n_tokens " << n_tokens << " pos0 " << pos0);
            const int64_t kv_row = n_head_kv * head_dim;
            const int64_t n_kv = pos0 + n_tokens;
            const size_t elem = cache_type == DType::kF16 ? 2 : 4;
            std::vector<uint8_t> kbuf(static_cast<size_t>(n_ctx * kv_row) * elem);
            std::vector<uint8_t> vbuf(kbuf.size());
            KvLayerView cache{cache_type, cache_type, kbuf.data(), vbuf.data(),
                              n_ctx,      n_head_kv,  head_dim};
            // Large q makes scores of tens: the online softmax must not overflow.
            const std::vector<float> kf = random_floats(static_cast<size_t>(n_kv * kv_row), 11);
            const std::vector<float> vf = random_floats(static_cast<size_t>(n_kv * kv_row), 12);
            const std::vector<float> q =
                random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), 13, 4.0f);
            // Rows before pos0 in one store, the batch's own rows in another.
            if (pos0 > 0) be.kv_store(cache, 0, pos0, kf.data(), vf.data());
            be.kv_store(cache, pos0, n_tokens, kf.data() + pos0 * kv_row,
                        vf.data() + pos0 * kv_row);
            // What the cache holds, widened.
            std::vector<float> kc(kf.size());
            std::vector<float> vc(vf.size());
            dequantize_row(cache_type, kbuf.data(), kc.data(), static_cast<int64_t>(kc.size()));
            dequantize_row(cache_type, vbuf.data(), vc.data(), static_cast<int64_t>(vc.size()));
            for (size_t i = 0; i < kf.size(); ++i) {
              const float expect_k =
                  cache_type == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(kf[i])) : kf[i];
              ASSERT_EQ(kc[i], expect_k) << "kv_store element " << i;
            }
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            AttentionParams p{n_head, n_head_kv, head_dim, scale};
            std::vector<float> out(q.size(), kNaN);
            be.attention(q.data(), n_tokens, pos0, cache, p, out.data());
            const std::vector<double> ref =
                naive_attention(q, kc, vc, n_tokens, pos0, n_head, n_head_kv, head_dim, scale,
                                cache_type == DType::kF16);
            double num = 0.0;
            double den = 0.0;
            for (size_t i = 0; i < out.size(); ++i) {
              num += (out[i] - ref[i]) * (out[i] - ref[i]);
              den += ref[i] * ref[i];
            }
            // F32: float rounding only. F16: the output accumulator is F16, as in llama.cpp.
            EXPECT_LT(num / den, cache_type == DType::kF32 ? 1e-11 : 2e-6);
            // Thread count and token batching do not change a bit.
            std::vector<float> out1(q.size(), kNaN);
            be1.attention(q.data(), n_tokens, pos0, cache, p, out1.data());
            EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)), 0);
            const int64_t q_row = n_head * head_dim;
            std::vector<float> last(static_cast<size_t>(q_row), kNaN);
            be.attention(q.data() + (n_tokens - 1) * q_row, 1, pos0 + n_tokens - 1, cache, p,
                         last.data());
            EXPECT_EQ(std::memcmp(last.data(), out.data() + (n_tokens - 1) * q_row,
                                  last.size() * sizeof(float)),
                      0);
          }
        }
      }
    }
  }
}

// Gemma 2's attention logit soft-cap, through the backend: short reads, reads in chunks
// (more than 256 rows, whose softmax states are merged) and a sliding window's ring. The
// cap (2) bends the scores of tens that the large q gives, so an ignored cap fails by far.
TEST(BackendOps, AttentionSoftCapMatchesNaiveSoftmax) {
  kernels::CpuBackend be(2);
  const int64_t n_head = 4, n_head_kv = 2, head_dim = 64, kv_row = n_head_kv * head_dim;
  for (DType cache_type : {DType::kF32, DType::kF16}) {
    for (int64_t pos0 : {int64_t{0}, int64_t{40}, int64_t{600}}) {
      const int64_t n_tokens = 3;
      const int64_t n_kv = pos0 + n_tokens;
      SCOPED_TRACE(testing::Message() << dtype_name(cache_type) << " pos0 " << pos0);
      const size_t elem = cache_type == DType::kF16 ? 2 : 4;
      std::vector<uint8_t> kbuf(static_cast<size_t>(n_kv * kv_row) * elem);
      std::vector<uint8_t> vbuf(kbuf.size());
      KvLayerView cache{cache_type, cache_type, kbuf.data(), vbuf.data(),
                        n_kv,       n_head_kv,  head_dim};
      const std::vector<float> kf = random_floats(static_cast<size_t>(n_kv * kv_row), 31);
      const std::vector<float> vf = random_floats(static_cast<size_t>(n_kv * kv_row), 32);
      const std::vector<float> q =
          random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), 33, 4.0f);
      be.kv_store(cache, 0, n_kv, kf.data(), vf.data());
      std::vector<float> kc(kf.size());
      std::vector<float> vc(vf.size());
      dequantize_row(cache_type, kbuf.data(), kc.data(), static_cast<int64_t>(kc.size()));
      dequantize_row(cache_type, vbuf.data(), vc.data(), static_cast<int64_t>(vc.size()));
      AttentionParams p{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float{head_dim})};
      p.softcap = 2.0f;
      std::vector<float> out(q.size(), kNaN);
      be.attention(q.data(), n_tokens, pos0, cache, p, out.data());
      const bool f16 = cache_type == DType::kF16;
      for (const float cap : {p.softcap, 0.0f}) {
        const std::vector<double> ref = naive_attention(q, kc, vc, n_tokens, pos0, n_head,
                                                        n_head_kv, head_dim, p.scale, f16, cap);
        double num = 0.0;
        double den = 0.0;
        for (size_t i = 0; i < out.size(); ++i) {
          num += (out[i] - ref[i]) * (out[i] - ref[i]);
          den += ref[i] * ref[i];
        }
        // Capped: F32 within float rounding (tanhf adds an ulp or two to scores within
        // +-2), as AttentionGroupedQueryMatchesNaiveSoftmax. F16: the capped softmax is flat,
        // so every row adds to the F16 accumulator (llama.cpp's numerics) about equally, and
        // its roundings (2^-12 rms of a sum ~ sqrt(j) at row j) add up to an nmse near
        // n / 6 * 2^-24 = 1e-8 n: 4.9e-6 measured at 603 rows, 2e-8 n allowed. Uncapped: far.
        if (cap > 0.0f) {
          EXPECT_LT(num / den, f16 ? std::max(2e-6, 2e-8 * static_cast<double>(n_kv)) : 1e-11);
        } else {
          EXPECT_GT(num / den, 1e-2);
        }
      }
    }
  }
}

TEST(BackendOps, SwigluAndAdd) {
  kernels::CpuBackend be(2);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{255},
                    int64_t{70000}}) {
    const std::vector<float> g = random_floats(static_cast<size_t>(n), 21, 4.0f);
    const std::vector<float> u = random_floats(static_cast<size_t>(n), 22);
    std::vector<float> out(static_cast<size_t>(n), kNaN);
    be.swiglu(g.data(), u.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
      ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "n " << n << " i " << i;
    }
    std::vector<float> sum(static_cast<size_t>(n), kNaN);
    be.add(g.data(), u.data(), n, sum.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], g[i] + u[i]);
    std::vector<float> acc = g;
    be.add(acc.data(), u.data(), n, acc.data());
    EXPECT_EQ(std::memcmp(acc.data(), sum.data(), sum.size() * sizeof(float)), 0);
  }
}

// An element's swiglu is the same bits wherever it lies in the buffer: the rows of a batch
// (n_tokens rows of n_ff) each as the row alone, whatever n_ff (172: stories260K's, 37), and
// every element as itself alone, on every ISA of the host. AVX2 once sent the last n % 8
// elements through std::exp, so a row after one of 172 elements took different bits.
TEST(BackendOps, SwigluOfAnElementDoesNotDependOnWhereItLies) {
  for (kernels::Isa isa : kernels::host_isas()) {
    SCOPED_TRACE(kernels::isa_name(isa));
    kernels::CpuBackend be(1, isa);
    for (int64_t n_ff : {int64_t{172}, int64_t{37}}) {
      constexpr int64_t kRows = 9;
      const auto n = static_cast<size_t>(kRows * n_ff);
      const std::vector<float> g = random_floats(n, 23, 4.0f);
      const std::vector<float> u = random_floats(n, 24);
      std::vector<float> batch(n, kNaN);
      be.swiglu(g.data(), u.data(), kRows * n_ff, batch.data());
      for (int64_t r = 0; r < kRows; ++r) {
        std::vector<float> row(static_cast<size_t>(n_ff), kNaN);
        be.swiglu(g.data() + r * n_ff, u.data() + r * n_ff, n_ff, row.data());
        ASSERT_EQ(std::memcmp(row.data(), batch.data() + r * n_ff, row.size() * sizeof(float)), 0)
            << "n_ff " << n_ff << " row " << r;
      }
      for (size_t i = 0; i < n; ++i) {
        float alone = kNaN;
        be.swiglu(&g[i], &u[i], 1, &alone);
        ASSERT_EQ(std::memcmp(&alone, &batch[i], sizeof(float)), 0) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace qrun
