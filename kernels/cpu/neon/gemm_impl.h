// The NEON gemm kernels (GemmKernels in kernel_table.h), written once over a policy `Lanes`:
// gemm_quants.cpp instantiates them with widening multiplies (armv8-a), gemm_dotprod.cpp
// with SDOT (vdotq_laneq_s32), gemm_i8mm.cpp with SMMLA (vmmlaq_s32). Activations are packed
// token-interleaved, 8 tokens per group: for every 4 consecutive elements ("step") of a
// block, [token 0: 4 levels] .. [token 7: 4 levels]. Weights are unpacked the same way for 4
// rows at a time: [row 0: 4 levels] .. [row 3: 4 levels] per step. One Lanes::dot<t> then
// adds, for the 4 rows in the int32 lanes, the 4-level products of token t, so a 4 rows x 8
// tokens tile keeps 8 accumulators in registers and each output lane is already one (row,
// token) pair: no reductions.
// With Lanes::kPairedSteps (SMMLA, which multiplies a 2 x 8 by an 8 x 2 int8 matrix), steps
// go in pairs of 8 elements instead: the 16 bytes of step 2j hold [row 0: 8 levels][row 1: 8
// levels] and those of step 2j + 1 rows 2 and 3; for the tokens, step 2j holds tokens 0, 1,
// 4, 5 and step 2j + 1 tokens 2, 3, 6, 7, 8 levels each. The block sums are the same exact
// integers, so all three instantiations give the same bits.
// Integer sums inside a block (a sub-block for the k-quants) are exact; they are scaled and
// summed in float per block, as vec_dot does, so an output differs from vec_dot only by the
// rounding of that float sum. Everything is a member of a class template over the file's
// local policy, so the two instantiations share no symbol (see dot_impl.h).
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ggml-like/quants.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon/block_levels.h"

namespace qrun::kernels::neon {

// Lanes provides kPairedSteps and, when it is false,
//   Acc                       an accumulator of 4 int32 lanes (one per weight row)
//   zero()                    an accumulator of zeros
//   dot<t>(Acc&, w, a)        lane i += dot(w[4i .. 4i + 3], a[4t .. 4t + 3]), t < 4
//   sums(Acc)                 the 4 lanes as int32x4_t
// or when it is true
//   mmla(acc, w, a)           acc[2i + j] += dot(w[8i .. 8i + 7], a[8j .. 8j + 7]), i, j < 2
template <class Lanes>
struct NeonGemm {
  using Levels = BlockLevels<Lanes>;

  static constexpr int kTokens = 8;         // tokens per packed group (two vectors)
  static constexpr int kRows = 4;           // weight rows per micro-tile (the lanes)
  static constexpr int kTileGroups = 8;     // token groups per driver tile (64 tokens)
  static constexpr int64_t kTileRows = 16;  // weight rows per driver tile
  static constexpr int kTileQuads = kTileRows / kRows;
  static constexpr int kTileTokens = kTileGroups * kTokens;

