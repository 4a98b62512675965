// KV caches of other types than F32/F16 (BF16, Q8_0, Q4_0, and K and V of different types)
// on every SIMD ISA this host runs:
// - the KV row widening kernels (to_float) are bit-identical to the reference dequantizers;
// - attend_mixed against the reference attend_mixed, on every pair of cache types but
//   F32/F32 and F16/F16, head_dim 32, 64, 128 and 256, n_kv within, at and across 32-row
//   tiles, 1..12 query heads per KV head (GQA ratios; groups of 8 split in chunks), rows
//   read as a ring from the middle, NaN-prefilled outputs with gaps. Tolerance: per head
//   normalized MSE 1e-6, as for the F16 cache (the ISA's dot products sum in another
//   order, which can flip one F16 rounding of the accumulator when V is F16);
// - through CpuBackend: kv_store writes the same bytes on every ISA, quantized rows are
//   llama.cpp's (Q8_0 with its CPU quantizer, Q4_0 with the reference one), and attention
//   with GQA, on a full cache and a sliding-window ring, equals attention computed in double
//   over the stored rows dequantized and q as K's dot type holds it (an oracle that shares
//   no code with the kernels but the quantizers), up to float rounding. How far a quantized
//   cache moves a real model's output is forward_real_kvq_test's subject.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "tests/support/attention_isas.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr DType kKvTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};

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

// Rows of floats converted to `type` as the generic backend's kv_store converts them.
std::vector<uint8_t> convert_rows(const std::vector<float>& x, int64_t n_rows, int64_t row,
                                  DType type) {
  const KvLayerView view{type, type, nullptr, nullptr, n_rows, 1, row};
  std::vector<uint8_t> k(view.k_row_bytes() * static_cast<size_t>(n_rows));
  std::vector<uint8_t> v(k.size());
  const KvLayerView cache{type, type, k.data(), v.data(), n_rows, 1, row};
  CpuBackend generic(1, Isa::kGeneric);
  generic.kv_store(cache, 0, n_rows, x.data(), x.data());
  return k;
}

// Normalized MSE of each head (rows out_stride apart); the gaps must stay NaN.
std::vector<double> head_nmse(const std::vector<float>& got, const std::vector<float>& ref,
                              int64_t n_q, int64_t head_dim, int64_t out_stride) {
  std::vector<double> out;
  for (int64_t h = 0; h < n_q; ++h) {
    double err = 0.0, mag = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      const size_t u = static_cast<size_t>(h * out_stride + d);
      const double diff = double{got[u]} - ref[u];
      err += std::isnan(diff) ? 1e30 : diff * diff;
      mag += double{ref[u]} * ref[u];
    }
    out.push_back(err / std::max(mag, 1e-3 * static_cast<double>(head_dim)));
    for (int64_t d = head_dim; d < out_stride; ++d) {
      EXPECT_TRUE(std::isnan(got[static_cast<size_t>(h * out_stride + d)])) << "gap written";
    }
  }
  return out;
}

// The KvRowsMixed the backend builds for a KV head at `k`, `v` of a table's kernels.
KvRowsMixed mixed_rows(const CpuKernels& t, DType kt, DType vt, const uint8_t* k, const uint8_t* v,
                       int64_t row_elems, int64_t first, int64_t n, int64_t n_ring) {
  const MatmulKernels& mk = t.for_type(kt);
  KvRowsMixed r;
  r.k = k;
  r.v = v;
  r.k_stride = row_size(kt, row_elems);
  r.v_stride = row_size(vt, row_elems);
  r.first = first;
  r.n = n;
  r.n_ring = n_ring;
  r.v_type = vt;
  r.k_quantize = mk.act_type == DType::kF32 ? nullptr : mk.quantize_act;
  r.k_dot = mk.vec_dot;
  r.v_to_float = t.to_float[static_cast<size_t>(vt)];
  return r;
}

