// CpuBackend::attention over reads longer than one chunk (256 rows; at most 16 chunks,
// longer ones past 4096 rows): each head's chunks are merged in order, whether one thread
// walks them in turn (batches of more than 4 tokens) or the threads share them (1 to 4
// tokens). So a token's result must be the same bits for every thread count, alone or in a
// batch of any size, on every ISA this host runs, for F32, F16 and mixed (Q8_0 K, F16 V)
// caches, read straight, through a sliding-window ring and through a paged view. Against a
// softmax computed directly in double, the F32 cache keeps the per head normalized MSE
// under 1e-10 of unchunked reads (kernels_ops_test): merging in float adds no measurable
// error. (The other caches' bounds, in check_shape, are their roundings'.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "tests/support/attention_isas.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Per head normalized MSE of got against want, n_rows rows of head_dim.
double worst_head_nmse(const std::vector<float>& got, const std::vector<float>& want,
                       int64_t n_rows, int64_t head_dim) {
  double worst = 0.0;
  for (int64_t r = 0; r < n_rows; ++r) {
    double err = 0.0, norm = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      const double g = got[static_cast<size_t>(r * head_dim + d)];
      const double w = want[static_cast<size_t>(r * head_dim + d)];
      err += (g - w) * (g - w);
      norm += w * w;
    }
    worst = std::max(worst, std::isnan(err) ? 1e300 : err / std::max(norm, 1e-30));
  }
  return worst;
}

struct Shape {
  int64_t n_head = 6, n_head_kv = 2, head_dim = 32;  // Q8_0 rows: whole blocks
  int64_t n_pos = 0;                                 // positions written
  int64_t window = 0;                                // 0: the whole context
  int64_t n_rows = 0;                                // cache rows (a ring when < n_pos)
  int64_t block_rows = 0;  // paged in blocks of this many rows; 0: not paged
};

// Stores the positions [0, n_pos) and runs attention from position `from` on in batches of
// `batch` tokens (the last batch shorter) with `threads` threads; returns those outputs,
// [position][head][head_dim].
std::vector<float> run(const Shape& s, DType kt, DType vt, Isa isa, int threads, int64_t batch,
                       int64_t from, const std::vector<float>& kin, const std::vector<float>& vin,
                       const std::vector<float>& q) {
  const int64_t n_kv_row = s.n_head_kv * s.head_dim;
  const int64_t q_row = s.n_head * s.head_dim;
  // Paged: the blocks in reverse order, so storage order differs from reading order.
  std::vector<int32_t> table;
  int64_t storage_rows = s.n_rows;
  if (s.block_rows > 0) {
    const int64_t n_blocks = s.n_rows / s.block_rows;
    for (int64_t b = 0; b < n_blocks; ++b) table.push_back(static_cast<int32_t>(n_blocks - 1 - b));
    storage_rows = n_blocks * s.block_rows;
  }
  std::vector<uint8_t> kbuf(row_size(kt, n_kv_row) * static_cast<size_t>(storage_rows));
  std::vector<uint8_t> vbuf(row_size(vt, n_kv_row) * static_cast<size_t>(storage_rows));
  KvLayerView cache{kt, vt, kbuf.data(), vbuf.data(), s.n_rows, s.n_head_kv, s.head_dim};
  if (s.block_rows > 0) {
    cache.block_table = table.data();
    cache.block_rows = s.block_rows;
  }
  const AttentionParams params{s.n_head, s.n_head_kv, s.head_dim,
                               1.0f / std::sqrt(static_cast<float>(s.head_dim)), s.window};
  CpuBackend backend(threads, isa);
  std::vector<float> out(static_cast<size_t>(s.n_pos * q_row), kNaN);
  // The positions before `from` are only stored (as many at a time as the rows hold).
  for (int64_t pos = 0; pos < from;) {
    const int64_t n = std::min(from - pos, s.n_rows);
    backend.kv_store(cache, pos, n, kin.data() + pos * n_kv_row, vin.data() + pos * n_kv_row);
    pos += n;
  }
  for (int64_t pos = from; pos < s.n_pos;) {
    const int64_t n = std::min(batch, s.n_pos - pos);
    backend.kv_store(cache, pos, n, kin.data() + pos * n_kv_row, vin.data() + pos * n_kv_row);
    backend.attention(q.data() + pos * q_row, n, pos, cache, params, out.data() + pos * q_row);
    pos += n;
  }
  return {out.begin() + from * q_row, out.end()};
}

