// The tile walk of the SIMD attention kernels (avx2/, avx512/ and neon/ ops_attention.cpp),
// written once: the query heads of one KV head walk the cache in tiles of kTile rows: all scores,
// then each head's online-softmax weights, then V added to every head's accumulator.
// attend_mixed walks the same tiles over any other pair of K and V types (KvRowsMixed): the
// scores by the row functions the kernel table gives (an integer dot for quantized K), V rows
// widened per tile by the table's to_float, then the same accumulate_tile.
// Each template takes the ISA's vector ops as `Ops` (a struct of static functions declared
// in an anonymous namespace of that ISA's file), so every instantiation has internal
// linkage and is compiled with that file's flags: no AVX-512 copy can be linked into AVX2.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::attention_tiles {

inline constexpr int64_t kGroup = 8;  // query heads walked together; larger n_q go in chunks
inline constexpr int64_t kTile = 32;  // cache rows per tile (scores, weights, then V)
static_assert(kTile <= 32, "softmax_weights marks a tile's rows in 32 bits");

// Ops provides, as static members:
//   kAlign                      alignment of the per-group float buffers, in bytes
//   dot_f32(q, k, n)            q.k over n floats, in that ISA's documented order
//   round_f16(float)            x rounded to the nearest F16 value
//   widen_f16(src, dst, n)      n F16 values widened to float
//   accumulate_tile<kF16, kRescale, kNq>(acc, vr, n_rows, head_dim, ms, vs, rescale_rows)
//       acc[h] = acc[h] * ms[h][j] (when kRescale and bit j of rescale_rows is set), then
//       acc[h] += vr[j] * vs[h][j], rows j in order, each result rounded to F16 when kF16.
//       Rows whose bit is clear have ms = 1 for every head, a product that changes nothing.

// The online softmax of one head over one tile of scores: for each row, the rescale factor
// ms of the accumulator so far (1 unless the max grows; 0 on the very first row) and the
// weight vs of the row, as the reference computes them row by row. Returns the rows whose
// ms differs from 1, bit j for row j (n <= kTile = 32). (Ops only ties the instantiation
// to one ISA file.)
template <class Ops, bool kF16>
inline uint32_t softmax_weights(const float* s, int64_t n, float& m, float& l, float* ms,
                                float* vs) {
  uint32_t rescale = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (s[j] > m) {
      ms[j] = std::exp(m - s[j]);
      vs[j] = 1.0f;
      m = s[j];
      if (ms[j] != 1.0f) rescale |= uint32_t{1} << j;
    } else {
      ms[j] = 1.0f;
      vs[j] = std::exp(s[j] - m);
    }
    l = kF16 ? std::fma(l, ms[j], vs[j]) : l * ms[j] + vs[j];
  }
  return rescale;
}

// Calls f(j, storage row) for the rows j0 .. j0 + n - 1 read from kv (KvRows or
// KvRowsMixed), in order: one ring wrap test and block table lookup per run of rows stored
// one after the other, not one per row.
template <class Rows, class F>
inline void for_each_row(const Rows& kv, int64_t j0, int64_t n, const F& f) {
  for (int64_t j = 0; j < n;) {
    const int64_t r0 = kv.row(j0 + j);
    const int64_t run = kv.run(j0 + j, n - j);
    for (int64_t k = 0; k < run; ++k) f(j + k, r0 + k);
    j += run;
  }
}

// The end of a walk: each head's out row = acc / l, or (partial not null) acc itself, with
// m and l in partial[2h], partial[2h + 1] (see AttendFn).
template <int kNq>
inline void finish(const float (*acc)[ref::kMaxHeadDim], const float* m, const float* l,
                   int64_t head_dim, float* out, int64_t out_stride, float* partial) {
  for (int h = 0; h < kNq; ++h) {
    if (partial != nullptr) {
      std::memcpy(out + h * out_stride, acc[h], static_cast<size_t>(head_dim) * sizeof(float));
      partial[2 * h] = m[h];
      partial[2 * h + 1] = l[h];
      continue;
    }
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < head_dim; ++d) out[h * out_stride + d] = acc[h][d] * inv;
  }
}

