// Paged KV views (KvLayerView::block_table) through CpuBackend on every ISA this host runs
// (generic included): kv_store and attention on a paged view must be bit-identical to the
// same ops on a contiguous cache, since the kernels read the same rows in the same order
// and only where a row is stored changes. Every pair of KV types (F32, F16, BF16, Q8_0,
// Q4_0), head_dim 64, 128 and 256, GQA ratios 1, 3 and 4, windows 0, 9 (same K and V
// types) and 40, blocks of 16 and 32 rows (the attention tile is 32: blocks of 16 split
// tiles), batches that start and end inside blocks and across their edges, and a block
// table out of order with unused blocks between (NaN-filled, so a row read from the wrong
// block shows). Also: a paged view that is not a whole number of blocks, or written past
// its rows, stops with a check (fast death tests: they run under qemu-user too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "tests/support/attention_isas.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr DType kKvTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  for (size_t i = 5; i < n; i += 89) v[i] *= 10.0f;
  return v;
}

struct Shape {
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
};

// Positions written and read batch by batch: a prefill across block edges, decode steps on
// and off edges, a second prefill. pos0, n_tokens.
constexpr int64_t kBatches[][2] = {{0, 21}, {21, 11}, {32, 1}, {33, 30}, {63, 1}, {64, 17}};
constexpr int64_t kPositions = 81;

struct Stored {
  std::vector<float> out;
  std::vector<uint8_t> k_rows;  // rows 0 .. kPositions - 1 in position order
  std::vector<uint8_t> v_rows;
};

// The batches on `be` over a contiguous cache (block_rows 0) or a paged one whose table
// takes every other block of a pool twice as large, last block first.
Stored run(CpuBackend& be, DType kt, DType vt, const Shape& s, int64_t window, int64_t block_rows,
           const std::vector<float>& kin, const std::vector<float>& vin,
           const std::vector<float>& q) {
  const int64_t row = s.n_head_kv * s.head_dim;
  const int64_t n_blocks = block_rows > 0 ? (kPositions + block_rows - 1) / block_rows : 0;
  const int64_t n_rows = block_rows > 0 ? n_blocks * block_rows : kPositions;
  const int64_t pool_rows = block_rows > 0 ? 2 * n_rows + block_rows : n_rows;
  const KvLayerView shape{kt, vt, nullptr, nullptr, n_rows, s.n_head_kv, s.head_dim};
  const size_t kb = shape.k_row_bytes(), vb = shape.v_row_bytes();
  // NaN bytes everywhere (0xff: a NaN in F32, F16 and BF16, a NaN scale in Q8_0 and Q4_0).
  std::vector<uint8_t> kbuf(kb * static_cast<size_t>(pool_rows), 0xff);
  std::vector<uint8_t> vbuf(vb * static_cast<size_t>(pool_rows), 0xff);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>(2 * (n_blocks - i));
  KvLayerView cache{kt, vt, kbuf.data(), vbuf.data(), n_rows, s.n_head_kv, s.head_dim};
  if (block_rows > 0) {
    cache.block_table = table.data();
    cache.block_rows = block_rows;
  }
  const AttentionParams params{s.n_head, s.n_head_kv, s.head_dim,
                               1.0f / std::sqrt(static_cast<float>(s.head_dim)), window};
  const int64_t q_row = s.n_head * s.head_dim;
  Stored r;
  r.out.assign(q.size(), kNaN);
  for (const auto& [pos0, n] : kBatches) {
    be.kv_store(cache, pos0, n, kin.data() + pos0 * row, vin.data() + pos0 * row);
    be.attention(q.data() + pos0 * q_row, n, pos0, cache, params, r.out.data() + pos0 * q_row);
  }
  for (int64_t p = 0; p < kPositions; ++p) {
    const auto at = static_cast<size_t>(cache.storage_row(p));
    r.k_rows.insert(r.k_rows.end(), kbuf.begin() + at * kb, kbuf.begin() + (at + 1) * kb);
    r.v_rows.insert(r.v_rows.end(), vbuf.begin() + at * vb, vbuf.begin() + (at + 1) * vb);
  }
  return r;
}

TEST(KernelsPagedKv, PagedEqualsContiguousOnEveryIsa) {
  const Shape shapes[] = {{8, 2, 64}, {3, 1, 128}, {4, 4, 256}};
#ifdef QRUN_SANITIZED
  const std::vector<Isa> isas = {default_isa()};  // too slow on every kernel set there
#else
  const std::vector<Isa> isas = host_isas();
#endif
  for (const Isa isa : isas) {
    SCOPED_TRACE(isa_name(isa));
    CpuBackend be(3, isa);
    for (const Shape& s : shapes) {
      const int64_t row = s.n_head_kv * s.head_dim;
      const std::vector<float> kin = random_floats(static_cast<size_t>(kPositions * row), 1);
      const std::vector<float> vin = random_floats(static_cast<size_t>(kPositions * row), 2);
      const std::vector<float> q =
          random_floats(static_cast<size_t>(kPositions * s.n_head * s.head_dim), 3);
      for (DType kt : kKvTypes) {
        for (DType vt : kKvTypes) {
          const std::vector<Isa> own = isas_with_own_attention(isas, kt, vt);
          if (std::find(own.begin(), own.end(), isa) == own.end()) continue;  // (attention_isas.h)
          for (int64_t window : {0, 9, 40}) {
            if (kt != vt && window == 9) continue;  // mixed pairs: windows 0 and 40 only
            const Stored want = run(be, kt, vt, s, window, 0, kin, vin, q);
            for (int64_t block_rows : {16, 32}) {
              SCOPED_TRACE(testing::Message()
                           << "K " << dtype_name(kt) << " V " << dtype_name(vt) << " heads "
                           << s.n_head << "/" << s.n_head_kv << " head_dim " << s.head_dim
                           << " window " << window << " blocks of " << block_rows);
              const Stored got = run(be, kt, vt, s, window, block_rows, kin, vin, q);
              EXPECT_EQ(got.k_rows, want.k_rows);
              EXPECT_EQ(got.v_rows, want.v_rows);
              ASSERT_EQ(got.out.size(), want.out.size());
              EXPECT_EQ(
                  std::memcmp(got.out.data(), want.out.data(), got.out.size() * sizeof(float)), 0);
              EXPECT_TRUE(std::none_of(got.out.begin(), got.out.end(),
                                       [](float x) { return std::isnan(x); }));
            }
          }
        }
      }
    }
  }
}

TEST(KernelsPagedKvDeathTest, BadPagedViewsStop) {
  std::vector<uint16_t> k(64 * 64), v(64 * 64);
  const std::vector<float> x(64 * 3, 1.0f);
  const std::vector<int32_t> table = {1, 0};
  KvLayerView cache{DType::kF16, DType::kF16, k.data(), v.data(), 32, 1, 64};
  cache.block_table = table.data();
  cache.block_rows = 16;
  CpuBackend be(1, Isa::kGeneric);
  EXPECT_DEATH(be.kv_store(cache, 31, 2, x.data(), x.data()), "past the 32 rows of a paged view");
  cache.block_rows = 24;  // not a power of two
  EXPECT_DEATH(be.kv_store(cache, 0, 1, x.data(), x.data()), "paged view of 32 rows in blocks");
  cache.block_rows = 8;  // below kKvBlockAlign
  const AttentionParams params{1, 1, 64, 0.125f, 0};
  std::vector<float> out(64);
  EXPECT_DEATH(be.attention(x.data(), 1, 0, cache, params, out.data()),
               "paged view of 32 rows in blocks of 8");
}

}  // namespace
}  // namespace qrun::kernels
