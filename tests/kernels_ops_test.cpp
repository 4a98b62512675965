// The non-matmul op kernels of every SIMD ISA this host runs (attention over F32 and F16
// caches, RMS norm, SwiGLU, add, F32 -> F16) against their generic references, on awkward
// lengths (1, 7, 31, 32, 33, 255, 4097), attention over head_dim 64, 128 and 256, and 40,
// 37 and 1 (tails after every vector width: 16/8/4 lanes, 64/32/16-element q.k steps),
// n_kv 1..300 (within, at and across 32-row tiles) and 1..12 query heads per KV head
// (GQA ratios, and groups of 8 split in chunks), into NaN-prefilled outputs with gaps.
// Tolerances: add and to_f16 exact; rms_norm 1e-6 relative per element (the double sum
// differs only in order); swiglu 1e-6 relative (polynomial exp) plus 1e-30 absolute;
// attention per head normalized MSE 1e-10 (F32 cache: float vs double q.k) or 1e-6 (F16
// cache: a last-bit score difference can flip one F16 rounding of the accumulator).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/fp16.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kLengths[] = {1, 7, 31, 32, 33, 255, 4097};

std::vector<Isa> simd_isas() {
  std::vector<Isa> out = host_isas();
  std::erase(out, Isa::kGeneric);
  return out;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  for (size_t i = 3; i < n; i += 97) v[i] *= 12.0f;  // outliers, as real activations have
  return v;
}

bool close_rel(float got, float ref, double rel, double abs) {
  return std::fabs(double{got} - ref) <= rel * std::fabs(double{ref}) + abs;
}

// got[0..n) against ref[0..n) elementwise; got[n] (a guard) must still be NaN.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t n,
                  double rel, double abs) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (!close_rel(got[u], ref[u], rel, abs) && ++bad <= 3) {
      ADD_FAILURE() << "element " << i << ": " << got[u] << " vs " << ref[u];
    }
  }
  EXPECT_TRUE(std::isnan(got[static_cast<size_t>(n)])) << "wrote past the end";
}

TEST(KernelsOps, RmsNormMatchesGeneric) {
  const CpuKernels& g = cpu_kernels(Isa::kGeneric);
  for (Isa isa : simd_isas()) {
    for (int64_t n : kLengths) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " n " << n);
      const std::vector<float> x = random_floats(static_cast<size_t>(n), 10 + n, 1.5f);
      const std::vector<float> w = random_floats(static_cast<size_t>(n), 20 + n, 0.3f);
      std::vector<float> ref(static_cast<size_t>(n) + 1, kNaN);
      std::vector<float> got(static_cast<size_t>(n) + 1, kNaN);
      g.rms_norm_row(x.data(), w.data(), n, 1e-5f, ref.data());
      cpu_kernels(isa).rms_norm_row(x.data(), w.data(), n, 1e-5f, got.data());
      expect_close(got, ref, n, 1e-6, 0.0);
    }
  }
}

TEST(KernelsOps, SwigluMatchesGeneric) {
  const CpuKernels& g = cpu_kernels(Isa::kGeneric);
  for (Isa isa : simd_isas()) {
    for (int64_t n : kLengths) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " n " << n);
      // Gates up to about +-100 with the outliers: exp(-g) overflows on one side.
      std::vector<float> gate = random_floats(static_cast<size_t>(n), 30 + n, 3.0f);
      const std::vector<float> up = random_floats(static_cast<size_t>(n), 40 + n, 1.0f);
      std::vector<float> ref(static_cast<size_t>(n) + 1, kNaN);
      std::vector<float> got(static_cast<size_t>(n) + 1, kNaN);
      g.swiglu(gate.data(), up.data(), n, ref.data());
      cpu_kernels(isa).swiglu(gate.data(), up.data(), n, got.data());
      expect_close(got, ref, n, 1e-6, 1e-30);
    }
  }
}

