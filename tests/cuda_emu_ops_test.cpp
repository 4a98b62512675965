// The CUDA element-wise, RMS norm and RoPE kernels, run under the SIMT emulator, against
// the scalar references of the CPU backend, on awkward sizes with NaN-filled outputs
// (emulated device memory starts as NaN). Under the emulator the kernels call glibc's
// expf/tanhf/cosf/sinf and are compiled without FMA contraction, so they must equal the
// references bit for bit (kUlps = 0); a GPU run of the same checks would allow the few
// float ulps that its math functions and FMA contraction differ by (see each .cu file).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "ggml-like/fp16.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/ref_kernels.h"
#include "kernels/cuda/ops.h"
#include "tests/support/random_data.h"

namespace qrun::kernels::cuda {
namespace {

using test::random_vector;

#if defined(QRUN_SIMT_EMU)
constexpr float kUlps = 0.0f;
#else
constexpr float kUlps = 4.0f;
#endif

constexpr int64_t kSizes[] = {1, 7, 31, 32, 33, 255, 256, 4097};

// |got - want| <= ulps float ulps of `magnitude` (the size of the terms that were rounded).
void expect_near_ulps(const std::vector<float>& got, const std::vector<float>& want,
                      const std::vector<float>& magnitude, float ulps, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const float tol = ulps * std::numeric_limits<float>::epsilon() * magnitude[i];
    const bool ok = ulps == 0.0f
                        ? std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])
                        : std::fabs(got[i] - want[i]) <= tol;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " [" << i << "] of " << got.size() << ": got " << got[i] << ", want "
                    << want[i];
    }
  }
}

