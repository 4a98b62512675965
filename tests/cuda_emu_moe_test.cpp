// CudaBackend's mixture-of-experts row moves (gather_rows, weighted_row_sum) under the SIMT
// emulator, against the Backend defaults (the CPU backend's), on awkward row lengths, with
// row ids repeated and out of order: in host memory, on buffers resident for a scratch
// scope (whose host memory is then stale), and in captured decode steps. Both ops are exact
// on any device: gather_rows copies, and weighted_row_sum rounds each product and sums in
// j order as the default does (no FMA), so every comparison is bit for bit. Built against
// the nvcc target (cuda_gpu_moe_test), the same checks run on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/random_data.h"

namespace qrun::kernels::cuda {
namespace {

using test::random_vector;

constexpr int64_t kLengths[] = {1, 7, 64, 65, 2048 + 3};
constexpr int64_t kTopK[] = {1, 2, 8};
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// n_rows rows of n floats whose first element is -0.0: a sum that starts from 0 rather
// than from its first product turns their -0.0 products into +0.0.
std::vector<float> source_rows(int64_t n_rows, int64_t n, uint32_t seed) {
  std::vector<float> v = random_vector(n_rows * n, seed);
  for (int64_t r = 0; r < n_rows; ++r) v[static_cast<size_t>(r * n)] = -0.0f;
  return v;
}

// `count` ids below n_rows: every row, descending, then random ones (repeats).
std::vector<int32_t> row_ids(int64_t count, int64_t n_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_rows - 1));
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    ids[static_cast<size_t>(i)] = i < n_rows ? static_cast<int32_t>(n_rows - 1 - i) : pick(rng);
  }
  return ids;
}

// Positive, as a router's renormalized probabilities are (so that -0.0 * w is -0.0).
std::vector<float> row_weights(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.01f, 1.0f);
  std::vector<float> w(static_cast<size_t>(count));
  for (float& x : w) x = dist(rng);
  return w;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " [" << i << "] of " << got.size() << ": got " << got[i] << ", want " << want[i];
  }
}

// One case: n_tok tokens routed to k of n_src source rows each.
struct MoeCase {
  int64_t n, k, n_tok, n_src;
  std::vector<float> x;        // [n_src, n]
  std::vector<int32_t> rows;   // [n_tok * k]
  std::vector<float> weights;  // [n_tok * k]

  MoeCase(int64_t n_, int64_t k_, int64_t n_tok_, uint32_t seed)
      : n(n_), k(k_), n_tok(n_tok_), n_src(n_tok_ * k_ / 2 + 1) {
    x = source_rows(n_src, n, seed);
    rows = row_ids(n_tok * k, n_src, seed + 1);
    weights = row_weights(n_tok * k, seed + 2);
  }
  int64_t n_rows() const { return n_tok * k; }
};

TEST(CudaEmuMoe, SupportsMoeRowsOnF32) {
  CudaBackend gpu;
  EXPECT_TRUE(gpu.supports(Op::kMoeRows, DType::kF32));
  EXPECT_FALSE(gpu.supports(Op::kMoeRows, DType::kF16));
}

TEST(CudaEmuMoe, HostMemoryMatchesTheDefaults) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  uint32_t seed = 1;
  for (const int64_t n : kLengths) {
    for (const int64_t k : kTopK) {
      for (const int64_t n_tok : {1, 5}) {
        SCOPED_TRACE(testing::Message() << "n " << n << " k " << k << " tokens " << n_tok);
        const MoeCase c(n, k, n_tok, seed += 3);
        std::vector<float> got(static_cast<size_t>(c.n_rows() * n), kNaN), want(got.size(), kNaN);
        gpu.gather_rows(c.x.data(), n, c.rows, got.data());
        cpu.gather_rows(c.x.data(), n, c.rows, want.data());
        expect_same_bits(got, want, "gather_rows");

        std::vector<float> sum(static_cast<size_t>(n_tok * n), kNaN), want_sum(sum.size(), kNaN);
        gpu.weighted_row_sum(c.x.data(), n, c.rows, c.weights, k, sum.data());
        cpu.weighted_row_sum(c.x.data(), n, c.rows, c.weights, k, want_sum.data());
        expect_same_bits(sum, want_sum, "weighted_row_sum");
        for (int64_t t = 0; t < n_tok; ++t)
          EXPECT_TRUE(std::signbit(sum[static_cast<size_t>(t * n)]));
      }
    }
  }
}

