// CudaBackend (kernels/cuda/cuda_backend.h) under the SIMT emulator, through the Backend
// interface, against the CPU backend's scalar references: the glue (uploads, weight and KV
// mirrors, scratch reuse, in-place calls) on top of the kernels their own tests check.
// Tolerances: as the kernel tests (cuda_emu_*_test.cpp) state; here the emulated
// element-wise ops, RMS norm and RoPE are bit-exact, matmul is within its activation
// quantization bound, attention within F16 precision of the CPU's F16 accumulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/random_data.h"

namespace qrun::kernels::cuda {
namespace {

using test::random_vector;

// Under the emulator the element-wise ops, norm and RoPE equal the CPU's bit for bit. On a
// GPU (cuda_gpu_backend_test) expf, tanhf, sinf and cosf may differ by a few float ulps, and
// GELU's F16 rounding then by one F16 ulp (2^-10 relative): `gpu_ulps` ulps of |want|,
// plus as many of `floor` for outputs that cancel to near zero (RoPE's x0 c - x1 s).
void expect_matches(const std::vector<float>& got, const std::vector<float>& want, float gpu_ulps,
                    float floor = 0.0f) {
#if defined(QRUN_CUDA_GPU_TEST)
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol =
        gpu_ulps * std::numeric_limits<float>::epsilon() * (std::fabs(want[i]) + floor);
    ASSERT_NEAR(got[i], want[i], tol) << i;
  }
#else
  (void)gpu_ulps;
  (void)floor;
  EXPECT_EQ(got, want);
#endif
}

Tensor matrix(DType type, int64_t n_in, int64_t n_out, const void* data) {
  Tensor t;
  t.type = type;
  t.n_dims = 2;
  t.ne = {n_in, n_out, 1, 1};
  t.data = data;
  return t;
}

TEST(CudaEmuBackend, SupportsWhatItHasKernelsFor) {
  CudaBackend b;
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kQ4_K));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kQ4_1));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kQ5_1));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kIQ4_NL));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kIQ4_XS));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kQ2_K));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kQ3_K));
  EXPECT_TRUE(b.supports(Op::kMatMul, DType::kF16));
  EXPECT_FALSE(b.supports(Op::kMatMul, DType::kBF16));
  EXPECT_TRUE(b.supports(Op::kAttention, DType::kF16));
  EXPECT_FALSE(b.supports(Op::kAttention, DType::kF32));
  EXPECT_TRUE(b.supports(Op::kRmsNorm, DType::kF32));
  EXPECT_TRUE(b.supports_paged_kv());
}

