// Attend calls over several KV heads at once (KvRows::n_heads, KvRowsMixed::n_heads), on
// the generic table and every SIMD ISA this host runs: each head's result, plain and
// partial, is the same bits as a call over its KV head alone, whether the kernels walk the
// heads together (attend_reads_heads_together: tiles of 8 rows where the heads take at most
// 512 values of a row, of 32 where they take more) or one after another (more than 8 query
// heads to a KV head, more than 1024 values, or more than 64 query heads). Shapes: 1 to 16
// KV heads, 1 to 9 query heads each, head_dim 4 to 512, row counts within, at and across
// tiles, rows read as a ring from the middle and through a block table in reverse; F32,
// F16, and K/V pairs of other types (Q8_0, Q4_0, BF16, F16), with NaN-prefilled outputs
// whose gaps must stay NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n_rows rows of n_head_kv * head_dim values converted to `type` as kv_store converts them.
std::vector<uint8_t> stored_rows(const std::vector<float>& x, int64_t n_rows, int64_t n_head_kv,
                                 int64_t head_dim, DType type) {
  const KvLayerView shape{type, type, nullptr, nullptr, n_rows, n_head_kv, head_dim};
  std::vector<uint8_t> k(shape.k_row_bytes() * static_cast<size_t>(n_rows));
  std::vector<uint8_t> v(k.size());
  const KvLayerView cache{type, type, k.data(), v.data(), n_rows, n_head_kv, head_dim};
  CpuBackend(1, Isa::kGeneric).kv_store(cache, 0, n_rows, x.data(), x.data());
  return k;
}

struct Case {
  int64_t n_heads;  // KV heads read by the call
  int64_t group;    // query heads per KV head
  int64_t head_dim;
};

// Together: 1x1, 3x3 (smollm), 2x7, 4x8, 8x4x128 (Llama 3 8B: 32-row tiles), 1x4x256
// (Gemma 3 270M), 64 query heads of 32, 4x2x8 (stories260K), 16x1x4 (TinyLlama 5M); one
// after another: 9 query heads to a KV head, 3 x 512 values, 128 query heads.
constexpr Case kCases[] = {{1, 1, 64},  {3, 3, 64},  {2, 7, 64}, {4, 8, 32},
                           {8, 4, 128}, {1, 4, 256}, {8, 8, 32}, {2, 9, 64},
                           {3, 2, 512}, {16, 8, 32}, {4, 2, 8},  {16, 1, 4}};
constexpr int64_t kRowCounts[] = {1, 7, 8, 9, 33, 100};

// The rows a call reads: read from `first` in a ring of n_ring rows, or, paged (block_shift >
// 0), through a table that maps the ring's blocks to the storage blocks in reverse order.
struct Layout {
  int64_t first = 0;
  int64_t n_ring = 0;
  std::vector<int32_t> table;
  int block_shift = 0;
};

std::vector<Layout> layouts(int64_t n_rows) {
  std::vector<Layout> out;
  out.push_back({0, n_rows, {}, 0});
  out.push_back({n_rows / 2, n_rows, {}, 0});
  if (n_rows % 4 == 0) {  // blocks of 4 rows, in reverse
    Layout paged{0, n_rows, std::vector<int32_t>(static_cast<size_t>(n_rows / 4)), 2};
    std::iota(paged.table.rbegin(), paged.table.rend(), 0);
    out.push_back(paged);
  }
  return out;
}

// Calls attend over all KV heads of `rows` (n_q = n_heads * group) and over each KV head
// alone, plain and partial, and expects the same bytes. `one_head(g)` gives KV head g's rows.
template <class Rows, class Fn, class OneHead>
void expect_each_head_alone(const Fn& attend, const Rows& rows, const OneHead& one_head,
                            const Case& c, uint32_t seed) {
  const int64_t n_q = c.n_heads * c.group;
  const int64_t q_stride = c.head_dim + 3, out_stride = c.head_dim + 5;
  const std::vector<float> q = random_floats(static_cast<size_t>(n_q * q_stride), seed);
  const float scale = (seed % 2 ? 1.0f : 4.0f) / std::sqrt(static_cast<float>(c.head_dim));
  const size_t n_out = static_cast<size_t>(n_q * out_stride);
  for (bool partial : {false, true}) {
    std::vector<float> all(n_out, kNaN), alone(n_out, kNaN);
    std::vector<float> ml_all(static_cast<size_t>(2 * n_q), kNaN), ml_alone(ml_all);
    attend(q.data(), q_stride, n_q, rows, c.head_dim, scale, all.data(), out_stride,
           partial ? ml_all.data() : nullptr);
    for (int64_t g = 0; g < c.n_heads; ++g) {
      const int64_t h0 = g * c.group;
      attend(q.data() + h0 * q_stride, q_stride, c.group, one_head(g), c.head_dim, scale,
             alone.data() + h0 * out_stride, out_stride,
             partial ? ml_alone.data() + 2 * h0 : nullptr);
    }
    SCOPED_TRACE(partial ? "partial" : "plain");
    ASSERT_EQ(std::memcmp(all.data(), alone.data(), n_out * sizeof(float)), 0);
    if (partial) {
      ASSERT_EQ(std::memcmp(ml_all.data(), ml_alone.data(), ml_all.size() * sizeof(float)), 0);
    }
    for (int64_t h = 0; h < n_q; ++h) {
      for (int64_t d = 0; d < out_stride; ++d) {
        const float x = all[static_cast<size_t>(h * out_stride + d)];
        ASSERT_EQ(std::isnan(x), d >= c.head_dim) << "head " << h << " element " << d;
      }
    }
  }
}