// The softmax of each position's heads over its window, in double (F32 K and V).
std::vector<float> direct(const Shape& s, int64_t from, const std::vector<float>& kin,
                          const std::vector<float>& vin, const std::vector<float>& q) {
  const int64_t n_kv_row = s.n_head_kv * s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(s.head_dim)));
  std::vector<float> want;
  for (int64_t p = from; p < s.n_pos; ++p) {
    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t hk = h / (s.n_head / s.n_head_kv);
      const float* qh = q.data() + (p * s.n_head + h) * s.head_dim;
      std::vector<double> w;
      double max = -1e300;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < s.head_dim; ++d) {
          dot += double{qh[d]} * kin[static_cast<size_t>(j * n_kv_row + hk * s.head_dim + d)];
        }
        w.push_back(static_cast<double>(static_cast<float>(dot) * static_cast<float>(scale)));
        max = std::max(max, w.back());
      }
      double sum = 0.0;
      for (double& x : w) sum += (x = std::exp(x - max));
      for (int64_t d = 0; d < s.head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = lo; j <= p; ++j) {
          acc += w[static_cast<size_t>(j - lo)] *
                 vin[static_cast<size_t>(j * n_kv_row + hk * s.head_dim + d)];
        }
        want.push_back(static_cast<float>(acc / sum));
      }
    }
  }
  return want;
}

// Every way of running the shape gives the bits of one thread decoding token by token, and
// the F32 cache matches the direct softmax.
void check_shape(const Shape& s, int64_t from) {
  const int64_t n_kv_row = s.n_head_kv * s.head_dim;
  const std::vector<float> kin = random_floats(static_cast<size_t>(s.n_pos * n_kv_row), 11);
  const std::vector<float> vin = random_floats(static_cast<size_t>(s.n_pos * n_kv_row), 12);
  std::vector<float> q = random_floats(static_cast<size_t>(s.n_pos * s.n_head * s.head_dim), 13);
  for (float& x : q) x *= 3.0f;  // peaky enough that the running max moves between chunks
  const std::vector<float> want = direct(s, from, kin, vin, q);
  const int64_t n_out = (s.n_pos - from) * s.n_head;
  const DType types[][2] = {
      {DType::kF32, DType::kF32}, {DType::kF16, DType::kF16}, {DType::kQ8_0, DType::kF16}};
  for (const auto& [kt, vt] : types) {
    for (Isa isa : isas_with_own_attention(host_isas(), kt, vt)) {
      SCOPED_TRACE(testing::Message()
                   << isa_name(isa) << " K " << dtype_name(kt) << " V " << dtype_name(vt));
      const std::vector<float> one = run(s, kt, vt, isa, 1, 1, from, kin, vin, q);
      // Measured worst per head: F32 7e-13 (float against double); F16 2e-5 (q, the
      // cache and the accumulator rounded to F16); Q8_0 K 1.6e-4 (q and K rounded to 8
      // bits, on scores peaky enough to magnify it). Each bound is 5x or more above that.
      const double bound = kt == DType::kF32 ? 1e-10 : kt == DType::kF16 ? 1e-4 : 1e-3;
      EXPECT_LT(worst_head_nmse(one, want, n_out, s.head_dim), bound);
      const int64_t ways[][2] = {{2, 1}, {3, 1}, {8, 1}, {2, 3}, {3, 4}, {2, 5}, {1, 9}, {3, 9}};
      for (const auto& [threads, batch] : ways) {
        SCOPED_TRACE(testing::Message() << threads << " threads, batches of " << batch);
        const std::vector<float> got =
            run(s, kt, vt, isa, static_cast<int>(threads), batch, from, kin, vin, q);
        ASSERT_EQ(got.size(), one.size());
        EXPECT_EQ(std::memcmp(got.data(), one.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

// Reads of 250 to 530 rows: one chunk, then two (257: the second has one row), then three.
TEST(KernelsAttentionChunks, AcrossChunkBoundaries) {
  check_shape({.n_pos = 530, .n_rows = 530}, 250);
}

// Past 16 x 256 rows the chunks grow (4100 rows: 16 chunks of 288); one KV head of 32 to
// keep it quick, 4 query heads on it, so decode cuts the group into slices too.
TEST(KernelsAttentionChunks, SixteenChunksAtMost) {
  check_shape({.n_head = 4, .n_head_kv = 1, .n_pos = 4100, .n_rows = 4100}, 4090);
}

// A sliding window of 300 positions in a ring of 300 - 1 + 9 rows (what KvCache allocates
// for batches of up to 9), read across several wraps: two chunks, the second wrapping.
TEST(KernelsAttentionChunks, SlidingWindowRing) {
  check_shape({.n_pos = 700, .window = 300, .n_rows = 308}, 640);
}

// A paged view: 640 rows in blocks of 64 stored in reverse order.
TEST(KernelsAttentionChunks, PagedView) {
  check_shape({.n_pos = 600, .n_rows = 640, .block_rows = 64}, 560);
}

}  // namespace
}  // namespace qrun::kernels
