// The tile walk of the SIMD attention kernels (avx2/, avx512/ and neon/ ops_attention.cpp),
// written once: the query heads of a call walk the cache in tiles of rows; for each tile,
// the K rows of all the call's KV heads are read (and for F16 widened) row after row, each
// KV head's group of query heads takes its scores, each head its online-softmax weights,
// then the V rows are read the same way and added to every head's accumulator. So one call
// reads its KV heads' rows in one pass, in storage order, rather than one head's slice of
// each row after another, which left a core waiting on memory (smollm's 3 KV heads are
// 128-byte slices of a 384-byte row). The reads differ by cache type: F32 and F16 rows are
// dotted and accumulated as floats (SameTypeRows); any other pair of K and V types
// (MixedRows) is scored by the row functions of the kernel table (an integer dot for a
// quantized K), its V rows widened per tile by the table's to_float.
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

// Query heads of one KV head walked together, at most.
inline constexpr int64_t kGroup = kAttendWalkMaxGroup;
inline constexpr int64_t kTile = 32;  // cache rows per tile, at most (scores, weights, then V)
static_assert(kTile <= 32, "softmax_weights marks a tile's rows in 32 bits");
// A walk holds its heads' accumulators, attend_head_floats(head_dim) floats apart, in
// kAttendWalkFloats, and a tile of rows of all its KV heads, widened, in kTile *
// kMaxHeadDim floats (attend_reads_heads_together); one KV head's kGroup heads always fit.
inline constexpr int64_t kMaxWalkHeads = kAttendWalkMaxHeads;
static_assert(kGroup * ref::kMaxHeadDim <= kAttendWalkFloats && kGroup <= kMaxWalkHeads);
static_assert(ref::kMaxHeadDim >= kAttendWalkMaxRowValues,
              "a tile holds kMaxHeadDim values of each of its rows");

// Ops provides, as static members:
//   kAlign                      alignment of the per-group float buffers, in bytes
//   dot_f32(q, k, n)            q.k over n floats, in that ISA's documented order
//   round_f16(float)            x rounded to the nearest F16 value
//   widen_f16(src, dst, n)      n F16 values widened to float
//   accumulate_tile<kF16, kRescale, kNq>(acc, acc_stride, vr, n_rows, head_dim, ms, vs,
//                                        rescale_rows)
//       with acc[h] the head_dim floats at acc + h * acc_stride:
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

// The end of a walk of n_q heads: each head's out row = acc / l, or (partial not null) acc
// itself, with m and l in partial[2h], partial[2h + 1] (see AttendFn).
inline void finish(const float* acc, int64_t acc_stride, const float* m, const float* l,
                   int64_t n_q, int64_t head_dim, float* out, int64_t out_stride, float* partial) {
  for (int64_t h = 0; h < n_q; ++h) {
    const float* a = acc + h * acc_stride;
    if (partial != nullptr) {
      std::memcpy(out + h * out_stride, a, static_cast<size_t>(head_dim) * sizeof(float));
      partial[2 * h] = m[h];
      partial[2 * h + 1] = l[h];
      continue;
    }
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < head_dim; ++d) out[h * out_stride + d] = a[d] * inv;
  }
}

// The reads of an F32 or F16 cache (Elem float or uint16_t): q rounded to F16 for an F16
// cache, K and V rows used in place (F32) or widened to float once per tile, all the walk's
// KV heads of a row one after another (F16). The accumulator is rounded to F16 and the
// softmax sum updated with a fused multiply-add for an F16 cache, float throughout for an
// F32 one.
template <class Ops, class Elem>
class SameTypeRows {
 public:
  static constexpr bool kF16 = sizeof(Elem) == 2;
  static constexpr bool kF16Acc = kF16;
  static constexpr bool kFmaSum = kF16;

  SameTypeRows(const KvRows& kv, int64_t head_dim)
      : kv_(kv), head_dim_(head_dim), q_stride_(attend_head_floats(head_dim)) {}

