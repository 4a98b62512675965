// AVX-512 VNNI decode gemv over the x16 layouts of kernels/cpu/repack.h for several
// activation rows at once (GemvRepackedRowsFn): a batch of decode rows, one per sequence of
// a serve step. gemv_repacked.cpp reads a group's block and unpacks its nibbles for one row;
// here each group is walked once per kMaxRows activation rows, every block unpacked once
// and then met by each of them, so a row costs its vpdpbusd and its float step alone.
// Each row's integer sums and float chain are gemv_repacked.cpp's (and so vec_dot's), bit
// for bit. A group (16 rows, under 20 KiB at n = 2048) stays in L1 between the passes.
//   Q4_0, IQ4_NL: per block, 4 vectors of nibbles (IQ4_NL's through its table, as in
//     gemv_repacked.cpp) give 8 vpdpbusd per activation row, seeded with -8 (IQ4_NL: -128)
//     times sum(a) of that row's block; both that seed and the row's fp16 scale are worked
//     out once per call (Q4_0ActBlock, repack.h), not once per group.
//   Q4_K: gemv_repacked.cpp's q4_k_super keeps 8 int32 sums per row, sumi[l] over the
//     columns q[8j + l] (j < 4), and 4 float mins terms. Here the columns go l by l (the 8
//     sub-block scale vectors decoded once per super-block), each unpacked once, and each
//     activation row keeps one live sum, as for Q6_K below. The mins' int16 pair sums of
//     each row's bsums are formed once per call. Float steps and the end are q4_k_groups'.
//   Q5_K: Q4_K's walk, each column's levels merged with its fifth bit as q5_k_super merges
//     them (q5_k_levels), the qh column read once per l; float steps and the end are
//     q5_k_groups'.
//   Q6_K: gemv_repacked.cpp's q6_k_super keeps 8 int32 sums per row, sumi[i] over the
//     columns c with c mod 8 = i (ql columns 16h + i and 16h + i + 8 of both halves h), and
//     adds d * float(sumi[i]) to acc[i] per super-block. Integer sums are exact, so their
//     order is free: here the columns go i by i, each i's four ql columns (and its qh column)
//     unpacked once into 6-bit levels, and each activation row keeps one live sum, which
//     leaves registers for 8 rows. The rows' vpmaddubsw(32, a) offsets (q6_k_super's
//     offset[]) are formed once per call. Float steps and the final hsum_f32x8 order are
//     q6_k_groups'.
#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include "ggml-like/quants.h"
#include "kernels/cpu/avx512/dot_kernels.h"
#include "kernels/cpu/avx512/repacked_common.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx512 {
namespace {

// Activation rows a pass meets each block with: 8 accumulators and 8 unpacked vectors fit
// the 32 registers with room for the temporaries.
constexpr int64_t kMaxRows = 8;

// Every pass asks for the bytes ahead of it: one group is one memory stream, which the
// hardware prefetcher alone leaves idle between its requests (as gemv_repacked.cpp
// measured). A Q4_0 pass asks for its quants kL2PrefetchBytes ahead and its scales (4
// blocks a line) kPrefetchScales blocks ahead, into L2; on the EPYC guest that made 8
// sequences of TinyLlama Q4_0 decode 1.05x as fast as prefetching into L1. A k-quant pass
// of up to 4 rows asks as its one-row kernel does (L2: Q4_K and Q5_K 4 KiB ahead, Q6_K one
// super-block ahead); with more rows, whose unpacking and products take longer per byte, it
// asks into L1 (Q4_K, Q5_K 2 KiB ahead). qrun bench -n 16 -np 2,4,8 on llama-3.2-1b-shaped
// files, 2026-12-07: 2 and 4 sequences decoded 1.15-1.75x as fast with L2 than with L1
// (Q4_K_M, Q5_K_M, Q6_K; one and two threads); 6 to 11 were even on those files, and
// Gemma 3 270M's 8 sequences were 0.94x with L2 (within the noise, so L1 stays there).
constexpr int64_t kPrefetchScales = 64;

// The k-quant passes' prefetch of the `lines` lines at p + ahead: into L2 for a pass of up
// to 4 rows, into L1 for more (above).
template <int kR>
inline void prefetch_rows(const uint8_t* p, size_t ahead, int lines) {
  for (int l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + ahead + 64 * l),
                 kR <= 4 ? _MM_HINT_T1 : _MM_HINT_T0);
  }
}

