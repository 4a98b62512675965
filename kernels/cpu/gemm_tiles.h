// The tile driver of the SIMD gemm kernels (avx2/ and avx512/ gemm_*.cpp), written once:
// activations are packed once per matmul, kLanes tokens interleaved per vector; the driver
// walks tiles of kTileRows weight rows by kTileVecs token vectors, unpacks each chunk of a
// micro-tile of rows once and meets every vector of the tile with it. The ISA supplies its
// lane count, tile shape and the final store as `Isa`; the kernel traits `K` supply the
// packing, unpacking and micro-kernels. Both are declared in that ISA's namespace, so every
// instantiation is a distinct symbol compiled with that ISA's flags.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::gemm_tiles {

// Isa provides, as static members:
//   kLanes                      tokens per vector (one packed group)
//   kTileVecs                   token vectors per driver tile
//   kPrefetch                   whether to prefetch each row's next chunk of weights
//   store(acc, ld, nr, nt, y, ldy)
//       y[t * ldy + r] = acc[r * ld + t] for r < nr, t < nt (acc has kTileRows rows)
inline constexpr int64_t kTileRows = 128;  // weight rows per driver tile

// Calls K::tile<R, V> for R == rm (1 <= rm <= kMax). Not inlined into the driver: each
// micro-kernel gets the registers to itself (inlined, GCC spilled AVX2 Q4_0's int16 sums to
// the stack and pp128 lost ~14 %).
template <class K, int V, int kMax>
[[gnu::noinline]] void tile_dispatch(int rm, const typename K::Wt* const* w,
                                     const typename K::Act* a, int64_t a_stride, int kb, float* acc,
                                     int64_t ld) {
  if constexpr (kMax >= 1) {
    if (rm == kMax) {
      K::template tile<kMax, V>(w, a, a_stride, kb, acc, ld);
    } else {
      tile_dispatch<K, V, kMax - 1>(rm, w, a, a_stride, kb, acc, ld);
    }
  }
}

// A gemm through kernel traits K, which define
//   kBlockElems        elements per weight block
//   kChunk             blocks per K chunk (a chunk of weight rows is unpacked at a time)
//   kRows              rows per micro-tile
//   kVecs              token vectors per micro-tile (1 or 2)
//   Act                one block of kLanes packed tokens; Wt: one unpacked weight block
//   pack(rows, n_valid, block, Act*)       packs block `block` of kLanes activation rows
//   unpack(row, block, Wt*)                unpacks block `block` of one weight row
//   tile<R, V>(const Wt* const w[R], const Act* a, int64_t a_stride, int kb, float* acc,
//              int64_t ld)
//     adds the dots of R unpacked rows (kb blocks each) with V vectors of kLanes packed
//     tokens (vector v's blocks at a + v * a_stride) to acc[r * ld + kLanes * v + lane].
// A packed group (GemmKernels in kernel_table.h) is one vector of kLanes tokens: the Act
// blocks of the whole row, in block order, padded to 64 bytes.
template <class Isa, class K>
struct Gemm {
  using Act = typename K::Act;
  using Wt = typename K::Wt;
  static constexpr int kLanes = Isa::kLanes;
  static_assert(sizeof(Act) % (4 * kLanes) == 0, "packed blocks stay vector aligned");
  static_assert(K::kVecs == 1 || sizeof(Act) % 64 == 0,
                "two-vector tiles step over unpadded groups, n_blocks Acts apart");

  // Rounded up to 64 bytes, the alignment GemmKernels promises for every group.
  static size_t group_bytes(int64_t n) {
    const size_t bytes = sizeof(Act) * static_cast<size_t>(n / K::kBlockElems);
    if constexpr (sizeof(Act) % 64 == 0) return bytes;  // no padding: the same, folded
    return (bytes + 63) & ~size_t{63};
  }