// GELU-gated: gelu(gate) * up through llama.cpp's F16 table: the tanh formula in double at
// the gate rounded to F16, within the F16 rounding of GELU's value (relative 2^-11, so
// 1e-3 with the float evaluation) plus 6e-7 absolute: in GELU's negative tail llama.cpp's
// float formula cancels in 1 + tanh, an error of 0.5 |x| 2^-23 <= 6e-7 for |x| < 10;
// x past +-10 as documented; the same on every ISA, in place too.
TEST(KernelsOps, GegluFollowsTheTanhFormula) {
  const int64_t n = 4097;
  std::vector<float> gate = random_floats(static_cast<size_t>(n), 91, 3.0f);
  const std::vector<float> up = random_floats(static_cast<size_t>(n), 92, 1.0f);
  gate[0] = 10.0f;
  gate[1] = 250.0f;
  gate[2] = -10.0f;
  gate[3] = -300.0f;
  gate[4] = 0.0f;
  std::vector<float> want(static_cast<size_t>(n) + 1, kNaN);
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const double x = fp16_to_fp32(fp32_to_fp16(gate[i]));
    const double gelu =
        gate[i] >= 10.0f
            ? gate[i]
            : (gate[i] <= -10.0f
                   ? 0.0
                   : 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    want[i] = static_cast<float>(gelu * up[i]);
  }
  for (Isa isa : host_isas()) {
    SCOPED_TRACE(isa_name(isa));
    CpuBackend backend(2, isa);
    std::vector<float> got(static_cast<size_t>(n) + 1, kNaN);
    backend.geglu(gate.data(), up.data(), n, got.data());
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      EXPECT_TRUE(close_rel(got[i], want[i], 1e-3, 6e-7 * std::fabs(up[i])))
          << i << ": gelu(" << gate[i] << ") * " << up[i] << " = " << got[i] << ", want "
          << want[i];
    }
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(n)])) << "wrote past the end";
    std::vector<float> in_place(gate.begin(), gate.end());
    backend.geglu(in_place.data(), up.data(), n, in_place.data());
    EXPECT_EQ(std::memcmp(in_place.data(), got.data(), static_cast<size_t>(n) * sizeof(float)), 0);
  }
}

// scale is one multiply (exact against x * s); softcap is cap * tanh(x / cap) to float
// rounding (relative 1e-6), saturating at +-cap for large x.
TEST(KernelsOps, ScaleAndSoftcap) {
  const int64_t n = 255;
  std::vector<float> x = random_floats(static_cast<size_t>(n), 93, 20.0f);
  x[0] = 1e6f;
  x[1] = -1e6f;
  const float cap = 30.0f;
  for (Isa isa : host_isas()) {
    SCOPED_TRACE(isa_name(isa));
    CpuBackend backend(2, isa);
    std::vector<float> scaled(x.size());
    std::vector<float> capped(x.size());
    backend.scale(x.data(), n, 0.125f, scaled.data());
    backend.softcap(x.data(), n, cap, capped.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(scaled[i], x[i] * 0.125f) << i;
      const double want = cap * std::tanh(double{x[i]} / cap);
      EXPECT_TRUE(close_rel(capped[i], static_cast<float>(want), 1e-6, 0.0)) << i;
    }
    EXPECT_EQ(capped[0], cap);
    EXPECT_EQ(capped[1], -cap);
  }
}

TEST(KernelsOps, AddIsExactAndMayAlias) {
  for (Isa isa : simd_isas()) {
    for (int64_t n : kLengths) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " n " << n);
      const std::vector<float> a = random_floats(static_cast<size_t>(n), 50 + n, 1.0f);
      const std::vector<float> b = random_floats(static_cast<size_t>(n), 60 + n, 1.0f);
      std::vector<float> ref(static_cast<size_t>(n) + 1, kNaN);
      std::vector<float> got(static_cast<size_t>(n) + 1, kNaN);
      cpu_kernels(Isa::kGeneric).add(a.data(), b.data(), n, ref.data());
      cpu_kernels(isa).add(a.data(), b.data(), n, got.data());
      expect_close(got, ref, n, 0.0, 0.0);
      std::vector<float> acc = a;  // out == a, as the residual add calls it
      cpu_kernels(isa).add(acc.data(), b.data(), n, acc.data());
      EXPECT_EQ(std::memcmp(acc.data(), ref.data(), static_cast<size_t>(n) * sizeof(float)), 0);
    }
  }
}