inline void prefetch_ahead(const uint8_t* quants, const uint16_t* scales) {
  prefetch_to_l2(quants, 4);
  _mm_prefetch(reinterpret_cast<const char*>(scales + kPrefetchScales * kRepackRows), _MM_HINT_T1);
}

// prep[b * n_act + t] for every block b of every activation row t, for the nibble blocks of
// Levels (repacked_common.h).
template <class Levels>
void prepare_nibble_rows(int64_t nb, const uint8_t* act, size_t act_stride, int64_t n_act,
                         Q4_0ActBlock* prep) {
  for (int64_t t = 0; t < n_act; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      prep[b * n_act + t] = {offset_seed(a[b].qs, Levels::kOffset), fp16_load(a[b].d)};
    }
  }
}

// kR activation rows (act, act_stride apart; their Q4_0ActBlocks at prep[b * n_act]) against one
// group of 16 rows of Levels' nibble blocks: y[t * ldy + j].
template <int kR, class Levels>
void nibble_group_rows(int64_t nb, const uint8_t* group, const uint8_t* act, size_t act_stride,
                       const Q4_0ActBlock* prep, int64_t n_act, float* y, int64_t ldy) {
  const Levels levels;
  const __m512i m4 = _mm512_set1_epi8(15);
  const uint8_t* q = group + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  const auto* scales = reinterpret_cast<const uint16_t*>(group);
  __m512 acc[kR];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qb = q + static_cast<size_t>(b) * 4 * 64;
    prefetch_ahead(qb, scales + b * kRepackRows);
    __m512i lo[4];
    __m512i hi[4];
    for (int k = 0; k < 4; ++k) {
      const __m512i w = load512(qb + 64 * k);
      lo[k] = levels(_mm512_and_si512(w, m4));
      hi[k] = levels(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4));
    }
    const __m512 d = _mm512_cvtph_ps(load256(scales + b * kRepackRows));
    const Q4_0ActBlock* p = prep + b * n_act;
    for (int t = 0; t < kR; ++t) {
      const int8_t* aq =
          reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * act_stride)[b].qs;
      __m512i s = _mm512_set1_epi32(p[t].corr);
      for (int k = 0; k < 4; ++k) {
        s = _mm512_dpbusd_epi32(s, lo[k], bcast32(aq + 4 * k));
        s = _mm512_dpbusd_epi32(s, hi[k], bcast32(aq + 16 + 4 * k));
      }
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(p[t].d)), acc[t]);
    }
  }
  for (int t = 0; t < kR; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// offsets[(b * n_act + t) * 64 + c]: vpmaddubsw(32, a) of activation row t's column c
// (elements 4c .. 4c + 3) of super-block b, the int16 pair (32 (a0 + a1), 32 (a2 + a3)).
void prepare_q6_k_rows(int64_t nb, const uint8_t* act, size_t act_stride, int64_t n_act,
                       int32_t* offsets) {
  const __m512i m32 = _mm512_set1_epi8(32);
  for (int64_t t = 0; t < n_act; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      int32_t* o = offsets + (b * n_act + t) * (kQKK / 4);
      for (int v = 0; v < 4; ++v) {
        _mm512_storeu_si512(o + 16 * v, _mm512_maddubs_epi16(m32, load512(a[b].qs + 64 * v)));
      }
    }
  }
}