// kNq heads over all rows of kv, tile by tile: the scores of every head and row of the
// tile, then each head's softmax weights, then the V rows into the accumulators. Elem is
// float (F32 cache) or uint16_t (F16 cache, rows widened to float once per tile).
template <class Ops, class Elem, int kNq>
void attend_group(const float* q, int64_t q_stride, const KvRows& kv, int64_t head_dim, float scale,
                  float* out, int64_t out_stride, float* partial) {
  constexpr bool kF16 = sizeof(Elem) == 2;
  alignas(Ops::kAlign) float qs[kNq][ref::kMaxHeadDim];
  alignas(Ops::kAlign) float acc[kNq][ref::kMaxHeadDim];
  alignas(Ops::kAlign) float rows[kF16 ? kTile * ref::kMaxHeadDim : 1];  // widened K, then V
  const float* rp[kTile];
  float s[kNq][kTile];
  float ms[kNq][kTile];
  float vs[kNq][kTile];
  float m[kNq];
  float l[kNq];
  for (int h = 0; h < kNq; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const float x = q[h * q_stride + d];
      qs[h][d] = kF16 ? Ops::round_f16(x) : x;
      acc[h][d] = 0.0f;
    }
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  // Points rp at rows j0 .. j0 + n - 1 of `src` (in reading order) as floats.
  const auto load_rows = [&](const void* src, int64_t j0, int64_t n) {
    for_each_row(kv, j0, n, [&](int64_t j, int64_t r) {
      const Elem* row = static_cast<const Elem*>(src) + r * kv.stride;
      if constexpr (kF16) {
        Ops::widen_f16(row, rows + j * head_dim, head_dim);
        rp[j] = rows + j * head_dim;
      } else {
        rp[j] = row;
      }
    });
  };
  for (int64_t j0 = 0; j0 < kv.n; j0 += kTile) {
    const int64_t n = kv.n - j0 < kTile ? kv.n - j0 : kTile;
    load_rows(kv.k, j0, n);
    for (int h = 0; h < kNq; ++h) {
      for (int64_t j = 0; j < n; ++j) s[h][j] = Ops::dot_f32(qs[h], rp[j], head_dim) * scale;
    }
    uint32_t rescale = 0;  // bit j: some head's max grows at row j
    for (int h = 0; h < kNq; ++h) {
      rescale |= softmax_weights<Ops, kF16>(s[h], n, m[h], l[h], ms[h], vs[h]);
    }
    load_rows(kv.v, j0, n);
    if (rescale != 0) {
      Ops::template accumulate_tile<kF16, true, kNq>(acc, rp, n, head_dim, ms, vs, rescale);
    } else {
      Ops::template accumulate_tile<kF16, false, kNq>(acc, rp, n, head_dim, ms, vs, 0);
    }
  }
  finish<kNq>(acc, m, l, head_dim, out, out_stride, partial);
}

// Calls run.template operator()<n>() with n (1 .. kGroup = 8) fixed at compile time, so each
// head count gets its own register allocation.
template <class Run>
void with_head_count(int64_t n, const Run& run) {
  switch (n) {
    case 1:
      return run.template operator()<1>();
    case 2:
      return run.template operator()<2>();
    case 3:
      return run.template operator()<3>();
    case 4:
      return run.template operator()<4>();
    case 5:
      return run.template operator()<5>();
    case 6:
      return run.template operator()<6>();
    case 7:
      return run.template operator()<7>();
    default:
      return run.template operator()<8>();
  }
}

// Groups of up to kGroup heads, each with its register count fixed at compile time.
template <class Ops, class Elem>
void attend_heads(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                  float scale, float* out, int64_t out_stride, float* partial) {
  const auto run = [&]<int kNq>() {
    attend_group<Ops, Elem, kNq>(q, q_stride, kv, head_dim, scale, out, out_stride, partial);
  };
  with_head_count(n_q, run);
}