// A paged layer (blocks of 16 rows in shuffled order in a pool with spare blocks) holds
// what a contiguous one does: stores, attention (prefill and decode), kv_copy of a block
// into a spare one read through another table, a table edited in place, and kv_to_host,
// against a contiguous layer on the same backend. The same kernels read the same values in the same
// order: the same bits under the emulator. (On the GPU the prefill path's cuBLAS products over the
// gathered rows may differ in rounding from those over the cache's own rows: there within the F16
// weights' rounding, 2^-10 max|v|, as cuda_emu_attention_test.)
TEST(CudaEmuBackend, PagedKvMatchesContiguous) {
  constexpr int64_t kBlockRows = 16, kHeads = 4, kHeadsKv = 2, kHeadDim = 64, kRows = 64;
  constexpr int64_t kRowElems = kHeadsKv * kHeadDim;
  std::vector<int32_t> table = {5, 2, 0, 3};  // pool blocks 1 and 4 are spare
  constexpr int64_t kPoolRows = 6 * kBlockRows;
  std::vector<uint16_t> pk(kPoolRows * kRowElems), pv(pk.size());
  std::vector<uint16_t> ck(kRows * kRowElems), cv(ck.size());
  KvLayerView paged{DType::kF16, DType::kF16, pk.data(), pv.data(), kRows, kHeadsKv, kHeadDim};
  paged.block_table = table.data();
  paged.block_rows = kBlockRows;
  paged.n_storage_rows = kPoolRows;
  const KvLayerView flat{DType::kF16, DType::kF16, ck.data(), cv.data(), kRows, kHeadsKv, kHeadDim};
  const AttentionParams params{kHeads, kHeadsKv, kHeadDim, 0.125f, 0};
  CudaBackend gpu;
  ASSERT_TRUE(gpu.supports_paged_kv());
#if defined(QRUN_CUDA_GPU_TEST)
  const float tol = std::ldexp(1.0f, -10) * 8.0f;  // normal values: |v| < 8
#else
  const float tol = 0.0f;
#endif
  const auto same = [&](const std::vector<float>& a, const std::vector<float>& b,
                        const char* what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (tol == 0.0f) {
        ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << what << ": element " << i;
      } else {
        ASSERT_NEAR(a[i], b[i], tol) << what << ": element " << i;
      }
    }
  };
  int64_t pos = 0;
  uint32_t seed = 100;
  for (const int64_t n : {20, 1, 3, 17}) {  // prefill (from 16 tokens) and decode steps
    const std::vector<float> k = random_vector(n * kRowElems, seed++);
    const std::vector<float> v = random_vector(n * kRowElems, seed++);
    const std::vector<float> q = random_vector(n * kHeads * kHeadDim, seed++);
    gpu.kv_store(paged, pos, n, k.data(), v.data());
    gpu.kv_store(flat, pos, n, k.data(), v.data());
    std::vector<float> want(q.size()), got(q.size());
    gpu.attention(q.data(), n, pos, flat, params, want.data());
    gpu.attention(q.data(), n, pos, paged, params, got.data());
    same(got, want, "attention");
    pos += n;
  }
  // Block 1 of the table (pool block 2, positions 16 .. 31) copied into spare block 4 and
  // read through a table that names the copy.
  gpu.kv_copy(paged, 2 * kBlockRows, 4 * kBlockRows, kBlockRows);
  const std::vector<int32_t> copied = {5, 4, 0, 3};
  KvLayerView other = paged;
  other.block_table = copied.data();
  const std::vector<float> q = random_vector(kHeads * kHeadDim, 7);
  std::vector<float> want(q.size()), got(q.size());
  gpu.attention(q.data(), 1, pos - 1, paged, params, want.data());
  gpu.attention(q.data(), 1, pos - 1, other, params, got.data());
  same(got, want, "attention after kv_copy");
  // The first table edited in place to name the copy too (a cache's table changes at the
  // same address), then positions 16 .. 19 stored anew: into the copy, which both read.
  table[1] = 4;
  const std::vector<float> k = random_vector(4 * kRowElems, 8);
  const std::vector<float> v = random_vector(4 * kRowElems, 9);
  gpu.kv_store(paged, 16, 4, k.data(), v.data());
  gpu.kv_store(flat, 16, 4, k.data(), v.data());
  gpu.attention(q.data(), 1, pos - 1, flat, params, want.data());
  gpu.attention(q.data(), 1, pos - 1, other, params, got.data());
  same(got, want, "attention after a store through the edited table");
  // The rows on the host: the pool's, at the tables' rows, are the contiguous layer's.
  gpu.kv_to_host(paged);
  gpu.kv_to_host(flat);
  for (int64_t r = 0; r < pos; ++r) {
    for (const KvLayerView* view : {&paged, &other}) {
      const auto at = static_cast<ptrdiff_t>(view->storage_row(r) * kRowElems);
      ASSERT_TRUE(
          std::equal(ck.begin() + r * kRowElems, ck.begin() + (r + 1) * kRowElems, pk.begin() + at))
          << "K row " << r;
      ASSERT_TRUE(
          std::equal(cv.begin() + r * kRowElems, cv.begin() + (r + 1) * kRowElems, pv.begin() + at))
          << "V row " << r;
    }
  }
}