// kR activation rows (act, act_stride apart; their offsets at offsets[b * n_act * 64])
// against one group of 16 Q6_K rows: y[t * ldy + j].
template <int kR>
void q6_k_group_rows(int64_t nb, const uint8_t* group, const uint8_t* act, size_t act_stride,
                     const int32_t* offsets, int64_t n_act, float* y, int64_t ldy) {
  constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
  const Q6KConstants k;
  const auto* d16 = reinterpret_cast<const uint16_t*>(group);
  const uint8_t* quants = group + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  const BlockQ8_K* a[kR];
  for (int t = 0; t < kR; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride);
  }
  __m512 acc[kR][8];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* ql = quants + static_cast<size_t>(b) * kSuperBytes;
    const uint8_t* qh = ql + kRepackRows * kQKK / 2;
    const uint8_t* sc = qh + kRepackRows * kQKK / 4;
    const __m512 dw = widen_f16x16(load256(d16 + b * kRepackRows));
    __m512i scale[16];
    q6_k_scales(sc, k, scale);
    const int32_t* off = offsets + b * n_act * (kQKK / 4);
    for (int i = 0; i < 8; ++i) {
      __m512i sumi[kR];
      for (auto& v : sumi) v = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i th = load512(qh + static_cast<size_t>(8 * h + i) * 64);
        for (int half = 0; half < 2; ++half) {
          const int m = i + 8 * half;
          // Two lines per column of the next super-block, as q6_k_super prefetches.
          const size_t ahead = kSuperBytes + static_cast<size_t>(16 * h + m) * 128;
          prefetch_rows<kR>(ql, ahead, 2);
          __m512i lev_lo;
          __m512i lev_hi;
          q6_k_levels(load512(ql + static_cast<size_t>(16 * h + m) * 64), th, m, k, lev_lo, lev_hi);
          const int c_lo = 32 * h + m;
          const int c_hi = c_lo + 16;
          for (int t = 0; t < kR; ++t) {
            const int32_t* o = off + t * (kQKK / 4);
            const __m512i p_lo = _mm512_sub_epi16(
                _mm512_maddubs_epi16(lev_lo, bcast32(a[t][b].qs + 4 * c_lo)), bcast32(o + c_lo));
            const __m512i p_hi = _mm512_sub_epi16(
                _mm512_maddubs_epi16(lev_hi, bcast32(a[t][b].qs + 4 * c_hi)), bcast32(o + c_hi));
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], p_lo, scale[c_lo / 4]);
            sumi[t] = _mm512_dpwssd_epi32(sumi[t], p_hi, scale[c_hi / 4]);
          }
        }
      }
      for (int t = 0; t < kR; ++t) {
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(a[t][b].d), dw);
        acc[t][i] = _mm512_fmadd_ps(dd, to_float(sumi[t]), acc[t][i]);
      }
    }
  }
  // q6_k_groups' end.
  for (int t = 0; t < kR; ++t) _mm512_storeu_ps(y + t * ldy, sum8_in_hsum_order(acc[t]));
}

// mins[(b * n_act + t) * 4 + p]: q4_k_mins_pair of activation row t's super-block b.
void prepare_q4_k_rows(int64_t nb, const uint8_t* act, size_t act_stride, int64_t n_act,
                       int32_t* mins) {
  for (int64_t t = 0; t < n_act; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      for (int p = 0; p < 4; ++p) mins[(b * n_act + t) * 4 + p] = q4_k_mins_pair(a[b], p);
    }
  }
}

