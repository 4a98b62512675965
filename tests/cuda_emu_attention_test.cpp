// The CUDA attention, run under the SIMT emulator, over an F16 KV cache: the split-K
// decode kernel and the prefill path (matrix products, from kPrefillMinTokens tokens, or
// called directly with a given chunk), on head sizes 4 to 256, GQA ratios 1, 4 and 6,
// contexts shorter and longer than a split, several tokens at once (causal), and sliding
// windows over ring caches (runs of rows that wrap, chunks that cross the ring's end), and
// soft-capped logits.
// Oracles:
//  - a double-precision softmax attention over the same F16 keys and values: the kernel
//    sums q.k in float, so a score is off by at most head_dim * eps * scale * sum|q k|
//    (ds); the softmax weights then move by a factor within exp(+-2 ds), and the float
//    sums of the output add about (n / 4 / 256 + 8) eps relative; the check allows
//    (4 ds + 64 eps) * max|v|, per token and head. The prefill path rounds q to F16, which
//    adds 2^-11 * scale * sum|q k| to ds, and the softmax weights to F16 (2^-11 relative,
//    2^-25 absolute, against a sum >= 1), which moves the output by at most
//    (2^-10 + n 2^-24) * max|v|; it is allowed that much more. Each case prints its worst
//    error; under the emulator: prefill at most 3.5e-4 max|v| (about 2^-11.5, the F16
//    roundings, far inside the bound, which takes every rounding at its worst), decode 8e-8;
//  - the CPU backend's attention (llama.cpp's F16-accumulator numerics), within F16
//    precision: 2^-8 * max|v|;
//  - the same kernel over the same rows paged (a block table of shuffled blocks in a pool
//    whose other rows are NaN), where the cache does not wrap: the same bits. (On the GPU
//    the prefill path's products over gathered rows may take another cuBLAS kernel than
//    over the cache's own rows, whose alignment differs: there within the F16 weights'
//    rounding bound above, 2^-10 max|v|.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/fp16.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/ops.h"

namespace qrun::kernels::cuda {
namespace {

struct Case {
  int64_t head_dim;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t pos0;
  int64_t n_tokens;
  int64_t window;        // 0: whole context
  int64_t n_rows;        // cache rows (a ring when < pos0 + n_tokens)
  int64_t chunk;         // > 0: attention_prefill with chunks of this many tokens
  float softcap = 0.0f;  // attention logit soft-cap (Gemma 2); 0: none
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "head_dim " << c.head_dim << " heads " << c.n_head << "/" << c.n_head_kv << " pos0 "
      << c.pos0 << " tokens " << c.n_tokens << " window " << c.window << " rows " << c.n_rows
      << " chunk " << c.chunk;
  if (c.softcap > 0.0f) *os << " softcap " << c.softcap;
}

class CudaEmuAttention : public ::testing::TestWithParam<Case> {};

// The attention of case c over k and v (rows of row_elems F16 values) as a paged view: blocks
// of kBlockRows rows, placed in a pool of 3 more blocks than the view needs in shuffled
// order; every pool row that holds none of the view's is NaN, so a wrong row shows.
std::vector<float> paged_attention(const Case& c, const AttentionParams& p,
                                   const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                                   const float* dq, size_t n_out) {
  constexpr int64_t kBlockRows = 16;
  const int64_t row_elems = c.n_head_kv * c.head_dim;
  const int64_t n_blocks = (c.n_rows + kBlockRows - 1) / kBlockRows;
  std::vector<int32_t> order(static_cast<size_t>(n_blocks + 3));
  for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<int32_t>(b);
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<uint32_t>(c.pos0 + 7)));
  const std::vector<int32_t> table(order.begin(), order.begin() + n_blocks);
  const uint16_t nan = 0x7e00;
  std::vector<uint16_t> pk(order.size() * kBlockRows * static_cast<size_t>(row_elems), nan);
  std::vector<uint16_t> pv(pk.size(), nan);
  KvLayerView view{DType::kF16,           DType::kF16, pk.data(), pv.data(),
                   n_blocks * kBlockRows, c.n_head_kv, c.head_dim};
  view.block_table = table.data();
  view.block_rows = kBlockRows;
  view.n_storage_rows = static_cast<int64_t>(order.size()) * kBlockRows;
  for (int64_t r = 0; r < c.n_rows; ++r) {
    const auto to = static_cast<size_t>(view.storage_row(r) * row_elems);
    std::copy_n(k.begin() + r * row_elems, row_elems, pk.begin() + static_cast<ptrdiff_t>(to));
    std::copy_n(v.begin() + r * row_elems, row_elems, pv.begin() + static_cast<ptrdiff_t>(to));
  }
  DeviceArray<uint16_t> dk{std::span<const uint16_t>(pk)};
  DeviceArray<uint16_t> dv{std::span<const uint16_t>(pv)};
  DeviceArray<int32_t> dtable{std::span<const int32_t>(table)};
  view.k = dk.data();
  view.v = dv.data();
  view.block_table = dtable.data();
  DeviceArray<float> dscratch(
      c.chunk > 0 ? attention_prefill_scratch_floats(c.n_tokens, c.pos0, p, c.chunk, true)
                  : attention_scratch_floats(c.n_tokens, c.pos0, p, true));
  DeviceArray<float> dout(n_out);
  if (c.chunk > 0) {
    attention_prefill(dq, c.n_tokens, c.pos0, view, p, c.chunk, dscratch.data(), dout.data(),
                      Stream{});
  } else {
    attention(dq, c.n_tokens, c.pos0, view, p, dscratch.data(), dout.data(), Stream{});
  }
  return dout.download();
}

