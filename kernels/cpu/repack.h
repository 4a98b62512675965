// Decode layouts for Q4_0, IQ4_NL, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights: 16 rows interleaved so
// that one 512-bit vector holds 4 bytes of each of the 16 rows ("x16"). A vpdpbusd of such a vector
// with 4 broadcast activation bytes then adds 4 products to each row's int32 lane, and the 16 rows'
// fp16 scales are one 32-byte load: the per-block work that a row-by-row gemv spends on horizontal
// sums and scattered scale loads disappears.
//
// A repacked tensor has the same size as the GGML one. Rows go in groups of kRepackRows;
// group g occupies the bytes of GGML rows 16g .. 16g + 15 (16 * row_bytes, nb blocks per
// row), laid out as
//   d[nb][16]      uint16   the fp16 scale of row j's block b at d[b][j]
//   q[nb][K][16][4] uint8   q[b][k][j][i] = byte 4k + i of row j's block b quants
// with K = 4 for Q4_0 and IQ4_NL (the 16 qs bytes, nibbles as stored: low nibble element
// 4k + i, high nibble element 16 + 4k + i) and K = 8 for Q8_0 (the 32 quants stored as q + 128,
// unsigned, for vpdpbusd). Rows after the last whole group are copied unchanged, at their
// GGML offsets. Nothing here depends on the ISA; the kernels that read it do.
//
// Q5_0 puts the rows' fp16 scales first, d[nb][16] (uint16), then 320 bytes per block b:
//   h[16][4]        uint8   row j's 32 high bits, regrouped: bit 2c + s of byte i is the
//                           high bit of element 16s + 4c + i (c < 4, s < 2, i < 4)
//   q[4][16][4]     uint8   q[c][j][i] = qs byte 4c + i of row j (as Q4_0)
// so the high bits of the 4 elements that column c's low (s = 0) or high (s = 1) nibbles
// hold sit at the same bit, 2c + s, of the 4 bytes of a row's lane: one 16-bit shift by
// 4 - (2c + s) and a mask put them at bit 4 of the levels.
//
// Q4_K keeps each super-block of the 16 rows together, 2304 bytes (16 * 144) at b * 2304:
//   d[16], dmin[16]  uint16  the rows' fp16 super-block scales
//   sc[3][16][4]     uint8   sc[k][j][i] = byte 4k + i of row j's 12 packed scale bytes
//   q[32][16][4]     uint8   q[k][j][i] = byte 4k + i of row j's 128 qs bytes
// so vector q[8g + l] holds, in each row's lane, elements 64g + 4l .. + 3 (low nibbles) and
// 64g + 32 + 4l .. + 3 (high nibbles).
//
// Q5_K is Q4_K's layout with the rows' qh between the scales and the quants, 2816 bytes
// (16 * 176) at b * 2816: d[16], dmin[16], sc[3][16][4], then
//   qh[8][16][4]     uint8   qh[l][j][i] = byte 4l + i of row j's 32 qh bytes
// and q[32][16][4] as Q4_K's. Bit 2g (2g + 1) of qh column l is bit 4 of the elements that
// the low (high) nibbles of vector q[8g + l] hold.
//
// Q6_K puts the rows' fp16 scales first, d[nb][16] (uint16), then 3328 bytes per
// super-block b: ql[32][16][4], qh[16][16][4] and sc[4][16][4], each the 4-byte columns of
// that field of the 16 rows as above (ql[m][j][i] = byte 4m + i of row j's ql, and so on).
// (avx512/gemv_repacked.cpp reads a 64-byte q[b][k] as one vector; avx2/gemv_repacked.cpp as
// two halves, rows 0-7 and 8-15; neon/gemv_repacked_impl.h as four quarters of 4 rows, whose
// Q8_0 bytes it xors back to signed levels.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "ggml-like/dtype.h"

namespace qrun::kernels {

inline constexpr int64_t kRepackRows = 16;

// Bytes of one block of a Q5_0 group after the scales: 16 rows' high bits, then quants.
inline constexpr size_t kQ5_0GroupBlockBytes = kRepackRows * (4 + 16);

// The Q5_0 high bits of one row (qh as a little-endian uint32, bit e for element e) in
// the regrouped order of the x16 layout.
constexpr uint32_t regroup_q5_0_high_bits(uint32_t qh) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < 4; ++c) {
      for (int s = 0; s < 2; ++s) {
        out |= ((qh >> (16 * s + 4 * c + i)) & 1u) << (8 * i + 2 * c + s);
      }
    }
  }
  return out;
}

// Whether `type` has an x16 layout (Q4_0, IQ4_NL, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K).
bool has_repacked_layout(DType type);