TEST(KernelsKvTypes, ToFloatMatchesReference) {
  for (Isa isa : simd_isas()) {
    for (DType type : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      for (int64_t n : {32, 64, 96, 4096}) {
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n);
        const std::vector<float> x = random_floats(static_cast<size_t>(n), 5 + n, 1.0f);
        const std::vector<uint8_t> row = convert_rows(x, 1, n, type);
        std::vector<float> ref(static_cast<size_t>(n) + 1, kNaN), got(ref);
        type_traits(type).to_float(row.data(), ref.data(), n);
        cpu_kernels(isa).to_float[static_cast<size_t>(type)](row.data(), got.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), static_cast<size_t>(n) * sizeof(float)), 0);
        EXPECT_TRUE(std::isnan(got.back())) << "wrote past the end";
      }
    }
  }
}

TEST(KernelsKvTypes, AttendMixedMatchesReference) {
  const int64_t n_kvs[] = {1, 7, 31, 32, 33, 100, 300};
  const int64_t n_qs[] = {1, 3, 8, 12};
  const int64_t n_head_kv = 2;  // rows hold two KV heads: the second one is read
  uint32_t seed = 500;
  for (int64_t head_dim : {32, 64, 128, 256}) {
    const int64_t row = n_head_kv * head_dim;
    for (int64_t n_kv : n_kvs) {
      const std::vector<float> kf = random_floats(static_cast<size_t>(n_kv * row), ++seed, 1.0f);
      const std::vector<float> vf = random_floats(static_cast<size_t>(n_kv * row), ++seed, 1.0f);
      for (DType kt : kKvTypes) {
        const std::vector<uint8_t> kc = convert_rows(kf, n_kv, row, kt);
        for (DType vt : kKvTypes) {
          if (kt == vt && (kt == DType::kF32 || kt == DType::kF16)) continue;
          const std::vector<uint8_t> vc = convert_rows(vf, n_kv, row, vt);
          const uint8_t* k = kc.data() + row_size(kt, head_dim);
          const uint8_t* v = vc.data() + row_size(vt, head_dim);
          for (int64_t n_q : n_qs) {
            const int64_t q_stride = head_dim + 3, out_stride = head_dim + 5;
            const std::vector<float> q =
                random_floats(static_cast<size_t>(n_q * q_stride), ++seed, 1.0f);
            const float scale = (seed % 2 ? 1.0f : 4.0f) / std::sqrt(static_cast<float>(head_dim));
            for (int64_t first : {int64_t{0}, n_kv / 2}) {
              std::vector<float> ref(static_cast<size_t>(n_q * out_stride), kNaN);
              const CpuKernels& g = cpu_kernels(Isa::kGeneric);
              g.attend_mixed(q.data(), q_stride, n_q,
                             mixed_rows(g, kt, vt, k, v, row, first, n_kv, n_kv), head_dim, scale,
                             ref.data(), out_stride, nullptr);
              for (Isa isa : isas_with_own_attention(simd_isas(), kt, vt)) {
                SCOPED_TRACE(testing::Message()
                             << isa_name(isa) << " K " << dtype_name(kt) << " V " << dtype_name(vt)
                             << " head_dim " << head_dim << " n_kv " << n_kv << " n_q " << n_q
                             << " first " << first);
                const CpuKernels& t = cpu_kernels(isa);
                std::vector<float> got(ref.size(), kNaN);
                t.attend_mixed(q.data(), q_stride, n_q,
                               mixed_rows(t, kt, vt, k, v, row, first, n_kv, n_kv), head_dim, scale,
                               got.data(), out_stride, nullptr);
                for (double e : head_nmse(got, ref, n_q, head_dim, out_stride)) EXPECT_LE(e, 1e-6);
              }
            }
          }
        }
      }
    }
  }
}