// kR activation rows (act, act_stride apart; their mins pairs at mins[b * n_act * 4])
// against one group of 16 Q4_K or Q5_K rows: y[t * ldy + j].
template <class Block, int kR>
void k_group_rows(int64_t nb, const uint8_t* group, const uint8_t* act, size_t act_stride,
                  const int32_t* mins, int64_t n_act, float* y, int64_t ldy) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  using Mins = std::conditional_t<kQ5, Q5KMins, Q4KMins>;
  constexpr size_t kSuperBytes = kRepackRows * sizeof(Block);
  constexpr size_t kAhead = kR <= 4 ? kL2PrefetchBytes : kPrefetchBytes;
  const Q4KConstants k;
  const BlockQ8_K* a[kR];
  for (int t = 0; t < kR; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_stride);
  }
  __m512 acc[kR][8];
  Mins acc_m[kR];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + static_cast<size_t>(b) * kSuperBytes;
    const __m512 dw = widen_f16x16(load256(blk));
    const __m512 dminw = widen_f16x16(load256(blk + 32));
    const Q4KScales sm = q4_k_scales(blk, k);
    prefetch_rows<kR>(blk, kAhead, 4);
    const int32_t* mb = mins + b * n_act * 4;
    for (int t = 0; t < kR; ++t) {
      acc_m[t].add(_mm512_mul_ps(_mm512_set1_ps(-a[t][b].d), dminw), sm, mb + t * 4);
    }
    __m512i sc[8];  // (sc[s], sc[s]) int16 pairs of sub-block s
    for (int j = 0; j < 4; ++j) {
      sc[2 * j] = q4_k_scale_pair(sm, j, /*high=*/false, k);
      sc[2 * j + 1] = q4_k_scale_pair(sm, j, /*high=*/true, k);
    }
    const uint8_t* qh = blk + 64 + 3 * 64;  // Q5_K's fifth bits; Q4_K's quants start here
    const uint8_t* q = kQ5 ? qh + 8 * 64 : qh;
    for (int l = 0; l < 8; ++l) {
      __m512i h;  // Q5_K: qh column l, shifted down by 2 per part j
      if constexpr (kQ5) {
        const uint8_t* hv = qh + static_cast<size_t>(l) * 64;
        prefetch_rows<kR>(hv, kAhead, 1);
        h = load512(hv);
      }
      __m512i sumi[kR];
      for (auto& v : sumi) v = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const uint8_t* v = q + static_cast<size_t>(8 * j + l) * 64;
        prefetch_rows<kR>(v, kAhead, 1);
        const __m512i w = load512(v);
        __m512i lo;
        __m512i hi;
        if constexpr (kQ5) {
          q5_k_levels(w, h, k, lo, hi);
          h = _mm512_srli_epi16(h, 2);
        } else {
          lo = _mm512_and_si512(w, k.m4);
          hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), k.m4);
        }
        for (int t = 0; t < kR; ++t) {
          const int8_t* aq = a[t][b].qs + 64 * j;
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(lo, bcast32(aq + 4 * l)),
                                        sc[2 * j]);
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(hi, bcast32(aq + 32 + 4 * l)),
                                        sc[2 * j + 1]);
        }
      }
      for (int t = 0; t < kR; ++t) {
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(a[t][b].d), dw);
        acc[t][l] = _mm512_fmadd_ps(d, to_float(sumi[t]), acc[t][l]);
      }
    }
  }
  // k_super_groups' end: hsum_f32x8(acc) + the mins' total.
  for (int t = 0; t < kR; ++t) {
    _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(sum8_in_hsum_order(acc[t]), acc_m[t].total()));
  }
}

// One pass of a rows kernel: kR rows (from 1) against one group.
template <class Prep>
using GroupRowsFn = void (*)(int64_t nb, const uint8_t* group, const uint8_t* act,
                             size_t act_stride, const Prep* prep, int64_t n_act, float* y,
                             int64_t ldy);

template <class Prep, template <int> class Kernel, size_t... kI>
constexpr std::array<GroupRowsFn<Prep>, sizeof...(kI)> row_passes(std::index_sequence<kI...>) {
  return {Kernel<static_cast<int>(kI) + 1>::run...};
}

template <int kR>
struct Q4_0Rows {
  static constexpr auto run = nibble_group_rows<kR, Q4_0Nibbles>;
};
template <int kR>
struct Iq4NlRows {
  static constexpr auto run = nibble_group_rows<kR, Iq4NlNibbles>;
};
template <int kR>
struct Q4KRows {
  static constexpr auto run = k_group_rows<BlockQ4_K, kR>;
};
template <int kR>
struct Q5KRows {
  static constexpr auto run = k_group_rows<BlockQ5_K, kR>;
};
template <int kR>
struct Q6KRows {
  static constexpr auto run = q6_k_group_rows<kR>;
};