TEST(KernelsOps, ToF16IsExact) {
  for (Isa isa : simd_isas()) {
    for (int64_t n : kLengths) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " n " << n);
      std::vector<float> src = random_floats(static_cast<size_t>(n), 70 + n, 4.0f);
      // Halfway cases, subnormal halves, overflow to inf, infinities and a NaN.
      const float special[] = {1.0f + 1.0f / 2048,
                               1.0f + 3.0f / 2048,
                               3e-6f,
                               -7e-8f,
                               65519.0f,
                               65520.0f,
                               1e9f,
                               -1e9f,
                               std::numeric_limits<float>::infinity(),
                               kNaN,
                               0.0f,
                               -0.0f};
      for (size_t i = 0; i < src.size(); i += 3) src[i] = special[(i / 3) % std::size(special)];
      std::vector<uint16_t> ref(static_cast<size_t>(n) + 1, 0xabcd);
      std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcd);
      cpu_kernels(Isa::kGeneric).to_f16(src.data(), ref.data(), n);
      cpu_kernels(isa).to_f16(src.data(), got.data(), n);
      EXPECT_EQ(got, ref);
    }
  }
}

// One KV head's slice of a cache with n_head_kv = 3 heads per row (the slice in the
// middle), so rows are 3 * head_dim elements apart.
struct Cache {
  std::vector<float> k32, v32;
  std::vector<uint16_t> k16, v16;
  int64_t stride = 0;
};

Cache make_cache(int64_t n_kv, int64_t head_dim, uint32_t seed) {
  Cache c;
  c.stride = 3 * head_dim;
  const size_t n = static_cast<size_t>(n_kv * c.stride);
  c.k32 = random_floats(n, seed, 1.0f);
  c.v32 = random_floats(n, seed + 1, 1.0f);
  for (float x : c.k32) c.k16.push_back(fp32_to_fp16(x));
  for (float x : c.v32) c.v16.push_back(fp32_to_fp16(x));
  return c;
}

// Normalized MSE of each head's output (out rows out_stride apart, NaN in the gaps). An
// output is a weighted mean of V rows of unit scale; where it cancels to near zero (short
// heads, head_dim 1 above all) the error is measured against 1e-3 of that scale instead.
void expect_heads_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t n_q,
                        int64_t head_dim, int64_t out_stride, double max_nmse) {
  for (int64_t h = 0; h < n_q; ++h) {
    double err = 0.0;
    double mag = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      const size_t u = static_cast<size_t>(h * out_stride + d);
      const double diff = double{got[u]} - ref[u];
      err += std::isnan(diff) ? 1e30 : diff * diff;
      mag += double{ref[u]} * ref[u];
    }
    mag = std::max(mag, 1e-3 * static_cast<double>(head_dim));
    EXPECT_LE(err / mag, max_nmse) << "head " << h;
    for (int64_t d = head_dim; d < out_stride; ++d) {
      EXPECT_TRUE(std::isnan(got[static_cast<size_t>(h * out_stride + d)])) << "gap written";
    }
  }
}