TEST(KernelsAttentionHeads, SameTypeCacheEachHeadAsAlone) {
  uint32_t seed = 7000;
  for (const Case& c : kCases) {
    for (int64_t n_rows : kRowCounts) {
      // Rows of the call's KV heads and one more beside them, which must not be read.
      const int64_t n_head_kv = c.n_heads + 1;
      const int64_t stride = n_head_kv * c.head_dim;
      const std::vector<float> k32 = random_floats(static_cast<size_t>(n_rows * stride), ++seed);
      const std::vector<float> v32 = random_floats(static_cast<size_t>(n_rows * stride), ++seed);
      std::vector<uint16_t> k16(k32.size()), v16(v32.size());
      for (size_t i = 0; i < k32.size(); ++i) {
        k16[i] = fp32_to_fp16(k32[i]);
        v16[i] = fp32_to_fp16(v32[i]);
      }
      for (const Layout& lay : layouts(n_rows)) {
        for (bool f16 : {false, true}) {
          const size_t elem = f16 ? sizeof(uint16_t) : sizeof(float);
          const auto* k = f16 ? static_cast<const void*>(k16.data()) : k32.data();
          const auto* v = f16 ? static_cast<const void*>(v16.data()) : v32.data();
          // KV heads 1 .. n_heads of each row.
          const auto at_head = [&](const void* p, int64_t g) {
            return static_cast<const uint8_t*>(p) + static_cast<size_t>(g * c.head_dim) * elem;
          };
          KvRows rows{at_head(k, 1),
                      at_head(v, 1),
                      stride,
                      lay.first,
                      n_rows,
                      lay.n_ring,
                      lay.table.empty() ? nullptr : lay.table.data(),
                      lay.block_shift};
          rows.n_heads = c.n_heads;
          rows.head_stride = c.head_dim;
          const auto one_head = [&](int64_t g) {
            KvRows r = rows;
            r.k = at_head(k, 1 + g);
            r.v = at_head(v, 1 + g);
            r.n_heads = 1;
            return r;
          };
          for (Isa isa : host_isas()) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << (f16 ? " f16 " : " f32 ") << c.n_heads
                         << " KV heads x " << c.group << " x " << c.head_dim << ", " << n_rows
                         << " rows from " << lay.first << (lay.table.empty() ? "" : " paged"));
            const CpuKernels& t = cpu_kernels(isa);
            expect_each_head_alone(f16 ? t.attend_f16 : t.attend_f32, rows, one_head, c, ++seed);
          }
        }
      }
    }
  }
}

TEST(KernelsAttentionHeads, MixedCacheEachHeadAsAlone) {
  const DType pairs[][2] = {{DType::kQ8_0, DType::kF16},
                            {DType::kQ4_0, DType::kQ8_0},
                            {DType::kBF16, DType::kF32},
                            {DType::kF16, DType::kQ4_0}};
  uint32_t seed = 9000;
  for (const Case& c : kCases) {
    if (c.head_dim % 32 != 0) continue;  // quantized rows: whole blocks per head
    for (int64_t n_rows : {int64_t{9}, int64_t{100}}) {
      const int64_t n_head_kv = c.n_heads + 1;
      const std::vector<float> kf =
          random_floats(static_cast<size_t>(n_rows * n_head_kv * c.head_dim), ++seed);
      const std::vector<float> vf =
          random_floats(static_cast<size_t>(n_rows * n_head_kv * c.head_dim), ++seed);
      for (const auto& [kt, vt] : pairs) {
        const std::vector<uint8_t> kc = stored_rows(kf, n_rows, n_head_kv, c.head_dim, kt);
        const std::vector<uint8_t> vc = stored_rows(vf, n_rows, n_head_kv, c.head_dim, vt);
        const size_t k_head = row_size(kt, c.head_dim), v_head = row_size(vt, c.head_dim);
        for (const Layout& lay : layouts(n_rows)) {
          for (Isa isa : host_isas()) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << " K " << dtype_name(kt) << " V " << dtype_name(vt)
                         << ", " << c.n_heads << " KV heads x " << c.group << " x " << c.head_dim
                         << ", " << n_rows << " rows from " << lay.first
                         << (lay.table.empty() ? "" : " paged"));
            const CpuKernels& t = cpu_kernels(isa);
            const MatmulKernels& mk = t.for_type(kt);
            KvRowsMixed rows;
            rows.k = kc.data() + k_head;  // KV heads 1 .. n_heads
            rows.v = vc.data() + v_head;
            rows.k_stride = k_head * static_cast<size_t>(n_head_kv);
            rows.v_stride = v_head * static_cast<size_t>(n_head_kv);
            rows.k_head_bytes = k_head;
            rows.v_head_bytes = v_head;
            rows.n_heads = c.n_heads;
            rows.first = lay.first;
            rows.n = n_rows;
            rows.n_ring = lay.n_ring;
            rows.v_type = vt;
            rows.k_quantize = mk.act_type == DType::kF32 ? nullptr : mk.quantize_act;
            rows.k_dot = mk.vec_dot;
            rows.v_to_float = t.to_float[static_cast<size_t>(vt)];
            rows.table = lay.table.empty() ? nullptr : lay.table.data();
            rows.block_shift = lay.block_shift;
            const auto one_head = [&](int64_t g) {
              KvRowsMixed r = rows;
              r.k += static_cast<size_t>(g) * k_head;
              r.v += static_cast<size_t>(g) * v_head;
              r.n_heads = 1;
              return r;
            };
            expect_each_head_alone(t.attend_mixed, rows, one_head, c, ++seed);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace qrun::kernels