  // Query head h of the walk.
  void set_query(int64_t h, const float* q) {
    float* qs = qs_ + h * q_stride_;
    for (int64_t d = 0; d < head_dim_; ++d) qs[d] = kF16 ? Ops::round_f16(q[d]) : q[d];
  }

  // s[i * kNq + h][j] = scale * q.k for query head h of group i (KV head g0 + i) and K row
  // j0 + j, for n_groups groups of kNq heads and the n rows of a tile.
  template <int kNq>
  void scores(int64_t g0, int64_t n_groups, int64_t j0, int64_t n, float scale, float (*s)[kTile]) {
    load_rows(kv_.k, g0, n_groups, j0, n);
    for (int64_t i = 0; i < n_groups; ++i) {
      for (int64_t h = i * kNq; h < (i + 1) * kNq; ++h) {
        const float* qs = qs_ + h * q_stride_;
        for (int64_t j = 0; j < n; ++j) s[h][j] = Ops::dot_f32(qs, rp_[i][j], head_dim_) * scale;
      }
    }
  }

  // Loads the V rows j0 .. j0 + n - 1 of KV heads g0 .. g0 + n_groups - 1; values(i) then
  // points at those of KV head g0 + i, as floats.
  void load_values(int64_t g0, int64_t n_groups, int64_t j0, int64_t n) {
    load_rows(kv_.v, g0, n_groups, j0, n);
  }
  const float* const* values(int64_t i) const { return rp_[i]; }

 private:
  // Points rp_[i] at KV head g0 + i's values in rows j0 .. j0 + n - 1 of `src`.
  void load_rows(const void* src, int64_t g0, int64_t n_groups, int64_t j0, int64_t n) {
    const Elem* base = static_cast<const Elem*>(src) + g0 * kv_.head_stride;
    if constexpr (kF16) {
      for_each_row(kv_, j0, n, [&](int64_t j, int64_t r) {
        const Elem* row = base + r * kv_.stride;
        for (int64_t i = 0; i < n_groups; ++i) {
          float* dst = rows_ + (i * kTile + j) * head_dim_;
          Ops::widen_f16(row + i * kv_.head_stride, dst, head_dim_);
          rp_[i][j] = dst;
        }
      });
    } else {
      // (Group 0's rows, then the others' from them: GCC 12 at -O3 vectorized the two
      // loops nested in for_each_row's over the rows with aligned stores at any row.)
      for_each_row(kv_, j0, n, [&](int64_t j, int64_t r) { rp_[0][j] = base + r * kv_.stride; });
      for (int64_t i = 1; i < n_groups; ++i) {
        for (int64_t j = 0; j < n; ++j) rp_[i][j] = rp_[0][j] + i * kv_.head_stride;
      }
    }
  }

  const KvRows& kv_;
  const int64_t head_dim_;
  const int64_t q_stride_;
  alignas(Ops::kAlign) float qs_[kAttendWalkFloats];
  alignas(Ops::kAlign) float rows_[kF16 ? kTile * ref::kMaxHeadDim : 1];  // widened K, then V
  const float* rp_[kMaxWalkHeads][kTile];
};

// The reads of any other pair of K and V types: each query head converted once to K's dot
// type, the scores by kv.k_dot, V rows widened by kv.v_to_float into the tile buffer, then
// the accumulators as for an F16 cache (kF16V: V is F16) or an F32 one. The softmax sum is
// always updated with a fused multiply-add, as the reference does.
template <class Ops, bool kF16V>
class MixedRows {
 public:
  static constexpr bool kF16Acc = kF16V;
  static constexpr bool kFmaSum = true;

  MixedRows(const KvRowsMixed& kv, int64_t head_dim)
      : kv_(kv), head_dim_(head_dim), q_bytes_(attend_head_floats(head_dim) * sizeof(float)) {}