// The partial form of an attend kernel (AttendFn with `partial`) gives, for each head, the
// accumulator that its plain form divides by l, and that l, the same bits: acc * (1 / l)
// equals the plain result exactly, and m is the largest of the head's scores (finite).
void expect_partial_consistent(AttendFn fn, const std::vector<float>& q, int64_t q_stride,
                               int64_t n_q, const KvRows& rows, int64_t head_dim, KqScale scale,
                               const std::vector<float>& plain, int64_t out_stride) {
  std::vector<float> acc(plain.size(), kNaN);
  std::vector<float> ml(static_cast<size_t>(2 * n_q), kNaN);
  fn(q.data(), q_stride, n_q, rows, head_dim, scale, acc.data(), out_stride, ml.data());
  for (int64_t h = 0; h < n_q; ++h) {
    const float m = ml[static_cast<size_t>(2 * h)];
    const float l = ml[static_cast<size_t>(2 * h + 1)];
    ASSERT_TRUE(std::isfinite(m)) << "head " << h;
    ASSERT_GE(l, 1.0f) << "head " << h;  // the row at the max weighs 1
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < head_dim; ++d) {
      const size_t i = static_cast<size_t>(h * out_stride + d);
      ASSERT_EQ(acc[i] * inv, plain[i]) << "head " << h << " element " << d;
    }
  }
}

TEST(KernelsOps, AttentionMatchesGeneric) {
  const int64_t head_dims[] = {64, 128, 256, 40, 37, 1};
  const int64_t n_kvs[] = {1, 2, 7, 31, 32, 33, 64, 100, 300};
  const int64_t n_qs[] = {1, 2, 3, 4, 5, 6, 7, 8, 12};
  uint32_t seed = 1000;
  for (Isa isa : simd_isas()) {
    for (int64_t head_dim : head_dims) {
      for (int64_t n_kv : n_kvs) {
        const Cache c = make_cache(n_kv, head_dim, ++seed);
        for (int64_t n_q : n_qs) {
          for (bool f16 : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << (f16 ? " f16" : " f32") << " head_dim " << head_dim
                         << " n_kv " << n_kv << " n_q " << n_q << " seed " << seed + 1);
            const int64_t q_stride = head_dim + 3;
            const int64_t out_stride = head_dim + 5;
            const std::vector<float> q =
                random_floats(static_cast<size_t>(n_q * q_stride), ++seed, 1.0f);
            // A peaky softmax for half the cases, so the running max moves a lot; and, over
            // an F32 cache, half of each kind with Gemma 2's logit soft-cap, at 1.5 so that it
            // bends most scores. (The cap is applied to the scores in the walk that F16 caches
            // share; over an F16 cache it makes the softmax flat, so every row's F16 rounding
            // of the accumulator counts, and the ISAs' other orders of those roundings add up
            // past the F16 bound with hundreds of rows: 3.2e-6 on NEON at 300 rows.)
            const KqScale scale((seed % 2 ? 1.0f : 4.0f) / std::sqrt(static_cast<float>(head_dim)),
                                !f16 && seed % 4 >= 2 ? 1.5f : 0.0f);
            const void* k = f16 ? static_cast<const void*>(c.k16.data() + head_dim)
                                : static_cast<const void*>(c.k32.data() + head_dim);
            const void* v = f16 ? static_cast<const void*>(c.v16.data() + head_dim)
                                : static_cast<const void*>(c.v32.data() + head_dim);
            std::vector<float> ref(static_cast<size_t>(n_q * out_stride), kNaN);
            std::vector<float> got(static_cast<size_t>(n_q * out_stride), kNaN);
            const AttendFn ref_fn =
                f16 ? cpu_kernels(Isa::kGeneric).attend_f16 : cpu_kernels(Isa::kGeneric).attend_f32;
            const AttendFn fn = f16 ? cpu_kernels(isa).attend_f16 : cpu_kernels(isa).attend_f32;
            // Read as a ring too: from the middle row, wrapping past the last.
            for (int64_t first : {int64_t{0}, n_kv / 2}) {
              const KvRows rows{k, v, c.stride, first, n_kv, n_kv};
              ref_fn(q.data(), q_stride, n_q, rows, head_dim, scale, ref.data(), out_stride,
                     nullptr);
              fn(q.data(), q_stride, n_q, rows, head_dim, scale, got.data(), out_stride, nullptr);
              expect_heads_close(got, ref, n_q, head_dim, out_stride, f16 ? 1e-6 : 1e-10);
              expect_partial_consistent(fn, q, q_stride, n_q, rows, head_dim, scale, got,
                                        out_stride);
            }
          }
        }
      }
    }
  }
}