// Every GemvRepackedRowsFn: the activations' per-call values (prep_per_block of Prep per
// row and block, from `prepare`) for all rows, then run_row_passes over the groups with
// passes[r - 1] for a pass of r rows.
template <class Weight, class Prep>
void run_rows(int64_t n, int64_t block_elems, const uint8_t* groups, int64_t n_groups,
              const uint8_t* act, size_t act_stride, int64_t n_act, float* y, int64_t ldy,
              int64_t prep_per_block,
              void (*prepare)(int64_t, const uint8_t*, size_t, int64_t, Prep*),
              const std::array<GroupRowsFn<Prep>, kMaxRows>& passes) {
  const int64_t nb = n / block_elems;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(Weight);
  // Per thread, grown to the largest call and kept: decode steps call this per matmul.
  thread_local std::vector<Prep> prep;
  prep.resize(static_cast<size_t>(nb * n_act * prep_per_block));
  prepare(nb, act, act_stride, n_act, prep.data());
  run_row_passes<kMaxRows>(groups, n_groups, group_bytes, n_act,
                           [&](int64_t rows, const uint8_t* group, int64_t g, int64_t t) {
                             passes[static_cast<size_t>(rows - 1)](
                                 nb, group, act + static_cast<size_t>(t) * act_stride, act_stride,
                                 prep.data() + t * prep_per_block, n_act,
                                 y + t * ldy + g * kRepackRows, ldy);
                           });
}

}  // namespace

void gemv_q6_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy) {
  static constexpr auto kPasses =
      row_passes<int32_t, Q6KRows>(std::make_index_sequence<kMaxRows>{});
  run_rows<BlockQ6_K, int32_t>(n, kQKK, groups, n_groups, act, act_stride, n_act, y, ldy, kQKK / 4,
                               prepare_q6_k_rows, kPasses);
}

void gemv_q4_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy) {
  static constexpr auto kPasses =
      row_passes<int32_t, Q4KRows>(std::make_index_sequence<kMaxRows>{});
  run_rows<BlockQ4_K, int32_t>(n, kQKK, groups, n_groups, act, act_stride, n_act, y, ldy, 4,
                               prepare_q4_k_rows, kPasses);
}

void gemv_q5_k_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy) {
  static constexpr auto kPasses =
      row_passes<int32_t, Q5KRows>(std::make_index_sequence<kMaxRows>{});
  run_rows<BlockQ5_K, int32_t>(n, kQKK, groups, n_groups, act, act_stride, n_act, y, ldy, 4,
                               prepare_q4_k_rows, kPasses);
}

void gemv_q4_0_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                        size_t act_stride, int64_t n_act, float* y, int64_t ldy) {
  static constexpr auto kPasses =
      row_passes<Q4_0ActBlock, Q4_0Rows>(std::make_index_sequence<kMaxRows>{});
  run_rows<BlockQ4_0, Q4_0ActBlock>(n, kQK, groups, n_groups, act, act_stride, n_act, y, ldy, 1,
                                    prepare_nibble_rows<Q4_0Nibbles>, kPasses);
}

void gemv_iq4_nl_x16_rows(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                          size_t act_stride, int64_t n_act, float* y, int64_t ldy) {
  static constexpr auto kPasses =
      row_passes<Q4_0ActBlock, Iq4NlRows>(std::make_index_sequence<kMaxRows>{});
  run_rows<BlockIQ4_NL, Q4_0ActBlock>(n, kQK, groups, n_groups, act, act_stride, n_act, y, ldy, 1,
                                      prepare_nibble_rows<Iq4NlNibbles>, kPasses);
}

}  // namespace qrun::kernels::avx512