  void set_query(int64_t h, const float* q) {
    uint8_t* qc = qc_ + h * q_bytes_;
    if (kv_.k_quantize != nullptr) {
      kv_.k_quantize(q, qc, head_dim_);
    } else {
      std::memcpy(qc, q, static_cast<size_t>(head_dim_) * sizeof(float));
    }
  }

  template <int kNq>
  void scores(int64_t g0, int64_t n_groups, int64_t j0, int64_t n, float scale, float (*s)[kTile]) {
    const uint8_t* base = kv_.k + g0 * kv_.k_head_bytes;
    for_each_row(kv_, j0, n, [&](int64_t j, int64_t r) {
      const uint8_t* row = base + static_cast<size_t>(r) * kv_.k_stride;
      for (int64_t i = 0; i < n_groups; ++i) {
        const uint8_t* kr = row + i * kv_.k_head_bytes;
        for (int64_t h = i * kNq; h < (i + 1) * kNq; ++h) {
          s[h][j] = kv_.k_dot(head_dim_, kr, qc_ + h * q_bytes_) * scale;
        }
      }
    });
  }

  void load_values(int64_t g0, int64_t n_groups, int64_t j0, int64_t n) {
    const uint8_t* base = kv_.v + g0 * kv_.v_head_bytes;
    for_each_row(kv_, j0, n, [&](int64_t j, int64_t r) {
      const uint8_t* row = base + static_cast<size_t>(r) * kv_.v_stride;
      for (int64_t i = 0; i < n_groups; ++i) {
        float* dst = rows_ + (i * kTile + j) * head_dim_;
        kv_.v_to_float(row + i * kv_.v_head_bytes, dst, head_dim_);
        rp_[i][j] = dst;
      }
    });
  }
  const float* const* values(int64_t i) const { return rp_[i]; }

 private:
  const KvRowsMixed& kv_;
  const int64_t head_dim_;
  const size_t q_bytes_;
  alignas(64) uint8_t qc_[kAttendWalkFloats * sizeof(float)];  // converted queries
  alignas(Ops::kAlign) float rows_[kTile * ref::kMaxHeadDim];  // widened V
  const float* rp_[kMaxWalkHeads][kTile];
};