// rows.size() not a multiple of k: the rows past the last whole token are not read.
TEST(CudaEmuMoe, WeightedRowSumIgnoresAPartialToken) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  const MoeCase c(65, 2, 3, 40);
  const std::span<const int32_t> rows(c.rows.data(), 5);
  const std::span<const float> weights(c.weights.data(), 5);
  std::vector<float> got(2 * 65, kNaN), want(got.size(), kNaN);
  gpu.weighted_row_sum(c.x.data(), 65, rows, weights, 2, got.data());
  cpu.weighted_row_sum(c.x.data(), 65, rows, weights, 2, want.data());
  expect_same_bits(got, want, "weighted_row_sum");
}

// Inside a scratch scope, sources and outputs resident on the device: the ops read the
// device copies (the host memory of the buffers holds NaN meanwhile), in every mix of
// resident and host operands. Results come back through scale by 1 (exact, -0.0 kept).
TEST(CudaEmuMoe, ResidentBuffersMatchTheDefaults) {
  CudaBackend gpu;
  CpuBackend cpu(1, Isa::kGeneric);
  uint32_t seed = 100;
  for (const int64_t n : kLengths) {
    for (const int64_t k : kTopK) {
      SCOPED_TRACE(testing::Message() << "n " << n << " k " << k);
      const MoeCase c(n, k, 3, seed += 3);
      std::vector<float> want_g(static_cast<size_t>(c.n_rows() * n));
      std::vector<float> want_s(static_cast<size_t>(c.n_tok * n));
      cpu.gather_rows(c.x.data(), n, c.rows, want_g.data());
      // (the sum over the gathered rows, as a layer sums its experts' outputs)
      cpu.weighted_row_sum(want_g.data(), n, c.rows, c.weights, k, want_s.data());
      std::vector<float> want_sx(want_s.size());
      cpu.weighted_row_sum(c.x.data(), n, c.rows, c.weights, k, want_sx.data());
      // Another sum right after the first (on the GPU its ids and weights are staged while
      // the first's copy may still be queued), over the rows in reverse order.
      const std::vector<int32_t> rrows(c.rows.rbegin(), c.rows.rend());
      const std::vector<float> rweights(c.weights.rbegin(), c.weights.rend());
      std::vector<float> want_r(want_s.size());
      cpu.weighted_row_sum(want_g.data(), n, rrows, rweights, k, want_r.data());

      std::vector<float> x(c.x.size(), kNaN), g(want_g.size(), kNaN), s(want_s.size(), kNaN);
      std::vector<float> r(want_s.size(), kNaN);
      const std::span<float> buffers[] = {x, g, s, r};
      for (int round = 0; round < 2; ++round) {  // (the second on the kept device buffers)
        gpu.begin_scratch(buffers);
        gpu.scale(c.x.data(), static_cast<int64_t>(x.size()), 1.0f, x.data());
        gpu.gather_rows(x.data(), n, c.rows, g.data());
        gpu.weighted_row_sum(g.data(), n, c.rows, c.weights, k, s.data());
        gpu.weighted_row_sum(g.data(), n, rrows, rweights, k, r.data());
        std::vector<float> got_g(g.size(), kNaN), got_s(s.size(), kNaN), got_r(r.size(), kNaN);
        gpu.scale(g.data(), static_cast<int64_t>(g.size()), 1.0f, got_g.data());
        gpu.scale(s.data(), static_cast<int64_t>(s.size()), 1.0f, got_s.data());
        gpu.scale(r.data(), static_cast<int64_t>(r.size()), 1.0f, got_r.data());
        expect_same_bits(got_g, want_g, "gather_rows, resident");
        expect_same_bits(got_s, want_s, "weighted_row_sum, resident");
        expect_same_bits(got_r, want_r, "weighted_row_sum, resident, reversed rows");

        // Resident source, host output; host source, resident output.
        std::vector<float> host_g(g.size(), kNaN), host_s(s.size(), kNaN);
        gpu.gather_rows(x.data(), n, c.rows, host_g.data());
        gpu.weighted_row_sum(x.data(), n, c.rows, c.weights, k, host_s.data());
        expect_same_bits(host_g, want_g, "gather_rows, resident source");
        expect_same_bits(host_s, want_sx, "weighted_row_sum, resident source");
        gpu.weighted_row_sum(c.x.data(), n, c.rows, c.weights, k, s.data());
        gpu.scale(s.data(), static_cast<int64_t>(s.size()), 1.0f, got_s.data());
        expect_same_bits(got_s, want_sx, "weighted_row_sum, resident output");
        gpu.end_scratch();
        for (const std::vector<float>* b : {&x, &g, &s, &r}) {
          for (const float v : *b) ASSERT_TRUE(std::isnan(v)) << "a resident buffer's host memory";
        }
      }
    }
  }
}