  static void pack_act(int64_t n, const uint8_t* act, size_t act_stride, int64_t n_valid,
                       uint8_t* dst) {
    const uint8_t* rows[kLanes];
    for (int64_t t = 0; t < n_valid; ++t) rows[t] = act + static_cast<size_t>(t) * act_stride;
    auto* out = reinterpret_cast<Act*>(dst);
    const int64_t n_blocks = n / K::kBlockElems;
    for (int64_t b = 0; b < n_blocks; ++b) K::pack(rows, static_cast<int>(n_valid), b, &out[b]);
  }

  // Tiles of kTileRows rows by kTileVecs vectors: each chunk of kChunk blocks of a micro-tile
  // of rows is unpacked once and meets every vector of the tile, whose packed blocks of
  // that chunk stay in cache (L2) across the micro-tiles.
  static void gemm(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                   const uint8_t* packed, int64_t n_tokens, float* y, int64_t ldy) {
    constexpr int kChunk = K::kChunk;
    constexpr int kR = K::kRows;
    constexpr int64_t kLd = Isa::kTileVecs * kLanes;
    const int64_t n_blocks = n / K::kBlockElems;
    const size_t group = group_bytes(n);
    const int64_t a_stride = n_blocks;  // in Act units: groups of two-vector K are unpadded
    const size_t block_bytes = n_blocks > 0 ? w_stride / static_cast<size_t>(n_blocks) : 0;
    const size_t prefetch_bytes = block_bytes * kChunk;

    alignas(64) Wt wbuf[kR][kChunk];
    alignas(64) float acc[kTileRows * kLd];

    for (int64_t t0 = 0; t0 < n_tokens; t0 += kLd) {
      const int64_t nt = std::min<int64_t>(kLd, n_tokens - t0);
      const int n_vecs = static_cast<int>((nt + kLanes - 1) / kLanes);
      const uint8_t* tile_act = packed + static_cast<size_t>(t0 / kLanes) * group;

      for (int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
        const int64_t nr = std::min(kTileRows, n_rows - r0);
        std::fill(acc, acc + kTileRows * kLd, 0.0f);

        for (int64_t k0 = 0; k0 < n_blocks; k0 += kChunk) {
          const int kb = static_cast<int>(std::min<int64_t>(kChunk, n_blocks - k0));
          for (int64_t r = 0; r < nr; r += kR) {
            const int rm = static_cast<int>(std::min<int64_t>(kR, nr - r));
            const Wt* wrows[kR];
            for (int i = 0; i < rm; ++i) {
              const uint8_t* row = w + static_cast<size_t>(r0 + r + i) * w_stride;
              for (int b = 0; b < kb; ++b) K::unpack(row, k0 + b, &wbuf[i][b]);
              if constexpr (Isa::kPrefetch) {
                // This row's next chunk, which the hardware prefetchers miss as rows alternate.
                const size_t next = static_cast<size_t>(k0 + kb) * block_bytes;
                for (size_t o = 0; o < prefetch_bytes && next + o < w_stride; o += 64) {
                  __builtin_prefetch(row + next + o, 0, 3);
                }
              }
              wrows[i] = wbuf[i];
            }
            float* out = acc + r * kLd;
            const auto act_of = [&](int v) {
              return reinterpret_cast<const Act*>(tile_act + static_cast<size_t>(v) * group) + k0;
            };
            int v = 0;
            if constexpr (K::kVecs == 2) {
              for (; v + 2 <= n_vecs; v += 2) {
                tile_dispatch<K, 2, kR>(rm, wrows, act_of(v), a_stride, kb, out + v * kLanes, kLd);
              }
            }
            for (; v < n_vecs; ++v) {
              tile_dispatch<K, 1, kR>(rm, wrows, act_of(v), a_stride, kb, out + v * kLanes, kLd);
            }
          }
        }

        Isa::store(acc, kLd, nr, nt, y + t0 * ldy + r0, ldy);
      }
    }
  }

  static GemmKernels kernels() {
    GemmKernels k;
    k.group_tokens = kLanes;
    k.group_bytes = group_bytes;
    k.pack_act = pack_act;
    k.gemm = gemm;
    return k;
  }
};

}  // namespace qrun::kernels::gemm_tiles