TEST_P(CudaEmuAttention, MatchesDoubleAndCpuReferences) {
  const Case c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(c.head_dim * 131 + c.pos0 + c.n_head));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t row_elems = c.n_head_kv * c.head_dim;
  std::vector<uint16_t> k(static_cast<size_t>(c.n_rows * row_elems));
  std::vector<uint16_t> v(k.size());
  // Keys with a per-row bias so some positions dominate the softmax.
  for (int64_t r = 0; r < c.n_rows; ++r) {
    const float bias = (r % 17 == 3) ? 2.0f : 0.0f;
    for (int64_t e = 0; e < row_elems; ++e) {
      k[r * row_elems + e] = fp32_to_fp16(dist(rng) + bias);
      v[r * row_elems + e] = fp32_to_fp16(dist(rng));
    }
  }
  std::vector<float> q(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim));
  for (float& x : q) x = dist(rng);
  AttentionParams p;
  p.n_head = c.n_head;
  p.n_head_kv = c.n_head_kv;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.window = c.window;
  p.softcap = c.softcap;

  DeviceArray<uint16_t> dk{std::span<const uint16_t>(k)};
  DeviceArray<uint16_t> dv{std::span<const uint16_t>(v)};
  DeviceArray<float> dq{std::span<const float>(q)};
  const bool prefill = c.chunk > 0 || c.n_tokens >= kPrefillMinTokens;
  DeviceArray<float> dscratch(c.chunk > 0
                                  ? attention_prefill_scratch_floats(c.n_tokens, c.pos0, p, c.chunk)
                                  : attention_scratch_floats(c.n_tokens, c.pos0, p));
  DeviceArray<float> dout(q.size());
  KvLayerView dcache{DType::kF16, DType::kF16, dk.data(), dv.data(),
                     c.n_rows,    c.n_head_kv, c.head_dim};
  if (c.chunk > 0) {
    attention_prefill(dq.data(), c.n_tokens, c.pos0, dcache, p, c.chunk, dscratch.data(),
                      dout.data(), Stream{});
  } else {
    attention(dq.data(), c.n_tokens, c.pos0, dcache, p, dscratch.data(), dout.data(), Stream{});
  }
  const std::vector<float> got = dout.download();
  if (!prefill && c.head_dim % 32 == 0) {
    // The decode fusion: the same output, and its blocks as quantize_q8_1 makes them.
    DeviceArray<float> fused_out(q.size());
    DeviceArray<BlockQ8_1> fused_q(q.size() / 32), want_q(q.size() / 32);
    attention(dq.data(), c.n_tokens, c.pos0, dcache, p, dscratch.data(), fused_out.data(), Stream{},
              fused_q.data());
    const std::vector<float> fused = fused_out.download();
    EXPECT_EQ(std::memcmp(fused.data(), got.data(), got.size() * sizeof(float)), 0);
    quantize_q8_1(dout.data(), 1, static_cast<int64_t>(q.size()), want_q.data(), Stream{});
    const std::vector<BlockQ8_1> gq = fused_q.download(), wq = want_q.download();
    for (size_t b = 0; b < gq.size(); ++b) {
      ASSERT_EQ(std::memcmp(&gq[b], &wq[b], sizeof(BlockQ8_1)), 0) << "quantized block " << b;
    }
  }
  if (!prefill) {
    // The splits merged by each (token, head)'s last block instead of a second kernel: the
    // same bits, and the counters left at zero for the next launch (run twice).
    const auto n_counters = static_cast<size_t>(c.n_tokens * c.n_head);
    const std::vector<unsigned> zeros(n_counters, 0u);
    DeviceArray<unsigned> counters{std::span<const unsigned>(zeros)};
    for (int run = 0; run < 2; ++run) {
      DeviceArray<float> merged(q.size());
      attention(dq.data(), c.n_tokens, c.pos0, dcache, p, dscratch.data(), merged.data(), Stream{},
                nullptr, counters.data());
      const std::vector<float> m = merged.download();
      EXPECT_EQ(std::memcmp(m.data(), got.data(), got.size() * sizeof(float)), 0) << "run " << run;
      EXPECT_EQ(counters.download(), zeros) << "run " << run;
    }
  }

  if (c.n_rows >= c.pos0 + c.n_tokens) {
    const std::vector<float> paged = paged_attention(c, p, k, v, dq.data(), q.size());
#if defined(QRUN_CUDA_GPU_TEST)
    const float tol = prefill ? std::ldexp(1.0f, -10) * 8.0f : 0.0f;  // |v| < 8 here
#else
    const float tol = 0.0f;
#endif
    for (size_t i = 0; i < got.size(); ++i) {
      if (tol == 0.0f) {
        ASSERT_EQ(std::memcmp(&paged[i], &got[i], sizeof(float)), 0)
            << "paged: element " << i << ": " << paged[i] << " against " << got[i];
      } else {
        ASSERT_NEAR(paged[i], got[i], tol) << "paged: element " << i;
      }
    }
  }

  CpuBackend cpu(1, Isa::kGeneric);
  std::vector<float> cpu_out(q.size());
  KvLayerView hcache{DType::kF16, DType::kF16, k.data(),  v.data(),
                     c.n_rows,    c.n_head_kv, c.head_dim};
  cpu.attention(q.data(), c.n_tokens, c.pos0, hcache, p, cpu_out.data());

  const double eps = std::numeric_limits<float>::epsilon();
  const double f16_eps = std::ldexp(1.0, -11);  // F16 rounding, relative
  double worst = 0.0, worst_tol = 0.0;          // the largest error / max|v| and its bound
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    const int64_t hi = c.pos0 + t;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
    for (int64_t h = 0; h < c.n_head; ++h) {
      const float* qh = q.data() + (t * c.n_head + h) * c.head_dim;
      const int64_t kv_off = (h / (c.n_head / c.n_head_kv)) * c.head_dim;
      std::vector<double> scores;
      double max_score = -std::numeric_limits<double>::infinity(), ds = 0.0, vmax = 0.0;
      for (int64_t pos = lo; pos <= hi; ++pos) {
        const uint16_t* kr = k.data() + (pos % c.n_rows) * row_elems + kv_off;
        double dot = 0.0, mag = 0.0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += static_cast<double>(qh[d]) * fp16_to_fp32(kr[d]);
          mag += std::fabs(static_cast<double>(qh[d]) * fp16_to_fp32(kr[d]));
        }
        scores.push_back(p.softcap > 0.0f ? p.softcap * std::tanh(dot * p.scale / p.softcap)
                                          : dot * p.scale);
        max_score = std::max(max_score, scores.back());
        // (The soft-cap's slope is at most 1; its tanhf is within 2 ulp of a value <= cap.)
        ds = std::max(ds, (static_cast<double>(c.head_dim) * eps + (prefill ? f16_eps : 0.0)) *
                                  p.scale * mag +
                              4.0 * eps * p.softcap);
      }
      double l = 0.0;
      std::vector<double> want(static_cast<size_t>(c.head_dim), 0.0);
      for (int64_t pos = lo; pos <= hi; ++pos) {
        const double w = std::exp(scores[static_cast<size_t>(pos - lo)] - max_score);
        l += w;
        const uint16_t* vr = v.data() + (pos % c.n_rows) * row_elems + kv_off;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          want[static_cast<size_t>(d)] += w * fp16_to_fp32(vr[d]);
          vmax = std::max(vmax, std::fabs(static_cast<double>(fp16_to_fp32(vr[d]))));
        }
      }
      const double n = static_cast<double>(hi - lo + 1);
      const double weights = prefill ? 2.0 * f16_eps + n * std::ldexp(1.0, -24) : 0.0;
      const double tol = (4.0 * ds + 64.0 * eps + weights) * vmax;
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const size_t i = static_cast<size_t>((t * c.n_head + h) * c.head_dim + d);
        const double err = std::fabs(got[i] - want[static_cast<size_t>(d)] / l);
        if (err / vmax > worst) {
          worst = err / vmax;
          worst_tol = tol / vmax;
        }
        ASSERT_NEAR(got[i], want[static_cast<size_t>(d)] / l, tol)
            << "token " << t << " head " << h << " dim " << d;
        ASSERT_NEAR(got[i], cpu_out[i], vmax / 256.0)
            << "token " << t << " head " << h << " dim " << d;
      }
    }
  }
  std::printf("%s path: max error %.3g max|v| (bound there %.3g)\n", prefill ? "prefill" : "decode",
              worst, worst_tol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaEmuAttention,
    ::testing::Values(Case{64, 4, 4, 0, 1, 0, 16, 0},         // the first token: one position
                      Case{128, 8, 2, 37, 1, 0, 64, 0},       // GQA 4, one partial split
                      Case{256, 6, 1, 700, 1, 0, 1024, 0},    // GQA 6, three splits
                      Case{128, 4, 1, 255, 3, 0, 300, 0},     // several tokens across a split edge
                      Case{64, 8, 2, 500, 2, 100, 128, 0},    // sliding window over a ring
                      Case{256, 2, 2, 1000, 1, 300, 512, 0},  // window spanning two splits
                      Case{96, 3, 3, 20, 1, 0, 32, 0},        // head_dim 96: three dims per lane
                      Case{4, 16, 16, 300, 2, 0, 512, 0},     // head_dim 4 (TinyLlama 5M)
                      Case{80, 4, 2, 40, 1, 0, 64, 0},        // head_dim 80: lanes idle in round 3
                      // The prefill path, through attention() from kPrefillMinTokens tokens:
                      Case{64, 4, 4, 0, 16, 0, 64, 0},         // a first prompt of 16 tokens
                      Case{128, 8, 2, 0, 33, 0, 64, 0},        // GQA 4, 33 tokens
                      Case{128, 6, 1, 37, 100, 0, 256, 0},     // GQA 6, after a first prompt
                      Case{64, 8, 2, 0, 512, 0, 512, 0},       // pp512's shape (fewer heads)
                      Case{256, 4, 2, 300, 100, 128, 256, 0},  // a window over a ring that wraps
                      Case{256, 2, 1, 0, 200, 0, 256, 0},      // head_dim 256
                      Case{96, 3, 3, 20, 20, 0, 64, 0},        // head_dim 96
                      Case{4, 16, 16, 300, 17, 0, 512, 0},     // head_dim 4
                      // and directly, with chunks of a given size:
                      Case{128, 4, 4, 10, 50, 0, 128, 16},  // chunks of 16, 16, 16, 2
                      Case{64, 4, 2, 1000, 40, 64, 128,
                           16},                          // a window, chunks across the ring's end
                      Case{80, 4, 2, 40, 3, 0, 64, 1},   // one token per chunk
                      Case{128, 8, 2, 37, 1, 0, 64, 4},  // one token, GQA 4
                      // Gemma 2's soft-capped logits (a cap of 2 squashes the biased rows'
                      // scores of 2 to 4), decode over three splits and prefill over a ring:
                      Case{256, 8, 4, 700, 1, 0, 1024, 0, 2.0f},
                      Case{256, 4, 2, 300, 100, 128, 256, 0, 2.0f},
                      Case{128, 4, 4, 10, 50, 0, 128, 16, 2.0f}));

}  // namespace
}  // namespace qrun::kernels::cuda