  // Transposes 4 x 4 int32 elements: afterwards v[k] holds element k of the old v[0 .. 4),
  // that is step k (4 levels) of each of 4 rows or tokens.
  static void transpose4(int8x16_t* v) {
    const int32x4_t a0 = vreinterpretq_s32_s8(v[0]);
    const int32x4_t a1 = vreinterpretq_s32_s8(v[1]);
    const int32x4_t a2 = vreinterpretq_s32_s8(v[2]);
    const int32x4_t a3 = vreinterpretq_s32_s8(v[3]);
    const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1));
    const int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1));
    const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3));
    const int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
    v[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
    v[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
    v[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
    v[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
  }

  // The paired-step order of 4 x 2 int64 elements: afterwards v[0] = [v0, v1] and v[1] =
  // [v2, v3] of the old first halves (levels 0-7), v[2] and v[3] the same of the second.
  static void transpose_pairs(int8x16_t* v) {
    const int64x2_t a0 = vreinterpretq_s64_s8(v[0]);
    const int64x2_t a1 = vreinterpretq_s64_s8(v[1]);
    const int64x2_t a2 = vreinterpretq_s64_s8(v[2]);
    const int64x2_t a3 = vreinterpretq_s64_s8(v[3]);
    v[0] = vreinterpretq_s8_s64(vtrn1q_s64(a0, a1));
    v[1] = vreinterpretq_s8_s64(vtrn1q_s64(a2, a3));
    v[2] = vreinterpretq_s8_s64(vtrn2q_s64(a0, a1));
    v[3] = vreinterpretq_s8_s64(vtrn2q_s64(a2, a3));
  }

  // Stores 4 vectors of 16 levels (one per row or token, in element order) as 4 steps:
  // dst + k * stride receives step k of the 4 (16 bytes), in the policy's step order.
  static void store_steps(int8x16_t* v, int8_t* dst, size_t stride) {
    if constexpr (Lanes::kPairedSteps) {
      transpose_pairs(v);
    } else {
      transpose4(v);
    }
    for (int k = 0; k < 4; ++k) vst1q_s8(dst + k * stride, v[k]);
  }

  // One step for 4 rows (w) and 8 tokens (a0: tokens 0-3, a1: 4-7) into acc[t].
  template <class Acc>
  static void step(Acc* acc, int8x16_t w, const int8_t* a) {
    const int8x16_t a0 = vld1q_s8(a);
    const int8x16_t a1 = vld1q_s8(a + 16);
    Lanes::template dot<0>(acc[0], w, a0);
    Lanes::template dot<1>(acc[1], w, a0);
    Lanes::template dot<2>(acc[2], w, a0);
    Lanes::template dot<3>(acc[3], w, a0);
    Lanes::template dot<0>(acc[4], w, a1);
    Lanes::template dot<1>(acc[5], w, a1);
    Lanes::template dot<2>(acc[6], w, a1);
    Lanes::template dot<3>(acc[7], w, a1);
  }

  // The exact integer dots of `steps` steps (even, for kPairedSteps) of 4 rows with 8
  // tokens, in the policy's own layout. Without kPairedSteps, raw[t] holds token t's, rows
  // in lanes. With it, raw[2u + p] is SMMLA's 2 x 2 tile of rows 2p, 2p + 1 by tokens 2u,
  // 2u + 1, as [row 2p token 2u, row 2p token 2u + 1, row 2p + 1 token 2u, row 2p + 1 token
  // 2u + 1] (step 2j's first half holds tokens 0, 1, its second tokens 4, 5). to_rows()
  // turns either into rows in lanes.
  static void native_dots(const int8_t (*w)[kRows][4], const int8_t (*a)[kTokens][4], int steps,
                          int32x4_t* raw) {
    if constexpr (Lanes::kPairedSteps) {
      int32x4_t acc[2][4];  // acc[p][u] = raw[2u + p]
      for (auto& p : acc) {
        for (int32x4_t& x : p) x = vdupq_n_s32(0);
      }
      for (int k = 0; k < steps; k += 2) {
        const int8x16_t w01 = vld1q_s8(w[k][0]);
        const int8x16_t w23 = vld1q_s8(w[k + 1][0]);
        const int8x16_t a01 = vld1q_s8(a[k][0]);
        const int8x16_t a45 = vld1q_s8(a[k][4]);
        const int8x16_t a23 = vld1q_s8(a[k + 1][0]);
        const int8x16_t a67 = vld1q_s8(a[k + 1][4]);
        acc[0][0] = Lanes::mmla(acc[0][0], w01, a01);
        acc[0][1] = Lanes::mmla(acc[0][1], w01, a23);
        acc[0][2] = Lanes::mmla(acc[0][2], w01, a45);
        acc[0][3] = Lanes::mmla(acc[0][3], w01, a67);
        acc[1][0] = Lanes::mmla(acc[1][0], w23, a01);
        acc[1][1] = Lanes::mmla(acc[1][1], w23, a23);
        acc[1][2] = Lanes::mmla(acc[1][2], w23, a45);
        acc[1][3] = Lanes::mmla(acc[1][3], w23, a67);
      }
      for (int u = 0; u < 4; ++u) {
        raw[2 * u] = acc[0][u];
        raw[2 * u + 1] = acc[1][u];
      }
    } else {
      typename Lanes::Acc acc[kTokens];
      for (auto& x : acc) x = Lanes::zero();
      for (int k = 0; k < steps; ++k) step(acc, vld1q_s8(w[k][0]), a[k][0]);
      for (int t = 0; t < kTokens; ++t) raw[t] = Lanes::sums(acc[t]);
    }
  }

  // native_dots' layout to rows in lanes per token, in place: V is int32x4_t for the integer
  // dots, float32x4_t for float accumulators kept in that layout.
  template <class V>
  static void to_rows(V* v) {
    if constexpr (Lanes::kPairedSteps) {
      for (int t = 0; t < kTokens; t += 2) {
        const V r01 = v[t];
        const V r23 = v[t + 1];
        if constexpr (std::is_same_v<V, float32x4_t>) {
          v[t] = vuzp1q_f32(r01, r23);
          v[t + 1] = vuzp2q_f32(r01, r23);
        } else {
          v[t] = vuzp1q_s32(r01, r23);
          v[t + 1] = vuzp2q_s32(r01, r23);
        }
      }
    }
  }

  // The exact integer dots, rows in lanes: out[t] for token t.
  static void dots(const int8_t (*w)[kRows][4], const int8_t (*a)[kTokens][4], int steps,
                   int32x4_t* out) {
    native_dots(w, a, steps, out);
    to_rows(out);
  }

  // The products d_w[r] * d_a[t] of 4 row scales and 8 token scales, in native_dots' layout.
  static void native_scales(float32x4_t dw, const float* da, float32x4_t* s) {
    const float32x4_t lo = vld1q_f32(da);
    const float32x4_t hi = vld1q_f32(da + 4);
    if constexpr (Lanes::kPairedSteps) {
      const float32x4_t w01 = vzip1q_f32(dw, dw);  // [w0, w0, w1, w1]
      const float32x4_t w23 = vzip2q_f32(dw, dw);
      const float32x4_t pairs[4] = {twice<0>(lo), twice<1>(lo), twice<0>(hi), twice<1>(hi)};
      for (int u = 0; u < 4; ++u) {
        s[2 * u] = vmulq_f32(w01, pairs[u]);
        s[2 * u + 1] = vmulq_f32(w23, pairs[u]);
      }
    } else {
      s[0] = vmulq_laneq_f32(dw, lo, 0);
      s[1] = vmulq_laneq_f32(dw, lo, 1);
      s[2] = vmulq_laneq_f32(dw, lo, 2);
      s[3] = vmulq_laneq_f32(dw, lo, 3);
      s[4] = vmulq_laneq_f32(dw, hi, 0);
      s[5] = vmulq_laneq_f32(dw, hi, 1);
      s[6] = vmulq_laneq_f32(dw, hi, 2);
      s[7] = vmulq_laneq_f32(dw, hi, 3);
    }
  }

  // [v[2k], v[2k + 1], v[2k], v[2k + 1]] for k = kHalf.
  template <int kHalf>
  static float32x4_t twice(float32x4_t v) {
    return vreinterpretq_f32_f64(vdupq_laneq_f64(vreinterpretq_f64_f32(v), kHalf));
  }

  // The tiles add into their 8 float accumulators through locals: `f` may alias the float
  // scales they read, which would make the compiler store every accumulator after each
  // block.
  struct Accumulators {
    explicit Accumulators(float32x4_t* f) : out(f) { std::copy(f, f + kTokens, v); }
    ~Accumulators() { std::copy(v, v + kTokens, out); }
    Accumulators(const Accumulators&) = delete;
    Accumulators& operator=(const Accumulators&) = delete;
    float32x4_t v[kTokens];
    float32x4_t* out;
  };

  // ---- the 32-element types against Q8_0 --------------------------------------------

  struct ActQ8_0 {  // one block of 8 tokens; missing tokens are zero
    int8_t q[8][kTokens][4];
    float d[kTokens];
  };

  struct Wt32 {  // one block of 4 rows: signed levels (q - offset) and scales
    int8_t q[8][kRows][4];
    float d[kRows];
  };

  template <class Block, void (*kLevels)(const Block&, int8x16_t&, int8x16_t&)>
  struct Legacy {
    static constexpr int64_t kBlockElems = kQK;
    static constexpr int kChunk = 16;  // blocks per unpacked chunk of weights
    using Act = ActQ8_0;
    using Wt = Wt32;

    static void pack(const uint8_t* const* rows, int64_t block, Act* dst) {
      for (int h = 0; h < 2; ++h) {
        int8x16_t lo[4];
        int8x16_t hi[4];
        for (int i = 0; i < 4; ++i) {
          const int t = 4 * h + i;
          lo[i] = hi[i] = vdupq_n_s8(0);
          dst->d[t] = 0.0f;
          if (rows[t] == nullptr) continue;
          const BlockQ8_0& x = reinterpret_cast<const BlockQ8_0*>(rows[t])[block];
          Levels::q8_0_levels(x, lo[i], hi[i]);
          dst->d[t] = Levels::half(x.d);
        }
        store_steps(lo, dst->q[0][4 * h], sizeof(dst->q[0]));
        store_steps(hi, dst->q[4][4 * h], sizeof(dst->q[0]));
      }
    }

    static void unpack(const uint8_t* const* rows, int64_t block, Wt* dst) {
      int8x16_t lo[4];
      int8x16_t hi[4];
      for (int r = 0; r < kRows; ++r) {
        lo[r] = hi[r] = vdupq_n_s8(0);
        dst->d[r] = 0.0f;
        if (rows[r] == nullptr) continue;
        const Block& x = reinterpret_cast<const Block*>(rows[r])[block];
        kLevels(x, lo[r], hi[r]);
        dst->d[r] = Levels::half(x.d);
      }
      store_steps(lo, dst->q[0][0], sizeof(dst->q[0]));
      store_steps(hi, dst->q[4][0], sizeof(dst->q[0]));
    }

    // f = fma(float(block dot), d_w * d_a, f) block after block, per (row, token), with f
    // in native_dots' layout (finish() turns it into rows in lanes): SMMLA's tiles need no
    // reordering per block.
    static void tile(const Wt* w, const Act* a, int kb, float32x4_t* f) {
      Accumulators acc(f);
      for (int b = 0; b < kb; ++b) {
        int32x4_t s[kTokens];
        native_dots(w[b].q, a[b].q, 8, s);
        float32x4_t scale[kTokens];
        native_scales(vld1q_f32(w[b].d), a[b].d, scale);
        for (int t = 0; t < kTokens; ++t) {
          acc.v[t] = vfmaq_f32(acc.v[t], vcvtq_f32_s32(s[t]), scale[t]);
        }
      }
    }
    static void finish(float32x4_t* f) { to_rows(f); }
  };

  using Q4_0 = Legacy<BlockQ4_0, Levels::q4_0_levels>;
  using Q5_0 = Legacy<BlockQ5_0, Levels::q5_0_levels>;
  using Q8_0 = Legacy<BlockQ8_0, Levels::q8_0_levels>;

  // ---- the k-quants against Q8_K ----------------------------------------------------

  struct ActQ8_K {  // one super-block of 8 tokens; missing tokens are zero
    int8_t q[64][kTokens][4];
    float d[kTokens];
    int16_t sums[kTokens][8];  // per token, the level sums of the 8 sub-blocks of 32
  };

  static void pack_q8_k(const uint8_t* const* rows, int64_t block, ActQ8_K* dst) {
    for (int h = 0; h < 2; ++h) {
      const BlockQ8_K* x[4];
      for (int i = 0; i < 4; ++i) {
        const int t = 4 * h + i;
        x[i] = rows[t] != nullptr ? reinterpret_cast<const BlockQ8_K*>(rows[t]) + block : nullptr;
        dst->d[t] = x[i] != nullptr ? x[i]->d : 0.0f;
        // From bsums, as vec_dot takes them: sub-block s covers bsums 2s and 2s + 1.
        const int16x8_t sums = x[i] != nullptr
                                   ? vpaddq_s16(vld1q_s16(x[i]->bsums), vld1q_s16(x[i]->bsums + 8))
                                   : vdupq_n_s16(0);
        vst1q_s16(dst->sums[t], sums);
      }
      for (int j = 0; j < 16; ++j) {
        int8x16_t v[4];
        for (int i = 0; i < 4; ++i) {
          v[i] = x[i] != nullptr ? vld1q_s8(x[i]->qs + 16 * j) : vdupq_n_s8(0);
        }
        store_steps(v, dst->q[4 * j][4 * h], sizeof(dst->q[0]));
      }
    }
  }

  struct WtScaleMin {        // one Q4_K / Q5_K super-block of 4 rows
    int8_t q[64][kRows][4];  // levels q in [0, 31]
    int32_t sc[8][kRows];    // sub-block scales
    int16_t mn[8][kRows];    // sub-block mins
    float d[kRows];
    float dmin[kRows];
  };

  // Q4_K, Q5_K: per super-block and (row, token), sumi = sum_s sc[s] * dot_s and mins =
  // sum_s mn[s] * sum_s(a), exact int32 (|sumi| <= 256 * 31 * 128 * 63 < 2^26); then as vec_dot
  // f = fma(float(sumi), d * d_a, f), f = fma(float(mins), -(dmin * d_a), f).
  template <class Block>
  struct ScaleMin {
    static constexpr int64_t kBlockElems = kQKK;
    static constexpr int kChunk = 2;
    using Act = ActQ8_K;
    using Wt = WtScaleMin;

    static void pack(const uint8_t* const* rows, int64_t block, Act* dst) {
      pack_q8_k(rows, block, dst);
    }

    static void unpack(const uint8_t* const* rows, int64_t block, Wt* dst) {
      const Block* x[kRows];
      for (int r = 0; r < kRows; ++r) {
        x[r] = rows[r] != nullptr ? reinterpret_cast<const Block*>(rows[r]) + block : nullptr;
        uint8_t sc[8] = {};
        uint8_t mn[8] = {};
        if (x[r] != nullptr) Levels::k_scales_mins(x[r]->scales, sc, mn);
        for (int s = 0; s < 8; ++s) {
          dst->sc[s][r] = sc[s];
          dst->mn[s][r] = mn[s];
        }
        dst->d[r] = x[r] != nullptr ? Levels::half(x[r]->d) : 0.0f;
        dst->dmin[r] = x[r] != nullptr ? Levels::half(x[r]->dmin) : 0.0f;
      }
      for (int g = 0; g < 4; ++g) {
        int8x16_t v[kRows][4];
        for (int r = 0; r < kRows; ++r) {
          if (x[r] != nullptr) {
            Levels::scale_min_levels(*x[r], g, v[r]);
          } else {
            for (int j = 0; j < 4; ++j) v[r][j] = vdupq_n_s8(0);
          }
        }
        for (int j = 0; j < 4; ++j) {
          int8x16_t col[kRows] = {v[0][j], v[1][j], v[2][j], v[3][j]};
          store_steps(col, dst->q[16 * g + 4 * j][0], sizeof(dst->q[0]));
        }
      }
    }

    static void tile(const Wt* w, const Act* a, int kb, float32x4_t* out) {
      Accumulators acc(out);
      float32x4_t* f = acc.v;
      for (int b = 0; b < kb; ++b) {
        int32x4_t sumi[kTokens];
        for (int32x4_t& x : sumi) x = vdupq_n_s32(0);
        for (int s = 0; s < 8; ++s) {
          int32x4_t d[kTokens];
          dots(w[b].q + 8 * s, a[b].q + 8 * s, 8, d);
          const int32x4_t sc = vld1q_s32(w[b].sc[s]);
          for (int t = 0; t < kTokens; ++t) sumi[t] = vmlaq_s32(sumi[t], d[t], sc);
        }
        const float32x4_t dw = vld1q_f32(w[b].d);
        const float32x4_t neg_dmin = vnegq_f32(vld1q_f32(w[b].dmin));
        for (int t = 0; t < kTokens; ++t) {
          const int16x8_t bs = vld1q_s16(a[b].sums[t]);
          int32x4_t mins = vmull_laneq_s16(vld1_s16(w[b].mn[0]), bs, 0);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[1]), bs, 1);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[2]), bs, 2);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[3]), bs, 3);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[4]), bs, 4);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[5]), bs, 5);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[6]), bs, 6);
          mins = vmlal_laneq_s16(mins, vld1_s16(w[b].mn[7]), bs, 7);
          f[t] = vfmaq_f32(f[t], vcvtq_f32_s32(sumi[t]), vmulq_n_f32(dw, a[b].d[t]));
          f[t] = vfmaq_f32(f[t], vcvtq_f32_s32(mins), vmulq_n_f32(neg_dmin, a[b].d[t]));
        }
      }
    }
    static void finish(float32x4_t*) {}  // f is rows in lanes already
  };

  using Q4_K = ScaleMin<BlockQ4_K>;
  using Q5_K = ScaleMin<BlockQ5_K>;

  struct WtQ6_K {            // one Q6_K super-block of 4 rows
    int8_t q[64][kRows][4];  // levels q - 32
    int32_t sc[16][kRows];   // scales of the 16-element sub-blocks
    float d[kRows];
  };

  // Q6_K: per super-block and (row, token), sumi = sum_s sc[s] * dot_s over the 16
  // sub-blocks of 16, exact int32; then f = fma(float(sumi), d * d_a, f) as vec_dot.
  struct Q6_K {
    static constexpr int64_t kBlockElems = kQKK;
    static constexpr int kChunk = 2;
    using Act = ActQ8_K;
    using Wt = WtQ6_K;

    static void pack(const uint8_t* const* rows, int64_t block, Act* dst) {
      pack_q8_k(rows, block, dst);
    }

    static void unpack(const uint8_t* const* rows, int64_t block, Wt* dst) {
      const BlockQ6_K* x[kRows];
      for (int r = 0; r < kRows; ++r) {
        x[r] = rows[r] != nullptr ? reinterpret_cast<const BlockQ6_K*>(rows[r]) + block : nullptr;
        for (int s = 0; s < 16; ++s) dst->sc[s][r] = x[r] != nullptr ? x[r]->scales[s] : 0;
        dst->d[r] = x[r] != nullptr ? Levels::half(x[r]->d) : 0.0f;
      }
      for (int h = 0; h < 2; ++h) {
        int8x16_t v[kRows][8];
        for (int r = 0; r < kRows; ++r) {
          if (x[r] != nullptr) {
            Levels::q6_k_levels(*x[r], h, v[r]);
          } else {
            for (int j = 0; j < 8; ++j) v[r][j] = vdupq_n_s8(0);
          }
        }
        for (int j = 0; j < 8; ++j) {
          int8x16_t col[kRows] = {v[0][j], v[1][j], v[2][j], v[3][j]};
          store_steps(col, dst->q[32 * h + 4 * j][0], sizeof(dst->q[0]));
        }
      }
    }

    static void tile(const Wt* w, const Act* a, int kb, float32x4_t* out) {
      Accumulators acc(out);
      float32x4_t* f = acc.v;
      for (int b = 0; b < kb; ++b) {
        int32x4_t sumi[kTokens];
        for (int32x4_t& x : sumi) x = vdupq_n_s32(0);
        for (int s = 0; s < 16; ++s) {
          int32x4_t d[kTokens];
          dots(w[b].q + 4 * s, a[b].q + 4 * s, 4, d);
          const int32x4_t sc = vld1q_s32(w[b].sc[s]);
          for (int t = 0; t < kTokens; ++t) sumi[t] = vmlaq_s32(sumi[t], d[t], sc);
        }
        const float32x4_t dw = vld1q_f32(w[b].d);
        for (int t = 0; t < kTokens; ++t) {
          f[t] = vfmaq_f32(f[t], vcvtq_f32_s32(sumi[t]), vmulq_n_f32(dw, a[b].d[t]));
        }
      }
    }
    static void finish(float32x4_t*) {}  // f is rows in lanes already
  };

  // ---- the driver -----------------------------------------------------------------------

  // A gemm through kernel traits K, which define
  //   kBlockElems, kChunk    elements per block; blocks per unpacked chunk of weights
  //   Act, Wt                one packed block of 8 tokens; one unpacked block of 4 rows
  //   pack(rows, block, Act*)     block `block` of 8 activation rows (null: missing, zeros)
  //   unpack(rows, block, Wt*)    block `block` of 4 weight rows (null: missing, zeros)
  //   tile(const Wt*, const Act*, kb, float32x4_t f[8])  adds kb blocks of the 4 rows'
  //     dots with 8 tokens to f, in a layout of its own
  //   finish(float32x4_t f[8])    that layout to rows in lanes, f[t] for token t
  // A packed group is the Act blocks of 8 tokens' whole rows, in block order.
  template <class K>
  struct Driver {
    using Act = typename K::Act;
    using Wt = typename K::Wt;

    // Rounded up to 64 bytes, the alignment GemmKernels promises for every group.
    static size_t group_bytes(int64_t n) {
      return (sizeof(Act) * static_cast<size_t>(n / K::kBlockElems) + 63) & ~size_t{63};
    }

    static void pack_act(int64_t n, const uint8_t* act, size_t act_stride, int64_t n_valid,
                         uint8_t* dst) {
      const uint8_t* rows[kTokens];
      for (int t = 0; t < kTokens; ++t) {
        rows[t] = t < n_valid ? act + static_cast<size_t>(t) * act_stride : nullptr;
      }
      auto* out = reinterpret_cast<Act*>(dst);
      for (int64_t b = 0; b < n / K::kBlockElems; ++b) K::pack(rows, b, &out[b]);
    }

    // Tiles of kTileRows rows by kTileTokens tokens: each chunk of kChunk blocks of 4 rows
    // is unpacked once and meets every token group of the tile.
    static void gemm(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                     const uint8_t* packed, int64_t n_tokens, float* y, int64_t ldy) {
      const int64_t n_blocks = n / K::kBlockElems;
      const size_t group = group_bytes(n);
      Wt wbuf[K::kChunk];
      float32x4_t acc[kTileQuads][kTileTokens];  // rows 4q .. 4q + 3 in lanes, per token

      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
        const int64_t nt = std::min<int64_t>(kTileTokens, n_tokens - t0);
        const int n_groups = static_cast<int>((nt + kTokens - 1) / kTokens);
        const uint8_t* tile_act = packed + static_cast<size_t>(t0 / kTokens) * group;

        for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
          const int64_t nr = std::min(kTileRows, n_rows - r0);
          const int n_quads = static_cast<int>((nr + kRows - 1) / kRows);
          for (int q = 0; q < n_quads; ++q) {
            for (float32x4_t& f : acc[q]) f = vdupq_n_f32(0.0f);
          }
          for (int64_t k0 = 0; k0 < n_blocks; k0 += K::kChunk) {
            const int kb = static_cast<int>(std::min<int64_t>(K::kChunk, n_blocks - k0));
            for (int q = 0; q < n_quads; ++q) {
              const uint8_t* rows[kRows];
              for (int i = 0; i < kRows; ++i) {
                const int64_t r = kRows * q + i;
                rows[i] = r < nr ? w + static_cast<size_t>(r0 + r) * w_stride : nullptr;
              }
              for (int b = 0; b < kb; ++b) K::unpack(rows, k0 + b, &wbuf[b]);
              for (int g = 0; g < n_groups; ++g) {
                const auto* a =
                    reinterpret_cast<const Act*>(tile_act + static_cast<size_t>(g) * group);
                K::tile(wbuf, a + k0, kb, acc[q] + kTokens * g);
              }
            }
          }
          for (int q = 0; q < n_quads; ++q) {
            for (int g = 0; g < n_groups; ++g) K::finish(acc[q] + kTokens * g);
            const int64_t rm = std::min<int64_t>(kRows, nr - kRows * q);
            for (int64_t t = 0; t < nt; ++t) {
              float* yt = y + (t0 + t) * ldy + r0 + kRows * q;
              if (rm == kRows) {
                vst1q_f32(yt, acc[q][t]);
              } else {
                float lanes[kRows];
                vst1q_f32(lanes, acc[q][t]);
                std::copy(lanes, lanes + rm, yt);
              }
            }
          }
        }
      }
    }

    static GemmKernels kernels() {
      GemmKernels k;
      k.group_tokens = kTokens;
      k.group_bytes = group_bytes;
      k.pack_act = pack_act;
      k.gemm = gemm;
      return k;
    }
  };
};

}  // namespace qrun::kernels::neon