// The entry point behind attend_f32 / attend_f16: n_q heads in groups of kGroup.
template <class Ops, class Elem>
void attend(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
            float scale, float* out, int64_t out_stride, float* partial) {
  for (int64_t h0 = 0; h0 < n_q; h0 += kGroup) {
    const int64_t n = n_q - h0 < kGroup ? n_q - h0 : kGroup;
    attend_heads<Ops, Elem>(q + h0 * q_stride, q_stride, n, kv, head_dim, scale,
                            out + h0 * out_stride, out_stride,
                            partial == nullptr ? nullptr : partial + 2 * h0);
  }
}

// attend_group for mixed K/V types: each head's q converted once to K's dot type, the
// scores of a tile by kv.k_dot, V rows widened by kv.v_to_float into the tile buffer, then
// the accumulators as for an F16 cache (kF16V: V is F16) or an F32 one. The softmax sum is
// always updated with a fused multiply-add, as the reference does.
template <class Ops, bool kF16V, int kNq>
void attend_mixed_group(const float* q, int64_t q_stride, const KvRowsMixed& kv, int64_t head_dim,
                        float scale, float* out, int64_t out_stride, float* partial) {
  alignas(64) uint8_t qc[kNq][ref::kMaxQueryBytes];
  alignas(Ops::kAlign) float acc[kNq][ref::kMaxHeadDim];
  alignas(Ops::kAlign) float rows[kTile * ref::kMaxHeadDim];  // widened V
  const float* rp[kTile];
  float s[kNq][kTile];
  float ms[kNq][kTile];
  float vs[kNq][kTile];
  float m[kNq];
  float l[kNq];
  for (int h = 0; h < kNq; ++h) {
    if (kv.k_quantize != nullptr) {
      kv.k_quantize(q + h * q_stride, qc[h], head_dim);
    } else {
      std::memcpy(qc[h], q + h * q_stride, static_cast<size_t>(head_dim) * sizeof(float));
    }
    for (int64_t d = 0; d < head_dim; ++d) acc[h][d] = 0.0f;
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < kv.n; j0 += kTile) {
    const int64_t n = kv.n - j0 < kTile ? kv.n - j0 : kTile;
    for_each_row(kv, j0, n, [&](int64_t j, int64_t r) {
      const uint8_t* kr = kv.k + static_cast<size_t>(r) * kv.k_stride;
      for (int h = 0; h < kNq; ++h) s[h][j] = kv.k_dot(head_dim, kr, qc[h]) * scale;
    });
    uint32_t rescale = 0;  // bit j: some head's max grows at row j
    for (int h = 0; h < kNq; ++h) {
      rescale |= softmax_weights<Ops, true>(s[h], n, m[h], l[h], ms[h], vs[h]);
    }
    for_each_row(kv, j0, n, [&](int64_t j, int64_t r) {
      kv.v_to_float(kv.v + static_cast<size_t>(r) * kv.v_stride, rows + j * head_dim, head_dim);
      rp[j] = rows + j * head_dim;
    });
    if (rescale != 0) {
      Ops::template accumulate_tile<kF16V, true, kNq>(acc, rp, n, head_dim, ms, vs, rescale);
    } else {
      Ops::template accumulate_tile<kF16V, false, kNq>(acc, rp, n, head_dim, ms, vs, 0);
    }
  }
  finish<kNq>(acc, m, l, head_dim, out, out_stride, partial);
}

// The entry point behind attend_mixed: n_q heads in groups of kGroup.
template <class Ops>
void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, float scale, float* out, int64_t out_stride, float* partial) {
  for (int64_t h0 = 0; h0 < n_q; h0 += kGroup) {
    const int64_t n = n_q - h0 < kGroup ? n_q - h0 : kGroup;
    const float* qh = q + h0 * q_stride;
    float* oh = out + h0 * out_stride;
    float* ph = partial == nullptr ? nullptr : partial + 2 * h0;
    const auto run = [&]<int kNq>() {
      if (kv.v_type == DType::kF16) {
        attend_mixed_group<Ops, true, kNq>(qh, q_stride, kv, head_dim, scale, oh, out_stride, ph);
      } else {
        attend_mixed_group<Ops, false, kNq>(qh, q_stride, kv, head_dim, scale, oh, out_stride, ph);
      }
    };
    with_head_count(n, run);
  }
}

}  // namespace qrun::kernels::attention_tiles