// Attention in double over exactly what the kernels read: the cache rows as stored (each
// position's K and V rows converted as the generic kv_store converts them, widened by the
// reference dequantizers) and q as K's dot type holds it (quantized to Q8_0 and back for
// Q8_0 and Q4_0 keys, rounded to F16 or BF16 for those keys). out: [n_pos, n_head,
// head_dim] for positions 0 .. n_pos - 1, each over its window (0: every earlier position).
std::vector<float> attention_over_stored(const std::vector<float>& q, const std::vector<float>& kin,
                                         const std::vector<float>& vin, DType kt, DType vt,
                                         int64_t n_pos, int64_t n_head, int64_t n_head_kv,
                                         int64_t head_dim, float scale, int64_t window) {
  const int64_t row = n_head_kv * head_dim;
  const auto widen = [&](const std::vector<float>& x, DType t) {
    const std::vector<uint8_t> stored = convert_rows(x, n_pos, row, t);
    std::vector<float> out(x.size());
    for (int64_t p = 0; p < n_pos; ++p) {
      type_traits(t).to_float(stored.data() + static_cast<size_t>(p) * row_size(t, row),
                              out.data() + p * row, row);
    }
    return out;
  };
  const std::vector<float> kd = widen(kin, kt);
  const std::vector<float> vd = widen(vin, vt);
  const MatmulKernels& mk = cpu_kernels(Isa::kGeneric).for_type(kt);
  std::vector<float> out(q.size());
  std::vector<uint8_t> qc(row_size(mk.act_type, head_dim));
  std::vector<float> qh(static_cast<size_t>(head_dim));
  for (int64_t p = 0; p < n_pos; ++p) {
    for (int64_t h = 0; h < n_head; ++h) {
      const float* qp = q.data() + (p * n_head + h) * head_dim;
      if (mk.act_type == DType::kF32) {
        std::copy(qp, qp + head_dim, qh.begin());
      } else {
        mk.quantize_act(qp, qc.data(), head_dim);
        type_traits(mk.act_type).to_float(qc.data(), qh.data(), head_dim);
      }
      const int64_t hk = h / (n_head / n_head_kv);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      std::vector<double> w;
      double max = -1e300, sum = 0.0;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
          dot += double{qh[static_cast<size_t>(d)]} *
                 kd[static_cast<size_t>(j * row + hk * head_dim + d)];
        }
        w.push_back(dot * scale);
        max = std::max(max, w.back());
      }
      for (double& x : w) sum += (x = std::exp(x - max));
      for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (int64_t j = lo; j <= p; ++j) {
          acc +=
              w[static_cast<size_t>(j - lo)] * vd[static_cast<size_t>(j * row + hk * head_dim + d)];
        }
        out[static_cast<size_t>((p * n_head + h) * head_dim + d)] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

// Through CpuBackend, for every type pair: the store is the same bytes on every ISA, the
// quantized rows are llama.cpp's, and attention of 8 query heads over 2 KV heads (a prefill
// of 20 tokens, then 37, then one decode token) on a full cache and on a sliding-window ring
// matches attention_over_stored: normalized MSE per head 1e-10 when V is accumulated in
// float (float against double), 1e-5 when V is F16 (an F16 accumulator, as llama.cpp's).
TEST(KernelsKvTypes, BackendAttentionMatchesStoredRows) {
  const int64_t n_head = 8, n_head_kv = 2, n_pos = 58, window = 9;
  for (int64_t head_dim : {64, 128, 256}) {
    const int64_t row = n_head_kv * head_dim;
    const std::vector<float> kin = random_floats(static_cast<size_t>(n_pos * row), 31, 1.0f);
    const std::vector<float> vin = random_floats(static_cast<size_t>(n_pos * row), 32, 1.0f);
    const std::vector<float> q =
        random_floats(static_cast<size_t>(n_pos * n_head * head_dim), 33, 1.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    const int64_t batches[][2] = {{0, 20}, {20, 37}, {57, 1}};  // pos0, n_tokens
    // out: [n_pos, n_head, head_dim], batch after batch.
    const auto run = [&](CpuBackend& be, DType kt, DType vt, int64_t w, int64_t n_rows,
                         std::vector<uint8_t>* k_bytes, std::vector<uint8_t>* v_bytes) {
      const KvLayerView shape{kt, vt, nullptr, nullptr, n_rows, n_head_kv, head_dim};
      std::vector<uint8_t> kbuf(shape.k_row_bytes() * static_cast<size_t>(n_rows));
      std::vector<uint8_t> vbuf(shape.v_row_bytes() * static_cast<size_t>(n_rows));
      const KvLayerView cache{kt, vt, kbuf.data(), vbuf.data(), n_rows, n_head_kv, head_dim};
      const AttentionParams params{n_head, n_head_kv, head_dim, scale, w};
      std::vector<float> out(q.size(), kNaN);
      for (const auto& [pos0, n] : batches) {
        be.kv_store(cache, pos0, n, kin.data() + pos0 * row, vin.data() + pos0 * row);
        be.attention(q.data() + pos0 * n_head * head_dim, n, pos0, cache, params,
                     out.data() + pos0 * n_head * head_dim);
      }
      *k_bytes = kbuf;
      *v_bytes = vbuf;
      return out;
    };
    for (DType kt : kKvTypes) {
      for (DType vt : kKvTypes) {
        for (int64_t w : {int64_t{0}, window}) {
          SCOPED_TRACE(testing::Message() << "K " << dtype_name(kt) << " V " << dtype_name(vt)
                                          << " head_dim " << head_dim << " window " << w);
          const int64_t n_rows = w > 0 ? w - 1 + 37 : n_pos;
          const std::vector<float> want = attention_over_stored(q, kin, vin, kt, vt, n_pos, n_head,
                                                                n_head_kv, head_dim, scale, w);
          const double bound = vt == DType::kF16 ? 1e-5 : 1e-10;
          CpuBackend generic(2, Isa::kGeneric);
          std::vector<uint8_t> k_ref, v_ref;
          const std::vector<float> got_ref = run(generic, kt, vt, w, n_rows, &k_ref, &v_ref);
          for (double e : head_nmse(got_ref, want, n_pos * n_head, head_dim, head_dim)) {
            EXPECT_LE(e, bound);
          }
          if (w == 0) {  // the last row written: llama.cpp's quantizers over the whole row
            const size_t kb = row_size(kt, row), vb = row_size(vt, row);
            std::vector<uint8_t> want_k(kb), want_v(vb);
            const auto quantize = [&](DType t, const float* x, uint8_t* dst) {
              if (t == DType::kQ8_0) type_traits(t).from_float_act(x, dst, row);
              if (t == DType::kQ4_0) type_traits(t).from_float(x, dst, row);
              return t == DType::kQ8_0 || t == DType::kQ4_0;
            };
            if (quantize(kt, kin.data() + (n_pos - 1) * row, want_k.data())) {
              EXPECT_EQ(std::memcmp(k_ref.data() + (n_pos - 1) * kb, want_k.data(), kb), 0);
            }
            if (quantize(vt, vin.data() + (n_pos - 1) * row, want_v.data())) {
              EXPECT_EQ(std::memcmp(v_ref.data() + (n_pos - 1) * vb, want_v.data(), vb), 0);
            }
          }
          for (Isa isa : isas_with_own_attention(simd_isas(), kt, vt)) {
            SCOPED_TRACE(isa_name(isa));
            CpuBackend be(3, isa);
            std::vector<uint8_t> k_isa, v_isa;
            const std::vector<float> got = run(be, kt, vt, w, n_rows, &k_isa, &v_isa);
            EXPECT_EQ(k_isa, k_ref);
            EXPECT_EQ(v_isa, v_ref);
            for (double e : head_nmse(got, want, n_pos * n_head, head_dim, head_dim)) {
              EXPECT_LE(e, bound);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace qrun::kernels