// A ring read from row `first` gives the same bits as the same rows laid out in order.
TEST(KernelsOps, RingRowsReadInPositionOrder) {
  const int64_t head_dim = 37, n_kv = 33, n_read = 20, first = 25;
  const Cache c = make_cache(n_kv, head_dim, 77);
  Cache flat;
  flat.stride = c.stride;
  const KvRows ring{c.k32.data(), c.v32.data(), c.stride, first, n_read, n_kv};
  for (int64_t j = 0; j < n_read; ++j) {
    const auto row = c.k32.begin() + ring.row(j) * c.stride;
    flat.k32.insert(flat.k32.end(), row, row + c.stride);
    const auto vrow = c.v32.begin() + ring.row(j) * c.stride;
    flat.v32.insert(flat.v32.end(), vrow, vrow + c.stride);
  }
  EXPECT_EQ(ring.row(n_kv - first), 0);  // the read wraps
  const KvRows in_order{flat.k32.data(), flat.v32.data(), flat.stride, 0, n_read, n_read};
  const std::vector<float> q = random_floats(static_cast<size_t>(3 * head_dim), 78, 1.0f);
  for (Isa isa : host_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> a(q.size()), b(q.size());
    cpu_kernels(isa).attend_f32(q.data(), head_dim, 3, ring, head_dim, 0.2f, a.data(), head_dim,
                                nullptr);
    cpu_kernels(isa).attend_f32(q.data(), head_dim, 3, in_order, head_dim, 0.2f, b.data(), head_dim,
                                nullptr);
    EXPECT_EQ(a, b);
  }
}

// Sliding-window attention through CpuBackend, against a direct softmax over each token's
// window in double: the cache a full-context buffer, and a ring of window - 1 + batch rows
// (what KvCache allocates for a local layer), fed batch after batch across several wraps.
// F32 cache, so the only difference is float against double (normalized MSE 1e-10).
TEST(KernelsOps, SlidingWindowAttentionMatchesDirectSoftmax) {
  const int64_t n_head = 4, n_head_kv = 2, head_dim = 40, window = 7, n_pos = 61;
  const int64_t batches[] = {5, 1, 9, 1, 1, 9, 2, 9, 3, 9, 1, 9, 2};  // sums to 61
  const int64_t max_batch = 9;
  const int64_t n_kv_row = n_head_kv * head_dim;
  const float scale = 0.3f;
  const std::vector<float> kin = random_floats(static_cast<size_t>(n_pos * n_kv_row), 81, 1.0f);
  const std::vector<float> vin = random_floats(static_cast<size_t>(n_pos * n_kv_row), 82, 1.0f);
  const std::vector<float> q =
      random_floats(static_cast<size_t>(n_pos * n_head * head_dim), 83, 1.0f);
  // want: [n_pos, n_head, head_dim]
  std::vector<float> want(q.size());
  for (int64_t p = 0; p < n_pos; ++p) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / (n_head / n_head_kv);
      const float* qh = q.data() + (p * n_head + h) * head_dim;
      const int64_t lo = std::max<int64_t>(0, p - window + 1);
      std::vector<double> w;
      double max = -1e300;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
          dot += double{qh[d]} * kin[static_cast<size_t>(j * n_kv_row + hk * head_dim + d)];
        }
        w.push_back(dot * scale);
        max = std::max(max, w.back());
      }
      double sum = 0.0;
      for (double& x : w) sum += (x = std::exp(x - max));
      for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = lo; j <= p; ++j) {
          acc += w[static_cast<size_t>(j - lo)] *
                 vin[static_cast<size_t>(j * n_kv_row + hk * head_dim + d)];
        }
        want[static_cast<size_t>((p * n_head + h) * head_dim + d)] = static_cast<float>(acc / sum);
      }
    }
  }
  const AttentionParams params{n_head, n_head_kv, head_dim, scale, window};
  for (Isa isa : host_isas()) {
    for (int64_t n_rows : {n_pos, window - 1 + max_batch}) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " rows " << n_rows);
      std::vector<float> kbuf(static_cast<size_t>(n_rows * n_kv_row));
      std::vector<float> vbuf(kbuf.size());
      const KvLayerView cache{DType::kF32, DType::kF32, kbuf.data(), vbuf.data(),
                              n_rows,      n_head_kv,   head_dim};
      CpuBackend backend(2, isa);
      std::vector<float> got(q.size(), kNaN);
      int64_t pos = 0;
      for (const int64_t n : batches) {
        backend.kv_store(cache, pos, n, kin.data() + pos * n_kv_row, vin.data() + pos * n_kv_row);
        backend.attention(q.data() + pos * n_head * head_dim, n, pos, cache, params,
                          got.data() + pos * n_head * head_dim);
        pos += n;
      }
      ASSERT_EQ(pos, n_pos);
      expect_heads_close(got, want, n_pos * n_head, head_dim, head_dim, 1e-10);
    }
  }
}