// Decode steps of a graph-capturing backend: a one-token get_rows in a scope on the buffers
// of the last one starts a capture, and the row moves that follow (ids and weights new each
// step) are captured with it, never ending it early; the results are the defaults'.
TEST(CudaEmuMoe, CapturedDecodeStepsMatchTheDefaults) {
  constexpr int64_t kN = 64 + 1, kK = 8, kSteps = 4;
  CudaBackend gpu(/*graphs=*/true, /*fuse=*/true);
  CpuBackend cpu(1, Isa::kGeneric);
  const std::vector<float> table = random_vector(3 * kN, 7);
  Tensor emb;
  emb.type = DType::kF32;
  emb.n_dims = 2;
  emb.ne = {kN, 3, 1, 1};
  emb.data = table.data();
  const MoeCase shape(kN, kK, 1, 0);
  std::vector<float> tok(kN, kNaN), x(shape.x.size(), kNaN);
  std::vector<float> g(static_cast<size_t>(kK * kN), kNaN), s(kN, kNaN);
  const std::span<float> buffers[] = {tok, x, g, s};
  for (int64_t step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    const MoeCase c(kN, kK, 1, 200 + 10 * static_cast<uint32_t>(step));
    std::vector<float> want_g(g.size()), want_s(s.size());
    cpu.gather_rows(c.x.data(), kN, c.rows, want_g.data());
    cpu.weighted_row_sum(want_g.data(), kN, c.rows, c.weights, kK, want_s.data());

    gpu.begin_scratch(buffers);
    gpu.scale(c.x.data(), static_cast<int64_t>(x.size()), 1.0f, x.data());  // (before the capture)
    const int32_t id = static_cast<int32_t>(step % 3);
    gpu.get_rows(emb, std::span<const int32_t>(&id, 1), tok.data());
    gpu.gather_rows(x.data(), kN, c.rows, g.data());
    gpu.weighted_row_sum(g.data(), kN, c.rows, c.weights, kK, s.data());
    std::vector<float> got_s(s.size(), kNaN);
    gpu.scale(s.data(), kN, 1.0f, got_s.data());  // (the step's "logits": ends the capture)
    gpu.end_scratch();
    expect_same_bits(got_s, want_s, "weighted_row_sum of the gathered rows");

    const CudaBackend::GraphStats& st = gpu.graph_stats();
    EXPECT_EQ(st.captures, step);
    EXPECT_EQ(st.launches, step);
    EXPECT_EQ(st.flushes, 0);
  }
}

}  // namespace
}  // namespace qrun::kernels::cuda