TEST(CudaEmuBackend, ElementwiseNormRopeMatchCpu) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  const int64_t n_tokens = 3, n_head = 4, head_dim = 64, n = n_head * head_dim;
  const std::vector<float> a = random_vector(n_tokens * n, 1);
  const std::vector<float> b = random_vector(n_tokens * n, 2);
  const std::vector<float> w = random_vector(n, 3);
  const Tensor wt = matrix(DType::kF32, n, 1, w.data());
  std::vector<float> g(a.size()), c(a.size());
  gpu.rms_norm(a.data(), wt, n_tokens, n, 1e-5f, g.data());
  cpu.rms_norm(a.data(), wt, n_tokens, n, 1e-5f, c.data());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 4e-7f * std::fabs(c[i])) << i;
  gpu.swiglu(a.data(), b.data(), n_tokens * n, g.data());
  cpu.swiglu(a.data(), b.data(), n_tokens * n, c.data());
  expect_matches(g, c, 8.0f);
  gpu.geglu(a.data(), b.data(), n_tokens * n, g.data());
  cpu.geglu(a.data(), b.data(), n_tokens * n, c.data());
  expect_matches(g, c, 8192.0f);
  gpu.softcap(a.data(), n_tokens * n, 1.5f, g.data());
  cpu.softcap(a.data(), n_tokens * n, 1.5f, c.data());
  expect_matches(g, c, 8.0f);
  gpu.scale(a.data(), n_tokens * n, -0.5f, g.data());
  cpu.scale(a.data(), n_tokens * n, -0.5f, c.data());
  EXPECT_EQ(g, c);
  g = a;  // in place
  gpu.add(g.data(), b.data(), n_tokens * n, g.data());
  cpu.add(a.data(), b.data(), n_tokens * n, c.data());
  EXPECT_EQ(g, c);
  const std::vector<int32_t> positions = {5, 6, 900};
  RopeParams p;
  p.n_rot = head_dim;
  p.mode = RopeMode::kNeox;
  g = a;
  c = a;
  gpu.rope(g.data(), n_tokens, n_head, head_dim, positions, p);
  cpu.rope(c.data(), n_tokens, n_head, head_dim, positions, p);
  expect_matches(g, c, 16.0f, 4.0f);
}

TEST(CudaEmuBackend, MatmulAndGetRowsMatchCpu) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  // 2 tokens run MMVQ, 7 the dequantize-and-GEMM path (F16 operands: closer than the
  // CPU's 8-bit activations, so within the same bound).
  for (const auto& [type, n_tokens] :
       {std::pair{DType::kQ4_0, 2}, std::pair{DType::kQ8_0, 2}, std::pair{DType::kQ4_K, 2},
        std::pair{DType::kQ6_K, 2}, std::pair{DType::kQ5_1, 2}, std::pair{DType::kQ4_0, 7},
        std::pair{DType::kQ4_K, 7}, std::pair{DType::kQ4_1, 7}, std::pair{DType::kIQ4_NL, 2},
        std::pair{DType::kIQ4_XS, 2}, std::pair{DType::kIQ4_NL, 7}, std::pair{DType::kIQ4_XS, 7},
        std::pair{DType::kQ2_K, 2}, std::pair{DType::kQ3_K, 2}}) {
    SCOPED_TRACE(std::string(dtype_name(type)) + " x " + std::to_string(n_tokens));
    const int64_t n_in = 512, n_out = 9;
    const TypeTraits& tt = type_traits(type);
    const std::vector<float> wf = random_vector(n_in * n_out, 4);
    std::vector<uint8_t> wq(row_size(type, n_in) * n_out);
    tt.from_float(wf.data(), wq.data(), n_in * n_out);
    const Tensor w = matrix(type, n_in, n_out, wq.data());
    const std::vector<float> x = random_vector(n_in * n_tokens, 5);
    std::vector<float> g(static_cast<size_t>(n_out * n_tokens)), c(g.size());
    for (int rep = 0; rep < 2; ++rep) {  // the second call reads the cached weight copy
      gpu.matmul(w, x.data(), n_tokens, g.data());
      cpu.matmul(w, x.data(), n_tokens, c.data());
      std::vector<float> wd(static_cast<size_t>(n_in));
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
          tt.to_float(w.row(o), wd.data(), n_in);
          // Both sides quantize x to 8 bits with scales <= amax / 127 per block of at most
          // 256: each is within 0.6 * amax / 127 * sum|w| of the exact product.
          double bound = 0.0;
          for (int64_t j = 0; j < n_in; j += 256) {
            float amax = 0.0f, wsum = 0.0f;
            for (int64_t e = j; e < j + 256; ++e) {
              amax = std::max(amax, std::fabs(x[t * n_in + e]));
              wsum += std::fabs(wd[e]);
            }
            bound += 2.0 * 0.6 * amax / 127.0 * wsum;
          }
          // The CPU's Q8_1 blocks (Q4_1, Q5_1) carry s = d * sum(q) in F16, which multiplies
          // the block minimum m (|m| <= the block's largest |w|): half an F16 ulp of it.
          if (tt.vec_dot_type == DType::kQ8_1) {
            for (int64_t j = 0; j < n_in; j += 32) {
              float wmax = 0.0f, xsum = 0.0f;
              for (int64_t e = j; e < j + 32; ++e) {
                wmax = std::max(wmax, std::fabs(wd[e]));
                xsum += std::fabs(x[t * n_in + e]);
              }
              bound += 0x1p-11 * 1.01 * wmax * xsum;
            }
          }
          ASSERT_NEAR(g[t * n_out + o], c[t * n_out + o], bound) << "token " << t << " row " << o;
        }
      }
    }
    std::vector<float> rg(static_cast<size_t>(n_in * 2)), rc(rg.size());
    const std::vector<int32_t> ids = {8, 0};
    gpu.get_rows(w, ids, rg.data());
    cpu.get_rows(w, ids, rc.data());
    EXPECT_EQ(rg, rc);
  }
}