// Repacks rows [0, n_rows) of a `type` matrix with n columns from GGML layout (src, rows
// row_size(type, n) bytes apart) into dst (the same size; must not overlap src). n is a
// multiple of the block size. Whole groups are repacked, the other rows copied; callers may
// split the work by calling it on whole groups (src and dst offset alike).
void repack_rows(DType type, int64_t n, const uint8_t* src, int64_t n_rows, uint8_t* dst);

// ---- for the ISA kernels that read these layouts ----

// A vpshufb control for the k-quant kernels, for a whole 512-bit vector (256-bit kernels
// load the first 32 bytes): in every 32-bit lane, int16 half h takes byte lo[h] of that
// lane as its low byte and byte hi[h] as its high byte, where -1 gives a zero byte.
struct alignas(64) Int16Control {
  uint8_t bytes[64];
};
constexpr Int16Control int16_control(int lo0, int hi0, int lo1, int hi1) {
  Int16Control c{};
  const int pick[4] = {lo0, hi0, lo1, hi1};
  for (int i = 0; i < 64; ++i) {
    const int p = pick[i % 4];
    c.bytes[i] = p < 0 ? uint8_t{0x80} : static_cast<uint8_t>(i % 16 - i % 4 + p);
  }
  return c;
}
// Bytes b and b + 1 of each 32-bit lane zero-extended to its two int16 halves.
constexpr Int16Control int16_pair_control(int b) {
  return int16_control(b, -1, b + 1, -1);
}
// Byte b of each 32-bit lane, zero-extended, in both int16 halves.
constexpr Int16Control int16_dup_control(int b) {
  return int16_control(b, -1, b, -1);
}
// Byte b of each 32-bit lane as the high byte of both int16 halves (an arithmetic shift
// right by 8 then sign-extends it).
constexpr Int16Control int16_high_dup_control(int b) {
  return int16_control(-1, b, -1, b);
}
inline constexpr Int16Control kPairControls[2] = {int16_pair_control(0), int16_pair_control(2)};
inline constexpr Int16Control kDupControls[4] = {int16_dup_control(0), int16_dup_control(1),
                                                 int16_dup_control(2), int16_dup_control(3)};
inline constexpr Int16Control kHighDupControls[4] = {
    int16_high_dup_control(0), int16_high_dup_control(1), int16_high_dup_control(2),
    int16_high_dup_control(3)};

// A pass of a repacked gemv over `count` whole groups (group_bytes apart, nb blocks per row),
// read side by side; Act is the activation block type.
template <class Act>
using GroupPassFn = void (*)(int64_t nb, const uint8_t* base, size_t group_bytes, const Act* a,
                             float* y);

// The walk of every GemvRepackedFn: Weight blocks of block_elems elements, passes of `wide`
// groups (wide_count of them side by side), then the remaining groups one by one.
template <class Weight, class Act>
void run_group_passes(int64_t n, int64_t block_elems, const uint8_t* groups, int64_t n_groups,
                      const uint8_t* act, float* y, int64_t wide_count, GroupPassFn<Act> wide,
                      GroupPassFn<Act> one) {
  const int64_t nb = n / block_elems;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(Weight);
  const auto* a = reinterpret_cast<const Act*>(act);
  int64_t g = 0;
  for (; wide_count > 1 && g + wide_count <= n_groups; g += wide_count) {
    wide(nb, groups + static_cast<size_t>(g) * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
  for (; g < n_groups; ++g) {
    one(nb, groups + static_cast<size_t>(g) * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
}

// ---- for the multi-row kernels (GemvRepackedRowsFn) ----

// What a Q4_0 or IQ4_NL activation row's block adds to that row's sums besides its quants:
// the seed of the integer sum (-8 or -128 times sum(a), as the kernels store the levels) and
// the block's scale as a float. The rows kernels
// work these out once per call for every row and block, not once per group.
struct Q4_0ActBlock {
  int32_t corr;
  float d;
};

// The walk of every GemvRepackedRowsFn: group after group (group_bytes apart), each met by
// the activation rows kMaxRows at a time, so that a group is read from memory once and
// stays in cache for the later passes: pass(rows, group, t) meets `group` with rows
// t .. t + rows - 1.
template <int64_t kMaxRows, class Pass>
void run_row_passes(const uint8_t* groups, int64_t n_groups, size_t group_bytes, int64_t n_act,
                    Pass&& pass) {
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* group = groups + static_cast<size_t>(g) * group_bytes;
    for (int64_t t = 0; t < n_act; t += kMaxRows) {
      pass(n_act - t < kMaxRows ? n_act - t : kMaxRows, group, g, t);
    }
  }
}

}  // namespace qrun::kernels