// n_groups groups of kNq query heads (q rows q_stride floats apart), group i reading KV head
// g0 + i, over the n_rows rows of `rd`, tile by tile: the scores of every head and row of
// the tile (soft-capped when `scale` caps them), each head's softmax weights, then the V rows into
// the accumulators. A head's arithmetic is the same whatever the groups beside it.
template <class Ops, class Rows, int kNq>
void walk(Rows& rd, const float* q, int64_t q_stride, int64_t g0, int64_t n_groups, int64_t n_rows,
          int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial) {
  const int64_t acc_stride = attend_head_floats(head_dim);
  const int64_t n_q = n_groups * kNq;
  alignas(Ops::kAlign) float acc[kAttendWalkFloats];
  float m[kMaxWalkHeads];
  float l[kMaxWalkHeads];
  float s[kMaxWalkHeads][kTile];
  float ms[kMaxWalkHeads][kTile];
  float vs[kMaxWalkHeads][kTile];
  uint32_t rescale[kMaxWalkHeads];  // bit j: some head of group i has its max grow at row j
  for (int64_t h = 0; h < n_q; ++h) {
    rd.set_query(h, q + h * q_stride);
    for (int64_t d = 0; d < head_dim; ++d) acc[h * acc_stride + d] = 0.0f;
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  // Tiles of 8 rows where the walk's KV heads take at most 512 values of a row, else 32.
  // Measured on one Zen 4 core, decoding over an F16 cache of 4096 rows: 8-row tiles took
  // 0.66x to 0.84x the time of 32-row ones with 3 KV heads of 64 (smollm), 0.85x with one of 256
  // (Gemma 3 270M), the same within noise with 2 of 64 and 4 of 64 and with 8 of 128 (where 4-row
  // tiles lost 5%); over 256 rows, in cache, the same within 5% either way.
  const int64_t tile = n_groups * head_dim <= 512 ? 8 : kTile;
  for (int64_t j0 = 0; j0 < n_rows; j0 += tile) {
    const int64_t n = n_rows - j0 < tile ? n_rows - j0 : tile;
    rd.template scores<kNq>(g0, n_groups, j0, n, scale.mul, s);
    if (scale.capped()) {
      for (int64_t h = 0; h < n_q; ++h) {
        for (int64_t j = 0; j < n; ++j) s[h][j] = scale.cap(s[h][j]);
      }
    }
    for (int64_t i = 0; i < n_groups; ++i) {
      rescale[i] = 0;
      for (int64_t h = i * kNq; h < (i + 1) * kNq; ++h) {
        rescale[i] |= softmax_weights<Ops, Rows::kFmaSum>(s[h], n, m[h], l[h], ms[h], vs[h]);
      }
    }
    rd.load_values(g0, n_groups, j0, n);
    for (int64_t i = 0; i < n_groups; ++i) {
      float* a = acc + i * kNq * acc_stride;
      const float* const* rp = rd.values(i);
      if (rescale[i] != 0) {
        Ops::template accumulate_tile<Rows::kF16Acc, true, kNq>(
            a, acc_stride, rp, n, head_dim, ms + i * kNq, vs + i * kNq, rescale[i]);
      } else {
        Ops::template accumulate_tile<Rows::kF16Acc, false, kNq>(a, acc_stride, rp, n, head_dim,
                                                                 ms + i * kNq, vs + i * kNq, 0);
      }
    }
  }
  finish(acc, acc_stride, m, l, n_q, head_dim, out, out_stride, partial);
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

// n_q query heads over the n_rows rows of n_heads KV heads read by `rd`: in one walk when
// attend_reads_heads_together allows, else each KV head alone, its query heads kGroup at a
// time.
template <class Ops, class Rows>
void attend_heads(Rows& rd, const float* q, int64_t q_stride, int64_t n_q, int64_t n_heads,
                  int64_t n_rows, int64_t head_dim, KqScale scale, float* out, int64_t out_stride,
                  float* partial) {
  const int64_t group = n_q / n_heads;
  if (attend_reads_heads_together(n_q, n_heads, head_dim)) {
    with_head_count(group, [&]<int kNq>() {
      walk<Ops, Rows, kNq>(rd, q, q_stride, 0, n_heads, n_rows, head_dim, scale, out, out_stride,
                           partial);
    });
    return;
  }
  for (int64_t g = 0; g < n_heads; ++g) {
    for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += kGroup) {
      const int64_t n = (g + 1) * group - h0 < kGroup ? (g + 1) * group - h0 : kGroup;
      with_head_count(n, [&]<int kNq>() {
        walk<Ops, Rows, kNq>(rd, q + h0 * q_stride, q_stride, g, 1, n_rows, head_dim, scale,
                             out + h0 * out_stride, out_stride,
                             partial == nullptr ? nullptr : partial + 2 * h0);
      });
    }
  }
}

// The entry point behind attend_f32 / attend_f16.
template <class Ops, class Elem>
void attend(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
            KqScale scale, float* out, int64_t out_stride, float* partial) {
  SameTypeRows<Ops, Elem> rd(kv, head_dim);
  attend_heads<Ops>(rd, q, q_stride, n_q, kv.n_heads, kv.n, head_dim, scale, out, out_stride,
                    partial);
}

// The entry point behind attend_mixed.
template <class Ops>
void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial) {
  if (kv.v_type == DType::kF16) {
    MixedRows<Ops, true> rd(kv, head_dim);
    attend_heads<Ops>(rd, q, q_stride, n_q, kv.n_heads, kv.n, head_dim, scale, out, out_stride,
                      partial);
  } else {
    MixedRows<Ops, false> rd(kv, head_dim);
    attend_heads<Ops>(rd, q, q_stride, n_q, kv.n_heads, kv.n, head_dim, scale, out, out_stride,
                      partial);
  }
}

}  // namespace qrun::kernels::attention_tiles