// Other weights later at the same address (a model unloaded and another loaded) must not
// be multiplied through the first one's device copy.
TEST(CudaEmuBackend, NewDataAtAWeightsAddressIsCopiedAgain) {
  CudaBackend gpu;
  const int64_t n_in = 256, n_out = 3;
  std::vector<uint8_t> wq(row_size(DType::kQ8_0, n_in) * n_out);
  const Tensor w = matrix(DType::kQ8_0, n_in, n_out, wq.data());
  const std::vector<float> x = random_vector(n_in, 7);
  std::vector<float> first(n_out), second(n_out), want(n_out);
  for (uint32_t seed : {8u, 9u}) {
    const std::vector<float> wf = random_vector(n_in * n_out, seed);
    quantize_q8_0(wf.data(), wq.data(), n_in * n_out);
    gpu.matmul(w, x.data(), 1, second.data());
    if (seed == 8) first = second;
  }
  CudaBackend fresh;
  fresh.matmul(w, x.data(), 1, want.data());
  EXPECT_EQ(second, want);
  EXPECT_NE(first, second);
}

// One KV cache layer for each backend, and a step through both: random K, V and Q for
// n_tokens at pos stored and attended, the GPU's output checked against the CPU's.
class KvPair {
 public:
  KvPair(int64_t n_rows, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window)
      : row_(n_head_kv * head_dim),
        gk_(static_cast<size_t>(n_rows * row_)),
        gv_(gk_.size()),
        ck_(gk_.size()),
        cv_(gk_.size()),
        params_{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim)),
                window},
        gpu_view_{DType::kF16, DType::kF16, gk_.data(), gv_.data(), n_rows, n_head_kv, head_dim},
        cpu_view_{DType::kF16, DType::kF16, ck_.data(), cv_.data(), n_rows, n_head_kv, head_dim} {}

  void step(int64_t pos, int64_t n_tokens, uint32_t seed) {
    const std::vector<float> k = random_vector(n_tokens * row_, 100 + seed);
    const std::vector<float> v = random_vector(n_tokens * row_, 200 + seed);
    const std::vector<float> q =
        random_vector(n_tokens * params_.n_head * params_.head_dim, 300 + seed);
    gpu_.kv_store(gpu_view_, pos, n_tokens, k.data(), v.data());
    cpu_.kv_store(cpu_view_, pos, n_tokens, k.data(), v.data());
    // The cache lives on the device: the host cache's memory is left as it was.
    ASSERT_EQ(gk_, std::vector<uint16_t>(gk_.size()));
    ASSERT_EQ(gv_, std::vector<uint16_t>(gv_.size()));
    std::vector<float> g(q.size()), c(q.size());
    gpu_.attention(q.data(), n_tokens, pos, gpu_view_, params_, g.data());
    cpu_.attention(q.data(), n_tokens, pos, cpu_view_, params_, c.data());
    // Within F16 precision of the CPU's F16 accumulator (see the file comment).
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 4.0f / 256.0f) << pos << " " << i;
  }

 private:
  int64_t row_;
  std::vector<uint16_t> gk_, gv_, ck_, cv_;
  AttentionParams params_;
  KvLayerView gpu_view_, cpu_view_;
  CudaBackend gpu_;
  CpuBackend cpu_{1, Isa::kGeneric};
};