std::vector<float> abs_of(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

TEST(CudaEmuOps, ElementwiseMatchesReference) {
  for (int64_t n : kSizes) {
    const std::vector<float> a = random_vector(n, 1, 3.0f);
    std::vector<float> b = random_vector(n, 2, 3.0f);
    // GELU's three regimes: below -10 (0), the F16 table, at or above 10 (identity).
    if (n > 3) {
      b[0] = -12.0f;
      b[1] = 10.0f;
      b[2] = 9.99f;
    }
    DeviceArray<float> da{std::span<const float>(a)};
    DeviceArray<float> db{std::span<const float>(b)};
    DeviceArray<float> dout(static_cast<size_t>(n));
    std::vector<float> want(static_cast<size_t>(n));
    std::vector<float> mag(static_cast<size_t>(n));
    for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(a[i]) + std::fabs(b[i]);

    add(da.data(), db.data(), n, dout.data(), Stream{});
    ref::add(a.data(), b.data(), n, want.data());
    expect_near_ulps(dout.download(), want, mag, 0.0f, "add");  // exact on any device

    swiglu(db.data(), da.data(), n, dout.data(), Stream{});
    ref::swiglu(b.data(), a.data(), n, want.data());
    expect_near_ulps(dout.download(), want, abs_of(want), kUlps, "swiglu");

    // One F16 ulp (2^-10 relative, covering a tanhf ulp that moves the F16 rounding).
    geglu(db.data(), da.data(), n, dout.data(), Stream{});
    ref::geglu(b.data(), a.data(), n, want.data());
    expect_near_ulps(dout.download(), want, abs_of(want), kUlps == 0.0f ? 0.0f : 8192.0f, "geglu");

    scale(da.data(), n, 0.37f, dout.data(), Stream{});
    for (int64_t i = 0; i < n; ++i) want[i] = a[i] * 0.37f;
    expect_near_ulps(dout.download(), want, mag, 0.0f, "scale");

    softcap(da.data(), n, 2.5f, dout.data(), Stream{});
    for (int64_t i = 0; i < n; ++i) want[i] = 2.5f * std::tanh(a[i] * (1.0f / 2.5f));
    expect_near_ulps(dout.download(), want, abs_of(want), kUlps, "softcap");

    // In place: out aliases the first input.
    add(da.data(), db.data(), n, da.data(), Stream{});
    ref::add(a.data(), b.data(), n, want.data());
    expect_near_ulps(da.download(), want, mag, 0.0f, "add in place");
  }
}

// RMS norm: the mean of squares is summed in double in another order than the reference,
// which can move the float mean by one ulp at a rounding boundary, hence 4 ulps of |y|.
TEST(CudaEmuOps, RmsNormMatchesReference) {
  std::vector<int64_t> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.insert(sizes.end(), {4096, 8192, 8196});
  for (int64_t n : sizes) {
    for (int64_t n_rows : {1, 3}) {
      const std::vector<float> x = random_vector(n * n_rows, 3, 3.0f);
      const std::vector<float> w = random_vector(n, 4, 1.0f);
      DeviceArray<float> dx{std::span<const float>(x)};
      DeviceArray<float> dw{std::span<const float>(w)};
      DeviceArray<float> dy(x.size());
      rms_norm(dx.data(), dw.data(), n_rows, n, 1e-6f, dy.data(), Stream{});
      std::vector<float> want(x.size());
      for (int64_t r = 0; r < n_rows; ++r) {
        ref::rms_norm_row(x.data() + r * n, w.data(), n, 1e-6f, want.data() + r * n);
      }
      expect_near_ulps(dy.download(), want, abs_of(want), 4.0f, "rms_norm");
      // In place.
      rms_norm(dx.data(), dw.data(), n_rows, n, 1e-6f, dx.data(), Stream{});
      expect_near_ulps(dx.download(), want, abs_of(want), 4.0f, "rms_norm in place");
      // A row one float off 16-byte alignment.
      DeviceArray<float> dx1(x.size() + 1);
      copy_to_device(dx1.data() + 1, x.data(), x.size() * sizeof(float));
      rms_norm(dx1.data() + 1, dw.data(), n_rows, n, 1e-6f, dy.data(), Stream{});
      expect_near_ulps(dy.download(), want, abs_of(want), 4.0f, "rms_norm, unaligned rows");
    }
  }
}

// The decode fusions must change nothing but the launch count: RMS norm, add + RMS norm and
// the gated activations with a quantized output write the same floats as without it, and
// the same blocks as quantize_q8_1 makes from those floats; add_rms_norm leaves in x what
// add wrote and in y (here aliasing delta, as a decoder calls it) what rms_norm of that
// wrote. Bit for bit on any device: the fused kernels run the same arithmetic.
void expect_same_blocks(const DeviceArray<BlockQ8_1>& got, const std::vector<float>& from,
                        const char* what) {
  const auto n = static_cast<int64_t>(from.size());
  DeviceArray<float> dfrom{std::span<const float>(from)};
  DeviceArray<BlockQ8_1> want(static_cast<size_t>(n / 32));
  quantize_q8_1(dfrom.data(), 1, n, want.data(), Stream{});
  const std::vector<BlockQ8_1> g = got.download();
  const std::vector<BlockQ8_1> w = want.download();
  for (size_t b = 0; b < g.size(); ++b) {
    ASSERT_EQ(std::memcmp(&g[b], &w[b], sizeof(BlockQ8_1)), 0) << what << ": block " << b;
  }
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  expect_near_ulps(got, want, want, 0.0f, what);
}

TEST(CudaEmuOps, FusedQuantizedOutputsMatchSeparateLaunches) {
  for (int64_t n : {32, 96, 4096, 4128}) {
    for (int64_t n_rows : {1, 3}) {
      const int64_t total = n * n_rows;
      const std::vector<float> x = random_vector(total, 5, 3.0f);
      const std::vector<float> delta = random_vector(total, 6, 3.0f);
      const std::vector<float> w = random_vector(n, 7, 1.0f);
      DeviceArray<float> dw{std::span<const float>(w)};
      DeviceArray<float> dx{std::span<const float>(x)};
      DeviceArray<float> dy(static_cast<size_t>(total));
      DeviceArray<BlockQ8_1> dq(static_cast<size_t>(total / 32));

      rms_norm(dx.data(), dw.data(), n_rows, n, 1e-6f, dy.data(), Stream{});
      const std::vector<float> normed = dy.download();
      rms_norm(dx.data(), dw.data(), n_rows, n, 1e-6f, dy.data(), Stream{}, dq.data());
      expect_same_bits(dy.download(), normed, "rms_norm with its quantized output");
      expect_same_blocks(dq, normed, "rms_norm's quantized output");

      // Unfused: x + delta, then its norm.
      DeviceArray<float> dd{std::span<const float>(delta)};
      add(dx.data(), dd.data(), total, dy.data(), Stream{});
      const std::vector<float> sum = dy.download();
      rms_norm(dy.data(), dw.data(), n_rows, n, 1e-6f, dy.data(), Stream{});
      const std::vector<float> sum_normed = dy.download();
      for (BlockQ8_1* q : {static_cast<BlockQ8_1*>(nullptr), dq.data()}) {
        DeviceArray<float> sx{std::span<const float>(x)};
        DeviceArray<float> sd{std::span<const float>(delta)};
        add_rms_norm(sx.data(), sd.data(), dw.data(), n_rows, n, 1e-6f, sd.data(), Stream{}, q);
        expect_same_bits(sx.download(), sum, "add_rms_norm's x");
        expect_same_bits(sd.download(), sum_normed, "add_rms_norm's y (aliasing delta)");
        if (q != nullptr) expect_same_blocks(dq, sum_normed, "add_rms_norm's quantized output");
      }

      using Gated = void (*)(const float*, const float*, int64_t, float*, Stream, BlockQ8_1*);
      for (const Gated op : {static_cast<Gated>(swiglu), static_cast<Gated>(geglu)}) {
        op(dx.data(), dd.data(), total, dy.data(), Stream{}, nullptr);
        const std::vector<float> gated = dy.download();
        op(dx.data(), dd.data(), total, dy.data(), Stream{}, dq.data());
        expect_same_bits(dy.download(), gated, "gated activation with its quantized output");
        expect_same_blocks(dq, gated, "gated activation's quantized output");
      }
    }
  }
}

// norm_add_rms_norm (Gemma's post-norm, residual add and next norm in one launch) leaves in
// x, delta and y the bits of rms_norm of delta in place, then add_rms_norm. Rows a thread
// holds 1, 2, 4 and 8 elements of, and y aliasing delta (as the model calls it) or not.
// Under QRUN_CUDA_NORM=v1 (streaming norms) the fused kernel is not offered.
TEST(CudaEmuOps, NormAddRmsNormHasTheBitsOfItsTwoLaunches) {
  const char* norm = std::getenv("QRUN_CUDA_NORM");
  if (norm != nullptr && std::strcmp(norm, "v1") == 0) {
    EXPECT_FALSE(norm_add_rms_norm_fits(640));
    return;
  }
  EXPECT_FALSE(norm_add_rms_norm_fits(8193));
  for (int64_t n : {32, 640, 1056, 2080, 4128}) {
    ASSERT_TRUE(norm_add_rms_norm_fits(n)) << n;
    for (int64_t n_rows : {1, 3}) {
      const int64_t total = n * n_rows;
      const std::vector<float> x = random_vector(total, 8, 3.0f);
      const std::vector<float> delta = random_vector(total, 9, 40.0f);
      const std::vector<float> wd = random_vector(n, 10, 1.0f);
      const std::vector<float> w = random_vector(n, 11, 1.0f);
      DeviceArray<float> dwd{std::span<const float>(wd)};
      DeviceArray<float> dw{std::span<const float>(w)};
      // The two launches.
      DeviceArray<float> ux{std::span<const float>(x)};
      DeviceArray<float> ud{std::span<const float>(delta)};
      DeviceArray<float> uy(static_cast<size_t>(total));
      rms_norm(ud.data(), dwd.data(), n_rows, n, 1e-6f, ud.data(), Stream{});
      add_rms_norm(ux.data(), ud.data(), dw.data(), n_rows, n, 1e-6f, uy.data(), Stream{});
      const std::vector<float> want_x = ux.download();
      const std::vector<float> want_d = ud.download();
      const std::vector<float> want_y = uy.download();
      DeviceArray<BlockQ8_1> dq(static_cast<size_t>(total / 32));
      for (BlockQ8_1* q : {static_cast<BlockQ8_1*>(nullptr), dq.data()}) {
        for (bool alias : {false, true}) {
          DeviceArray<float> fx{std::span<const float>(x)};
          DeviceArray<float> fd{std::span<const float>(delta)};
          DeviceArray<float> fy(static_cast<size_t>(total));
          float* y = alias ? fd.data() : fy.data();
          norm_add_rms_norm(fx.data(), fd.data(), dwd.data(), dw.data(), n_rows, n, 1e-6f, y,
                            Stream{}, q);
          expect_same_bits(fx.download(), want_x, "norm_add_rms_norm's x");
          expect_same_bits(alias ? fd.download() : fy.download(), want_y, "norm_add_rms_norm's y");
          if (!alias) expect_same_bits(fd.download(), want_d, "norm_add_rms_norm's delta");
          if (q != nullptr) expect_same_blocks(dq, want_y, "norm_add_rms_norm's quantized output");
        }
      }
    }
  }
}

// norm_rope_qk (the per-head Q/K norms, RoPE with the K/V store and q's scale in one
// launch) leaves in q, k and the cache rows the bits of its separate launches: rms_norm of
// q's and of k's heads, rope_qk with the store, then scale. Heads a block's threads fill
// exactly (32, 128, 256) or not (80), groups of four heads full and partial, only one side
// normed, and rotations of part of each head.
TEST(CudaEmuOps, NormRopeQkHasTheBitsOfItsLaunches) {
  EXPECT_TRUE(norm_rope_fits(256));
  EXPECT_FALSE(norm_rope_fits(257));
  EXPECT_FALSE(norm_rope_fits(0));
  const int64_t n_head = 5, n_head_kv = 2, n_rows = 8;
  for (const auto& [head_dim, n_rot] :
       {std::pair<int64_t, int64_t>{32, 32}, {80, 80}, {128, 64}, {256, 256}}) {
    for (int64_t n_tokens : {1, 3}) {
      const int64_t nq = n_tokens * n_head * head_dim, nk = n_tokens * n_head_kv * head_dim;
      const std::vector<float> q = random_vector(nq, 12, 20.0f);
      const std::vector<float> k = random_vector(nk, 13, 20.0f);
      const std::vector<float> v = random_vector(nk, 14, 3.0f);
      const std::vector<float> wq = random_vector(head_dim, 15, 1.0f);
      const std::vector<float> wk = random_vector(head_dim, 16, 1.0f);
      const std::vector<int32_t> positions = {6, 41, 1000};
      DeviceArray<float> dwq{std::span<const float>(wq)}, dwk{std::span<const float>(wk)};
      DeviceArray<float> dv{std::span<const float>(v)};
      DeviceArray<int32_t> dpos{std::span<const int32_t>(positions)};
      RopeParams p;
      p.n_rot = n_rot;
      p.freq_base = 10000.0f;
      p.mode = RopeMode::kNeox;
      for (const auto& [norm_q, norm_k] : {std::pair{true, true}, {true, false}, {false, true}}) {
        for (float q_scale : {1.0f, 0.0625f}) {
          const HeadNormWeights norms{norm_q ? dwq.data() : nullptr, norm_k ? dwk.data() : nullptr,
                                      1e-6f, q_scale};
          // The launches it replaces, then the fused one.
          std::vector<std::vector<float>> got_q, got_k;
          std::vector<std::vector<uint16_t>> got_kc, got_vc;
          for (bool fused : {false, true}) {
            DeviceArray<float> dq{std::span<const float>(q)}, dk{std::span<const float>(k)};
            DeviceArray<uint16_t> kc(static_cast<size_t>(n_rows * n_head_kv * head_dim));
            DeviceArray<uint16_t> vc(kc.size());
            fill_zero(kc.data(), kc.size() * sizeof(uint16_t));
            fill_zero(vc.data(), vc.size() * sizeof(uint16_t));
            const KvDestination store{dv.data(), 5, KvRowMap{n_rows}, kc.data(), vc.data()};
            if (fused) {
              norm_rope_qk(dq.data(), n_head, dk.data(), n_head_kv, n_tokens, head_dim, dpos.data(),
                           p, norms, Stream{}, &store);
            } else {
              if (norm_q) {
                rms_norm(dq.data(), dwq.data(), n_tokens * n_head, head_dim, 1e-6f, dq.data(),
                         Stream{});
              }
              if (norm_k) {
                rms_norm(dk.data(), dwk.data(), n_tokens * n_head_kv, head_dim, 1e-6f, dk.data(),
                         Stream{});
              }
              rope_qk(dq.data(), n_head, dk.data(), n_head_kv, n_tokens, head_dim, dpos.data(), p,
                      Stream{}, &store);
              if (q_scale != 1.0f) scale(dq.data(), nq, q_scale, dq.data(), Stream{});
            }
            got_q.push_back(dq.download());
            got_k.push_back(dk.download());
            got_kc.push_back(kc.download());
            got_vc.push_back(vc.download());
          }
          SCOPED_TRACE(testing::Message()
                       << "head_dim " << head_dim << ", " << n_tokens << " tokens, norms " << norm_q
                       << norm_k << ", scale " << q_scale);
          expect_same_bits(got_q[1], got_q[0], "norm_rope_qk's q");
          expect_same_bits(got_k[1], got_k[0], "norm_rope_qk's k");
          EXPECT_EQ(got_kc[1], got_kc[0]) << "norm_rope_qk's stored keys";
          EXPECT_EQ(got_vc[1], got_vc[0]) << "norm_rope_qk's stored values";
        }
      }
    }
  }
}

struct RopeCase {
  int64_t head_dim;
  int64_t n_rot;
  RopeMode mode;
  bool freq_factors;
  bool yarn = false;  // ext_factor 1, a ramp over pairs 2 .. 20
};

TEST(CudaEmuOps, RopeMatchesCpuBackend) {
  CpuBackend cpu(1, Isa::kGeneric);
  const RopeCase cases[] = {
      {64, 64, RopeMode::kNormal, false},       {128, 128, RopeMode::kNeox, false},
      {256, 256, RopeMode::kNeox, true},        {128, 64, RopeMode::kNormal, true},
      {96, 32, RopeMode::kNeox, false},         {2, 2, RopeMode::kNormal, false},
      {128, 128, RopeMode::kNeox, false, true}, {128, 64, RopeMode::kNormal, true, true}};
  for (const RopeCase& c : cases) {
    const int64_t n_tokens = 5, n_head = 9;  // three blocks of heads, the last partial
    const std::vector<int32_t> positions = {0, 1, 17, 4095, 131071};
    const std::vector<float> x = random_vector(n_tokens * n_head * c.head_dim, 5, 3.0f);
    std::vector<float> factors(static_cast<size_t>(c.n_rot / 2));
    for (size_t i = 0; i < factors.size(); ++i)
      factors[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
    RopeParams p;
    p.n_rot = c.n_rot;
    p.freq_base = 500000.0f;
    p.freq_scale = 0.5f;
    p.mode = c.mode;
    p.attn_factor = 1.125f;
    if (c.yarn) {
      p.ext_factor = 1.0f;
      p.yarn_corr[0] = 2.0f;
      p.yarn_corr[1] = 20.0f;
    }
    DeviceArray<float> dx{std::span<const float>(x)};
    DeviceArray<int32_t> dpos{std::span<const int32_t>(positions)};
    DeviceArray<float> dff{std::span<const float>(factors)};
    RopeParams dp = p;
    if (c.freq_factors) {
      p.freq_factors = factors.data();
      dp.freq_factors = dff.data();
    }
    rope(dx.data(), n_tokens, n_head, c.head_dim, dpos.data(), dp, Stream{});
    std::vector<float> want = x;
    cpu.rope(want.data(), n_tokens, n_head, c.head_dim, positions, p);
    // Each output is x0 * c - x1 * s: a few ulps of |x0| + |x1| on a GPU.
    std::vector<float> mag(x.size());
    for (size_t i = 0; i < x.size(); ++i) mag[i] = 2.0f * (std::fabs(x[i]) + 4.0f);
    expect_near_ulps(dx.download(), want, mag, kUlps, "rope");

    // rope_qk: Q (these 9 heads) and K (3 heads of other values) in one launch, each with
    // the bits rope gives it alone.
    const int64_t n_head_kv = 3;
    const std::vector<float> k = random_vector(n_tokens * n_head_kv * c.head_dim, 6, 3.0f);
    DeviceArray<float> dq2{std::span<const float>(x)};
    DeviceArray<float> dk2{std::span<const float>(k)};
    DeviceArray<float> dk1{std::span<const float>(k)};
    rope_qk(dq2.data(), n_head, dk2.data(), n_head_kv, n_tokens, c.head_dim, dpos.data(), dp,
            Stream{});
    rope(dk1.data(), n_tokens, n_head_kv, c.head_dim, dpos.data(), dp, Stream{});
    const std::vector<float> alone = dx.download();
    expect_near_ulps(dq2.download(), alone, alone, 0.0f, "rope_qk's q");
    const std::vector<float> k_alone = dk1.download();
    expect_near_ulps(dk2.download(), k_alone, k_alone, 0.0f, "rope_qk's k");
  }
}

}  // namespace
}  // namespace qrun::kernels::cuda