// Through CpuBackend: prefill of 37 tokens after 20 cached ones, then one decode token,
// 8 query heads on 2 KV heads, with 1, 2 and 7 threads (7 cut the decode token's groups
// into slices of query heads), against the generic backend. The split never changes a
// head's result: every thread count gives the same bits as one thread.
TEST(KernelsOps, BackendAttentionMatchesGenericBackend) {
  const int64_t n_head = 8, n_head_kv = 2, head_dim = 64, n_ctx = 64;
  const int64_t n_kv_row = n_head_kv * head_dim;
  const std::vector<float> kin = random_floats(static_cast<size_t>(n_ctx * n_kv_row), 5, 1.0f);
  const std::vector<float> vin = random_floats(static_cast<size_t>(n_ctx * n_kv_row), 6, 1.0f);
  const AttentionParams params{n_head, n_head_kv, head_dim, 0.125f};
  const int64_t batches[][2] = {{20, 37}, {57, 1}};  // pos0, n_tokens
  for (DType type : {DType::kF32, DType::kF16}) {
    std::vector<uint8_t> kbuf(row_size(type, n_ctx * n_kv_row)), vbuf(kbuf.size());
    const KvLayerView cache{type, type, kbuf.data(), vbuf.data(), n_ctx, n_head_kv, head_dim};
    CpuBackend generic(1, Isa::kGeneric);
    generic.kv_store(cache, 0, n_ctx, kin.data(), vin.data());
    for (const auto& [pos0, n_tokens] : batches) {
      const std::vector<float> q =
          random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), 7, 1.0f);
      std::vector<float> ref(q.size(), kNaN);
      generic.attention(q.data(), n_tokens, pos0, cache, params, ref.data());
      for (Isa isa : simd_isas()) {
        std::vector<float> one_thread;
        for (int threads : {1, 2, 7}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " pos0 "
                                          << pos0 << " threads " << threads);
          CpuBackend backend(threads, isa);
          // The ISA's F16 store must give the same cache bytes.
          std::vector<uint8_t> k2(kbuf.size()), v2(kbuf.size());
          const KvLayerView cache2{type, type, k2.data(), v2.data(), n_ctx, n_head_kv, head_dim};
          backend.kv_store(cache2, 0, n_ctx, kin.data(), vin.data());
          EXPECT_EQ(k2, kbuf);
          EXPECT_EQ(v2, vbuf);
          std::vector<float> got(q.size(), kNaN);
          backend.attention(q.data(), n_tokens, pos0, cache2, params, got.data());
          expect_heads_close(got, ref, n_tokens * n_head, head_dim, head_dim,
                             type == DType::kF16 ? 1e-6 : 1e-10);
          if (threads == 1) one_thread = got;
          EXPECT_EQ(std::memcmp(got.data(), one_thread.data(), got.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace qrun::kernels