TEST(CudaEmuBackend, KvStoreAndAttentionDecodeMatchCpu) {
  // A prompt of 5 tokens, then single-token steps past the ring's end (window 40 < 64 rows).
  KvPair kv(64, 8, 2, 128, 40);
  int64_t pos = 0;
  for (int64_t step = 0; step < 8; ++step) {
    const int64_t n_tokens = step == 0 ? 5 : 1;
    ASSERT_NO_FATAL_FAILURE(kv.step(pos, n_tokens, static_cast<uint32_t>(step)));
    pos += n_tokens;
    if (step == 1) pos = 60;  // jump ahead so the later steps wrap the ring
  }
}

// Prompt chunks of 16 tokens and more take the prefill path (matrix products) with the
// scratch the backend sizes for it; the chunks wrap the ring under a window of 40, and a
// decode step reads what they stored.
TEST(CudaEmuBackend, KvStoreAndAttentionPrefillMatchCpu) {
  KvPair kv(64, 8, 2, 64, 40);
  int64_t pos = 0;
  for (const int64_t n_tokens : {24, 20, 20, 20, 1}) {
    ASSERT_NO_FATAL_FAILURE(kv.step(pos, n_tokens, 400 + static_cast<uint32_t>(pos)));
    pos += n_tokens;
  }
}

// Buffers declared as scratch stay on the device for the scope: a chain of ops through
// them equals the CPU's (a matmul after its input changed quantizes it again), their host
// memory is never written, and only the output that lies outside them comes back. After
// end_scratch the same memory is host memory again.
TEST(CudaEmuBackend, ScratchBuffersStayOnTheDeviceForTheScope) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  const int64_t n_in = 256, n_out = 5, n_tokens = 2;
  const std::vector<float> wf = random_vector(n_in * n_out, 11);
  std::vector<uint8_t> wq(row_size(DType::kQ8_0, n_in) * n_out);
  quantize_q8_0(wf.data(), wq.data(), n_in * n_out);
  const Tensor w = matrix(DType::kQ8_0, n_in, n_out, wq.data());
  const std::vector<float> norm = random_vector(n_in, 12);
  const Tensor norm_w = matrix(DType::kF32, n_in, 1, norm.data());
  const std::vector<int32_t> ids = {3, 1};
  constexpr float kSentinel = 12345.0f;
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in), kSentinel), xn(x.size(), kSentinel);
  std::vector<float> y(static_cast<size_t>(n_tokens * n_out)), want(y.size()), cx(x.size());

  const std::span<float> buffers[] = {x, xn};
  gpu.begin_scratch(buffers);
  gpu.get_rows(w, ids, x.data());
  gpu.rms_norm(x.data(), norm_w, n_tokens, n_in, 1e-6f, xn.data());
  gpu.matmul(w, x.data(), n_tokens, y.data());  // quantizes x; the add below changes it
  gpu.add(x.data(), xn.data(), n_tokens * n_in, x.data());
  gpu.matmul(w, x.data(), n_tokens, y.data());
  gpu.end_scratch();
  EXPECT_EQ(x, std::vector<float>(x.size(), kSentinel));
  EXPECT_EQ(xn, std::vector<float>(xn.size(), kSentinel));

  std::vector<float> cxn(x.size());
  cpu.get_rows(w, ids, cx.data());
  cpu.rms_norm(cx.data(), norm_w, n_tokens, n_in, 1e-6f, cxn.data());
  cpu.add(cx.data(), cxn.data(), n_tokens * n_in, cx.data());
  cpu.matmul(w, cx.data(), n_tokens, want.data());
  // Both quantize the same x to Q8_0 blocks of 32 and sum the same integer products; the
  // order of the float sums differs (per block vs per lane), a few ulps of the result.
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4f * std::fabs(want[i])) << i;

  // Scope closed: x is read from the host again.
  std::vector<float> out(x.size());
  gpu.scale(x.data(), n_tokens * n_in, 2.0f, out.data());
  EXPECT_EQ(out, std::vector<float>(x.size(), 2.0f * kSentinel));
}

}  // namespace
}  // namespace qrun::kernels::cuda
