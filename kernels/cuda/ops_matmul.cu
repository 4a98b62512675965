// Decode matmuls as llama.cpp's MMVQ: activations quantized to 8-bit blocks of 32
// (quantize_q8_1), then per output row the integer dot products of its 32-element chunks
// (vecdot_q8_1.cuh) scaled and summed in float, and a butterfly sum over the warp. The
// kernels (mmvq_variant_name; QRUN_CUDA_MMVQ picks mmvq's) differ in how warps read a row:
//  v1: one warp per row, lane l dots whole chunks l, l + 32, ... (loads of one block per
//      lane, so a warp load instruction touches 32 blocks: not coalesced), one token per
//      row of blocks of the grid;
//  v2, v3, v4: the words of a chunk split over lanes (v2, v4: 2 words a lane; v3: 4),
//      neighbouring lanes reading neighbouring words and blocks (coalesced, as llama.cpp's
//      MMVQ); the parts' integer sums meet by shuffles (exact) before one lane scales the
//      chunk; 2 (v2, v3) or 4 (v4) chunks a lane loaded before any is used; up to 8
//      tokens per pass over the weights. Q4_K and Q5_K rows at 16-byte aligned addresses
//      load 8 or 16 bytes at once;
//  v5: 64-chunk tiles of the row through shared memory, read with 16-byte coalesced
//      loads, the next tile in flight while the lanes dot this one as v1 does; up to 8
//      tokens per pass (rows not a multiple of 16 bytes, or misaligned: v2's kernel);
//  v6: v2 with the block's 4 warps on one row (as llama.cpp for one token), their sums
//      added in warp order;
//  v7, v8: Q4_0 and Q8_0 weights repacked at upload (WeightLayout::kGroups8, ops.h): lane l
//      dots whole blocks l, l + 32, ... as v1 does, each block's quants one or two aligned
//      16-byte loads straight into registers (no shared-memory staging), 4 (v7) or 2 (v8)
//      blocks a lane loaded before any is used; v8 gives each warp 2 rows, so the lane's
//      activation words serve both (except on rows longer than 8192 for 1 or 2 tokens,
//      where it runs v7). Other types (or rows of other sizes) run v5's kernel.
//      The same sums in the same order as v1 and v5: the same bits.
// (Tiles of 128 or 256 chunks, and 2 or 4 warps on a row, measured slower than v5 on an
// H200: docs/PERFORMANCE_CUDA.md.)
// Each lane sums its chunks in order, then the warp (then v6's warps): the result differs
// from a double-precision sum of the same integers and scales by the float rounding of at
// most n_in / 32 + 8 additions and a few products per chunk;
// tests/cuda_emu_matmul_test.cpp states the bound it checks, for every variant.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"
#include "kernels/cuda/vecdot_q8_1.cuh"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kRowsPerBlock = 4;  // one warp per output row

__device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Tokens one pass over the weights serves (the kTokens of a launch) for n_tokens tokens.
int token_group(int64_t n_tokens) {
  return n_tokens >= 8 ? 8 : n_tokens >= 3 ? 4 : static_cast<int>(n_tokens);
}

// f(std::integral_constant<int, kTokens>{}) for the kTokens token_group gave (1, 2, 4, 8):
// each kernel's launch instantiated for the four.
template <class F>
void with_token_group(int tokens, F&& f) {
  switch (tokens) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

template <class T>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmvq_kernel(const uint8_t* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x, float* y) {
  wait_for_prior_kernels();
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;  // whole warps leave together
  const int64_t t = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t n_chunks = n_in / 32;
  const uint8_t* row = w + o * (n_in / T::kBlockElems) * T::kBlockBytes;
  const BlockQ8_1* xt = x + t * n_chunks;
  float sum = 0.0f;
  for (int64_t c = lane; c < n_chunks; c += kWarp) sum += vecdot::dot<T>(row, c, xt[c]);
  sum = warp_sum(sum);
  if (lane == 0) y[t * n_out + o] = sum;
}

template <class T>
void launch_mmvq(const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x, int64_t n_tokens,
                 float* y, Stream stream) {
  const dim3 grid(static_cast<unsigned>((n_out + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(n_tokens));
  launch(mmvq_kernel<T>, grid, dim3(kRowsPerBlock * kWarp), stream, static_cast<const uint8_t*>(w),
         n_in, n_out, x, y);
}

// Bytes of each row the grouped kernel prefetches before it waits for the kernel ahead of
// it (QRUN_CUDA_PREFETCH, 0 to 4096 in steps of 128). 512 by measurement: on an H100, the
// 8B Q4_0 file decoded 396 tokens/s with 512, 390 with 0, 367 with 2048 and 364 with 4096
// (large prefetches crowd the loads the kernel ahead of this one still makes).
int prefetch_bytes() {
  static const int bytes = [] {
    const char* env = std::getenv("QRUN_CUDA_PREFETCH");
    if (env == nullptr || *env == '\0') return 512;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    QRUN_CHECK(*end == '\0' && v >= 0 && v <= 4096 && v % 128 == 0,
               "QRUN_CUDA_PREFETCH=%s: not a multiple of 128 from 0 to 4096", env);
    return static_cast<int>(v);
  }();
  return bytes;
}

// Up to kMaxGroup matrices of one type and width (mmvq_group) in one launch: blocks
// first_block[g] .. first_block[g + 1] - 1 of the grid work on matrix g.
struct TileGroup {
  const uint8_t* w[kMaxGroup];
  float* y[kMaxGroup];
  int64_t n_out[kMaxGroup];
  unsigned first_block[kMaxGroup];
  int count;
};

// The matrix block blockIdx.x works on and the group's first block of it, picked with
// constant indices (the group stays in parameter space).
struct GroupMatrix {
  const uint8_t* w;
  float* y;
  int64_t n_out;
  unsigned first;
};
__device__ __forceinline__ GroupMatrix pick_matrix(const TileGroup& group) {
  GroupMatrix m{group.w[0], group.y[0], group.n_out[0], 0};
  QRUN_UNROLL
  for (int g = 1; g < kMaxGroup; ++g) {
    if (g < group.count && blockIdx.x >= group.first_block[g]) {
      m = GroupMatrix{group.w[g], group.y[g], group.n_out[g], group.first_block[g]};
    }
  }
  return m;
}

// The group of jobs for a grid whose blocks take rows_per_block rows each; *blocks: the
// grid's size.
TileGroup make_group(std::span<const MmvqJob> jobs, int64_t rows_per_block, int64_t* blocks) {
  QRUN_CHECK(!jobs.empty() && jobs.size() <= kMaxGroup, "mmvq: a group of %zu matrices",
             jobs.size());
  TileGroup group{};
  *blocks = 0;
  for (size_t g = 0; g < jobs.size(); ++g) {
    group.w[g] = static_cast<const uint8_t*>(jobs[g].w);
    group.y[g] = jobs[g].y;
    group.n_out[g] = jobs[g].n_out;
    group.first_block[g] = static_cast<unsigned>(*blocks);
    *blocks += (jobs[g].n_out + rows_per_block - 1) / rows_per_block;
  }
  group.count = static_cast<int>(jobs.size());
  QRUN_CHECK(*blocks <= 0x7fffffff, "mmvq: %lld blocks", static_cast<long long>(*blocks));
  return group;
}

// kRowWarps warps per row (1 or all kRowsPerBlock of the block); kW words of a chunk per
// lane, so kParts = kWords / kW lanes per chunk and kGroups chunks per step of a warp:
// lane l of warp r of the row takes part l % kParts of chunks
// kGroups * (r + kRowWarps * i) + l / kParts. Tokens blockIdx.y * kTokens ..+kTokens share
// each load of the weights (the last group reads the last token again for its missing
// ones). The row's warps add their sums in warp order. The matrix of a block from the
// group as mmvq_tile_kernel's. (Prefetching each row's first 512 bytes to L2 before the
// wait, as the grouped kernel does, changed nothing measurable on Gemma 3 270M's shapes:
// H200, 1082 against 1085 tokens/s, docs/PERFORMANCE_CUDA.md.)
template <class T, int kW, int kUnroll, int kTokens, bool kA16, int kRowWarps>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmvq_split_kernel(TileGroup group, int64_t n_in, const BlockQ8_1* x, int64_t n_tokens) {
  wait_for_prior_kernels();
  constexpr int kParts = T::kWords / kW;
  constexpr int kGroups = kWarp / kParts;
  constexpr int kStride = kGroups * kRowWarps;  // chunks per step of the row's warps
  static_assert(kParts * kW == T::kWords && kGroups * kParts == kWarp);
  static_assert(kRowWarps == 1 || kRowWarps == kRowsPerBlock);
  const auto [w, y, n_out, first_block] = pick_matrix(group);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x - first_block) * (kRowsPerBlock / kRowWarps) +
                    warp / kRowWarps;
  if (o >= n_out) return;  // whole warps (kRowWarps > 1: the whole block) leave together
  const int sub = warp % kRowWarps;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int part = lane % kParts;
  const int w0 = part * kW;
  const int64_t n_chunks = n_in / 32;
  const uint8_t* row = w + o * (n_in / T::kBlockElems) * T::kBlockBytes;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const BlockQ8_1* xt[kTokens];
  for (int t = 0; t < kTokens; ++t) xt[t] = x + min_i64(t0 + t, n_tokens - 1) * n_chunks;
  float sum[kTokens] = {};
  // Every lane runs every step (the shuffles need the whole warp); chunks past the end
  // read the last chunk and are not added.
  for (int64_t base = 0; base < n_chunks; base += kStride * kUnroll) {
    const int64_t first = base + kGroups * sub + lane / kParts;
    int64_t c[kUnroll];
    vecdot::Words<kW> f[kUnroll];
    for (int u = 0; u < kUnroll; ++u) {
      c[u] = min_i64(first + u * kStride, n_chunks - 1);
      T::template load<kW, kA16>(row, c[u], w0, f[u]);
    }
    for (int u = 0; u < kUnroll; ++u) {
      const bool valid = part == 0 && first + u * kStride < n_chunks;
      for (int t = 0; t < kTokens; ++t) {
        const BlockQ8_1& a = xt[t][c[u]];
        int total = T::part(row, c[u], f[u], vecdot::act_ints(a), w0);
        for (int m = 1; m < kParts; m <<= 1) total += __shfl_xor_sync(0xffffffffu, total, m);
        if (valid) sum[t] += T::finish(row, c[u], a, total);
      }
    }
  }
  if constexpr (kRowWarps == 1) {
    for (int t = 0; t < kTokens; ++t) {
      const float s = warp_sum(sum[t]);
      if (lane == 0 && t0 + t < n_tokens) y[(t0 + t) * n_out + o] = s;
    }
  } else {
    __shared__ float partial[kRowWarps][kTokens];
    for (int t = 0; t < kTokens; ++t) {
      const float s = warp_sum(sum[t]);
      if (lane == 0) partial[sub][t] = s;
    }
    __syncthreads();
    if (threadIdx.x < kTokens && t0 + static_cast<int>(threadIdx.x) < n_tokens) {
      const int t = static_cast<int>(threadIdx.x);
      float s = partial[0][t];
      for (int r = 1; r < kRowWarps; ++r) s += partial[r][t];
      y[(t0 + t) * n_out + o] = s;
    }
  }
}

template <class T, int kW, int kUnroll, bool kA16, int kRowWarps = 1>
void launch_mmvq_split(std::span<const MmvqJob> jobs, int64_t n_in, const BlockQ8_1* x,
                       int64_t n_tokens, Stream stream) {
  const int tokens = token_group(n_tokens);
  int64_t blocks = 0;
  const TileGroup group = make_group(jobs, kRowsPerBlock / kRowWarps, &blocks);
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>((n_tokens + tokens - 1) / tokens));
  const dim3 block(kRowsPerBlock * kWarp);
  with_token_group(tokens, [&](auto k) {
    launch(mmvq_split_kernel<T, kW, kUnroll, decltype(k)::value, kA16, kRowWarps>, grid, block,
           stream, group, n_in, x, n_tokens);
  });
}
template <class T, int kW, int kUnroll, bool kA16, int kRowWarps = 1>
void launch_mmvq_split(const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x,
                       int64_t n_tokens, float* y, Stream stream) {
  const MmvqJob job{w, n_out, y};
  launch_mmvq_split<T, kW, kUnroll, kA16, kRowWarps>(std::span(&job, 1), n_in, x, n_tokens, stream);
}

// Copies of whole 64-chunk tiles of a row through shared memory: the warp reads each
// tile with 16-byte loads of consecutive addresses (fully coalesced whatever the block
// size), the next tile's loads in flight while the lanes dot the current one, lane l the
// chunks l and l + 32 of the tile (vecdot::dot, as v1) for every token. Needs rows that
// are a multiple of 16 bytes at a 16-byte aligned address (launch_variant checks).
constexpr int kTileChunks = 64;

template <int kBytes>
struct alignas(16) Tile {
  int ints[kBytes / 4];
};

template <class T, int kTokens>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmvq_tile_kernel(TileGroup group, int64_t n_in, const BlockQ8_1* x, int64_t n_tokens) {
  constexpr int kChunksPerBlock = T::kBlockElems / 32;
  constexpr int kTileBytes = kTileChunks / kChunksPerBlock * T::kBlockBytes;
  constexpr int kTileVecsPerLane = (kTileBytes / 16 + kWarp - 1) / kWarp;
  static_assert(kTileChunks % kChunksPerBlock == 0 && kTileBytes % 16 == 0);
  __shared__ Tile<kTileBytes> tiles[kRowsPerBlock];
  const auto [w, y, n_out, first] = pick_matrix(group);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x - first) * kRowsPerBlock + warp;
  const bool has_row = o < n_out;
  const int lane = static_cast<int>(threadIdx.x % kWarp);  // (provably 0 .. 31 for GCC)
  const int64_t n_chunks = n_in / 32;
  const int64_t row_bytes = n_in / T::kBlockElems * T::kBlockBytes;
  const uint8_t* row = w + (has_row ? o : 0) * row_bytes;
  int* tile = tiles[warp].ints;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const BlockQ8_1* xt[kTokens];
  for (int t = 0; t < kTokens; ++t) xt[t] = x + min_i64(t0 + t, n_tokens - 1) * n_chunks;
  float sum[kTokens] = {};
  // Zeroed: every slot read is loaded first (i < vecs in both loops), but GCC for arm64 cannot
  // see it for Q2_K's and Q3_K's 84- and 110-byte blocks and warns (-Wmaybe-uninitialized).
  int v[kTileVecsPerLane][4] = {};
  // Vector i of the tile at byte `start` goes to lane i % 32, slot i / 32.
  const auto fetch = [&](int64_t start) {
    const int64_t vecs = min_i64(row_bytes - start, kTileBytes) / 16;
    for (int k = 0; k < kTileVecsPerLane; ++k) {
      const int64_t i = static_cast<int64_t>(k) * kWarp + lane;
      if (i < vecs) load_16b(row + start + 16 * i, v[k]);
    }
  };
  // The first tile's loads are in flight while the kernel before this one finishes.
  if (has_row) fetch(0);
  wait_for_prior_kernels();
  if (!has_row) return;  // whole warps leave together
  for (int64_t c0 = 0; c0 < n_chunks; c0 += kTileChunks) {
    const int64_t start = c0 / kChunksPerBlock * T::kBlockBytes;
    const int64_t vecs = min_i64(row_bytes - start, kTileBytes) / 16;
    for (int k = 0; k < kTileVecsPerLane; ++k) {
      const int64_t i = static_cast<int64_t>(k) * kWarp + lane;
      if (i < vecs) store_16b(tile + 4 * i, v[k]);
    }
    __syncwarp();
    if (c0 + kTileChunks < n_chunks) fetch(start + kTileBytes);
    const auto* t_bytes = reinterpret_cast<const uint8_t*>(tile);
    for (int j = lane; j < kTileChunks && c0 + j < n_chunks; j += kWarp) {
      for (int t = 0; t < kTokens; ++t) sum[t] += vecdot::dot<T>(t_bytes, j, xt[t][c0 + j]);
    }
    __syncwarp();  // the tile is read before the next store
  }
  for (int t = 0; t < kTokens; ++t) {
    const float s = warp_sum(sum[t]);
    if (lane == 0 && t0 + t < n_tokens) y[(t0 + t) * n_out + o] = s;
  }
}

// Whether the tile kernel reads these weights: 16-byte aligned rows of a multiple of 16
// bytes.
template <class T>
bool tile_rows(const void* w, int64_t n_in) {
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
         n_in / T::kBlockElems * T::kBlockBytes % 16 == 0;
}

template <class T>
void launch_mmvq_tile(std::span<const MmvqJob> jobs, int64_t n_in, const BlockQ8_1* x,
                      int64_t n_tokens, Stream stream) {
  int64_t blocks = 0;
  const TileGroup group = make_group(jobs, kRowsPerBlock, &blocks);
  const int tokens = token_group(n_tokens);
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>((n_tokens + tokens - 1) / tokens));
  const dim3 block(kRowsPerBlock * kWarp);
  with_token_group(tokens, [&](auto k) {
    launch(mmvq_tile_kernel<T, decltype(k)::value>, grid, block, stream, group, n_in, x, n_tokens);
  });
}

// Weights in WeightLayout::kGroups8, per type: kQs quant bytes a block (a multiple of 16),
// Vec the vecdot traits whose part() gives the integer dot of a block's kQs / 4 quant
// words with its activation words, and value() the block's float value from that sum and
// the block's scale d, as Vec::finish computes it.
struct G8Q4_0 {
  static constexpr int kQs = 16;
  using Vec = vecdot::Q4_0;
  __device__ __forceinline__ static float value(int sumi, float d, const BlockQ8_1& a) {
    return static_cast<float>(sumi - 8 * a.sum) * (d * a.d);
  }
};

struct G8Q8_0 {
  static constexpr int kQs = 32;
  using Vec = vecdot::Q8_0;
  __device__ __forceinline__ static float value(int sumi, float d, const BlockQ8_1& a) {
    return static_cast<float>(sumi) * (d * a.d);
  }
};

// The 8 activation words of a block (its quants start 8 bytes into a 40-byte block: 8-byte
// aligned).
__device__ __forceinline__ void load_act(const BlockQ8_1& a, int* aq) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(aq, a.qs, 32);
#else
  const int2* p = reinterpret_cast<const int2*>(a.qs);
  QRUN_UNROLL
  for (int k = 0; k < 4; ++k) {
    const int2 v = p[k];
    aq[2 * k] = v.x;
    aq[2 * k + 1] = v.y;
  }
#endif
}

// Each warp takes kRows rows (the last warp's missing ones read the last row again and are
// not written), lane l the blocks l, l + 32, ..., kUnroll of them loaded before any is
// used. Tokens as mmvq_tile_kernel; the matrix of a block from the group as there.
template <class G, int kRows, int kUnroll, int kTokens>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmvq_g8_kernel(TileGroup group, int64_t n_in, const BlockQ8_1* x, int64_t n_tokens,
                   int prefetch_bytes) {
  constexpr int kGroupBytes = 8 * (G::kQs + 2);
  constexpr int kQInts = G::kQs / 4;
  const auto [w, y, n_out, first] = pick_matrix(group);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x - first) * kRowsPerBlock + warp) * kRows;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t n_blocks = n_in / 32;
  const int64_t row_bytes = n_blocks / 8 * kGroupBytes;
  const uint8_t* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = w + min_i64(o0 + r, n_out - 1) * row_bytes;
  // The first prefetch_bytes of the warp's rows, a 128-byte line a lane, on their way to
  // L2 while the kernel before this one finishes.
  if (o0 < n_out && lane * 128 < min_i64(row_bytes, prefetch_bytes)) {
    for (int r = 0; r < kRows; ++r) prefetch_l2(rows[r] + lane * 128);
  }
  wait_for_prior_kernels();
  if (o0 >= n_out) return;  // whole warps leave together
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const BlockQ8_1* xt[kTokens];
  for (int t = 0; t < kTokens; ++t) xt[t] = x + min_i64(t0 + t, n_tokens - 1) * n_blocks;
  float sum[kRows][kTokens] = {};
  for (int64_t b0 = lane; b0 < n_blocks; b0 += kWarp * kUnroll) {
    vecdot::Words<kQInts> q[kUnroll][kRows];
    float d[kUnroll][kRows];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = min_i64(b0 + u * kWarp, n_blocks - 1);
      const int64_t at = b / 8 * kGroupBytes;
      const int k = static_cast<int>(b % 8);
      QRUN_UNROLL
      for (int r = 0; r < kRows; ++r) {
        QRUN_UNROLL
        for (int v = 0; v < kQInts; v += 4)
          load_16b(rows[r] + at + G::kQs * k + 4 * v, q[u][r].q + v);
        d[u][r] = f16_to_f32(*reinterpret_cast<const uint16_t*>(rows[r] + at + 8 * G::kQs + 2 * k));
      }
    }
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + u * kWarp;
      if (b >= n_blocks) break;
      for (int t = 0; t < kTokens; ++t) {
        const BlockQ8_1& a = xt[t][b];
        int aq[8];
        load_act(a, aq);
        QRUN_UNROLL
        for (int r = 0; r < kRows; ++r) {
          const int sumi = G::Vec::template part<kQInts>(nullptr, 0, q[u][r], aq, 0);
          sum[r][t] += G::value(sumi, d[u][r], a);
        }
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      const float s = warp_sum(sum[r][t]);
      if (lane == 0 && o0 + r < n_out && t0 + t < n_tokens) y[(t0 + t) * n_out + o0 + r] = s;
    }
  }
}

template <class G, int kRows, int kUnroll>
void launch_mmvq_g8(std::span<const MmvqJob> jobs, int64_t n_in, const BlockQ8_1* x,
                    int64_t n_tokens, Stream stream) {
  QRUN_CHECK(n_in % 256 == 0, "mmvq: grouped weights with rows of %lld",
             static_cast<long long>(n_in));
  for (const MmvqJob& job : jobs) {
    QRUN_CHECK(reinterpret_cast<uintptr_t>(job.w) % 16 == 0,
               "mmvq: grouped weights at %p, not 16-byte aligned", job.w);
  }
  int64_t blocks = 0;
  const TileGroup group = make_group(jobs, kRowsPerBlock * kRows, &blocks);
  const int tokens = token_group(n_tokens);
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>((n_tokens + tokens - 1) / tokens));
  const dim3 block(kRowsPerBlock * kWarp);
  with_token_group(tokens, [&](auto k) {
    launch(mmvq_g8_kernel<G, kRows, kUnroll, decltype(k)::value>, grid, block, stream, group, n_in,
           x, n_tokens, prefetch_bytes());
  });
}

// v7 (kRows 1, kUnroll 4) or v8 (2, 2) on the grouped weights of `type` (Q4_0 or Q8_0).
// v8 runs v7 on long rows for one or two tokens: on an H100, an 8B layer's down matrix
// (14336 x 4096) took 20.80 us under v7 against 22.11 under v8 for one token (half the
// warps, each with twice the row, left the GPU short of loads in flight); at 8 tokens v8
// took 37.60 against 51.36 (docs/PERFORMANCE_CUDA.md).
void launch_grouped(int variant, DType type, std::span<const MmvqJob> jobs, int64_t n_in,
                    const BlockQ8_1* x, int64_t n_tokens, Stream stream) {
  const bool v7 = variant == 6 || (n_in > 8192 && n_tokens <= 2);
  if (type == DType::kQ4_0) {
    return v7 ? launch_mmvq_g8<G8Q4_0, 1, 4>(jobs, n_in, x, n_tokens, stream)
              : launch_mmvq_g8<G8Q4_0, 2, 2>(jobs, n_in, x, n_tokens, stream);
  }
  return v7 ? launch_mmvq_g8<G8Q8_0, 1, 4>(jobs, n_in, x, n_tokens, stream)
            : launch_mmvq_g8<G8Q8_0, 2, 2>(jobs, n_in, x, n_tokens, stream);
}

// One thread a run of 8 blocks (runs never straddle rows: rows hold a multiple of 8).
template <int kQs>
__global__ void repack_g8_kernel(const uint8_t* src, int64_t n_runs, uint8_t* dst) {
  wait_for_prior_kernels();
  constexpr int kBlockBytes = kQs + 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n_runs;
       g += stride) {
    const uint8_t* in = src + g * 8 * kBlockBytes;
    uint8_t* out = dst + g * 8 * kBlockBytes;
    for (int k = 0; k < 8; ++k) {
      const uint8_t* blk = in + k * kBlockBytes;
      out[8 * kQs + 2 * k] = blk[0];
      out[8 * kQs + 2 * k + 1] = blk[1];
      for (int i = 0; i < kQs; ++i) out[kQs * k + i] = blk[2 + i];
    }
  }
}

// The variants, by index: v1 = 0.
constexpr const char* kVariantNames[] = {"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"};
constexpr int kVariants = 8;
constexpr int kTileVariant = 4;   // v5
constexpr int kFirstGrouped = 6;  // v7 and v8 read kGroups8 weights

template <class T>
void launch_variant(int variant, const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x,
                    int64_t n_tokens, float* y, Stream stream) {
  // Wide loads only where the type has them and the row is 16-byte aligned (every K row
  // is a multiple of 16 bytes, so then every row is).
  constexpr bool kWide = T::kBlockBytes % 16 == 0;
  const bool a16 = kWide && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  switch (variant) {
    case 1:  // v2: 2 words a lane, 2 chunks in flight
      return a16 ? launch_mmvq_split<T, 2, 2, kWide>(w, n_in, n_out, x, n_tokens, y, stream)
                 : launch_mmvq_split<T, 2, 2, false>(w, n_in, n_out, x, n_tokens, y, stream);
    case 2:  // v3: 4 words a lane (16-byte loads for Q4_K, Q5_K), 2 chunks in flight
      return a16 ? launch_mmvq_split<T, 4, 2, kWide>(w, n_in, n_out, x, n_tokens, y, stream)
                 : launch_mmvq_split<T, 4, 2, false>(w, n_in, n_out, x, n_tokens, y, stream);
    case 3:  // v4: 2 words a lane, 4 chunks in flight
      return a16 ? launch_mmvq_split<T, 2, 4, kWide>(w, n_in, n_out, x, n_tokens, y, stream)
                 : launch_mmvq_split<T, 2, 4, false>(w, n_in, n_out, x, n_tokens, y, stream);
    case 6:  // v7, v8: on weights of other layouts, as v5
    case 7:
    case 4:  // v5: tiles through shared memory, where rows allow; else as v2
      if (tile_rows<T>(w, n_in)) {
        const MmvqJob job{w, n_out, y};
        return launch_mmvq_tile<T>(std::span(&job, 1), n_in, x, n_tokens, stream);
      }
      return launch_mmvq_split<T, 2, 2, false>(w, n_in, n_out, x, n_tokens, y, stream);
    case 5:  // v6: as v2 with the block's 4 warps on one row
      return a16 ? launch_mmvq_split<T, 2, 2, kWide, kRowsPerBlock>(w, n_in, n_out, x, n_tokens, y,
                                                                    stream)
                 : launch_mmvq_split<T, 2, 2, false, kRowsPerBlock>(w, n_in, n_out, x, n_tokens, y,
                                                                    stream);
    default:
      return launch_mmvq<T>(w, n_in, n_out, x, n_tokens, y, stream);
  }
}

// QRUN_CUDA_MMVQ, read once: the variant mmvq() runs (default v8).
int default_variant() {
  static const int variant = [] {
    const char* env = std::getenv("QRUN_CUDA_MMVQ");
    // v5 by measurement for the k-quants: on an H200 it streamed the 8B layer's seven
    // Q4_0, Q4_K and Q6_K matmuls at 1310, 1331 and 1478 GB/s for one token against v1's
    // 1222, 969 and 1190 (kernels/cuda/bench/mmvq_bench.cpp; docs/PERFORMANCE_CUDA.md).
    // v8 runs v5 on those, and its own kernel on Q4_0 and Q8_0.
    if (env == nullptr || *env == '\0') return 7;
    for (int v = 0; v < kVariants; ++v) {
      if (std::strcmp(env, kVariantNames[v]) == 0) return v;
    }
    QRUN_CHECK(false, "QRUN_CUDA_MMVQ=%s: not one of v1 .. v8", env);
    return 0;
  }();
  return variant;
}

// Whether `variant` runs v5's tile kernel on weights of the file's layout.
bool tiles_blocks(int variant) {
  return variant == kTileVariant || variant >= kFirstGrouped;
}

}  // namespace

bool mmvq_supports(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

int mmvq_variant_count() {
  return kVariants;
}

const char* mmvq_variant_name(int variant) {
  QRUN_CHECK(variant >= 0 && variant < kVariants, "mmvq: no variant %d", variant);
  return kVariantNames[variant];
}

namespace {

// f(T{}) for the vecdot traits T of `type` (one of mmvq_supports).
template <class F>
void with_vecdot(DType type, F&& f) {
  switch (type) {
    case DType::kQ4_0:
      return f(vecdot::Q4_0{});
    case DType::kQ5_0:
      return f(vecdot::Q5_0{});
    case DType::kQ4_1:
      return f(vecdot::Q4_1{});
    case DType::kQ5_1:
      return f(vecdot::Q5_1{});
    case DType::kQ8_0:
      return f(vecdot::Q8_0{});
    case DType::kIQ4_NL:
      return f(vecdot::IQ4_NL{});
    case DType::kIQ4_XS:
      return f(vecdot::IQ4_XS{});
    case DType::kQ2_K:
      return f(vecdot::Q2_K{});
    case DType::kQ3_K:
      return f(vecdot::Q3_K{});
    case DType::kQ4_K:
      return f(vecdot::Q4_K{});
    case DType::kQ5_K:
      return f(vecdot::Q5_K{});
    case DType::kQ6_K:
      return f(vecdot::Q6_K{});
    default:
      QRUN_CHECK(false, "mmvq: no kernel for %s weights", dtype_name(type));
  }
}

void check_mmvq(DType type, int64_t n_in, int64_t n_out, int64_t n_tokens) {
  QRUN_CHECK(n_out >= 0 && n_out <= 0x7fffffff && n_tokens >= 0 && n_tokens <= 65535,
             "mmvq: %lld rows, %lld tokens", static_cast<long long>(n_out),
             static_cast<long long>(n_tokens));
  QRUN_CHECK(mmvq_supports(type), "mmvq: no kernel for %s weights", dtype_name(type));
  const int block_elems = type_traits(type).block_elems;
  QRUN_CHECK(n_in % block_elems == 0, "mmvq: %lld inputs, not a multiple of %d",
             static_cast<long long>(n_in), block_elems);
}

}  // namespace

WeightLayout mmvq_variant_layout(int variant, DType type, int64_t n_in) {
  QRUN_CHECK(variant >= 0 && variant < kVariants, "mmvq: no variant %d", variant);
  const bool grouped_type = type == DType::kQ4_0 || type == DType::kQ8_0;
  return variant >= kFirstGrouped && grouped_type && n_in > 0 && n_in % 256 == 0
             ? WeightLayout::kGroups8
             : WeightLayout::kBlocks;
}

WeightLayout mmvq_layout(DType type, int64_t n_in) {
  return mmvq_variant_layout(default_variant(), type, n_in);
}

void repack_groups8(DType type, const void* src, int64_t n_in, int64_t n_rows, void* dst,
                    Stream stream) {
  QRUN_CHECK((type == DType::kQ4_0 || type == DType::kQ8_0) && n_in % 256 == 0,
             "repack_groups8: no grouped layout of %s rows of %lld", dtype_name(type),
             static_cast<long long>(n_in));
  QRUN_CHECK(reinterpret_cast<uintptr_t>(dst) % 16 == 0,
             "repack_groups8: destination %p not 16-byte aligned", dst);
  const int64_t n_runs = n_rows * (n_in / 256);
  if (n_runs == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n_runs + kThreads - 1) / kThreads, 65535);
  const dim3 grid(static_cast<unsigned>(blocks));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  if (type == DType::kQ4_0) {
    launch(repack_g8_kernel<16>, grid, dim3(kThreads), stream, in, n_runs, out);
  } else {
    launch(repack_g8_kernel<32>, grid, dim3(kThreads), stream, in, n_runs, out);
  }
}

void mmvq_variant(int variant, DType type, const void* w, int64_t n_in, int64_t n_out,
                  const BlockQ8_1* x, int64_t n_tokens, float* y, Stream stream) {
  QRUN_CHECK(variant >= 0 && variant < kVariants, "mmvq: no variant %d", variant);
  check_mmvq(type, n_in, n_out, n_tokens);
  if (n_out == 0 || n_tokens == 0) return;
  if (mmvq_variant_layout(variant, type, n_in) == WeightLayout::kGroups8) {
    const MmvqJob job{w, n_out, y};
    return launch_grouped(variant, type, std::span(&job, 1), n_in, x, n_tokens, stream);
  }
  with_vecdot(type, [&]<class T>(T) {
    launch_variant<T>(variant, w, n_in, n_out, x, n_tokens, y, stream);
  });
}

void mmvq(DType type, const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x,
          int64_t n_tokens, float* y, Stream stream) {
  mmvq_variant(default_variant(), type, w, n_in, n_out, x, n_tokens, y, stream);
}

void mmvq_group(DType type, int64_t n_in, std::span<const MmvqJob> jobs, const BlockQ8_1* x,
                int64_t n_tokens, Stream stream) {
  int64_t rows = 0;
  for (const MmvqJob& job : jobs) {
    check_mmvq(type, n_in, job.n_out, n_tokens);
    rows += job.n_out;
  }
  if (rows == 0 || n_tokens == 0) return;
  const int variant = default_variant();
  if (mmvq_layout(type, n_in) == WeightLayout::kGroups8 && jobs.size() <= kMaxGroup &&
      std::all_of(jobs.begin(), jobs.end(), [](const MmvqJob& job) { return job.n_out > 0; })) {
    return launch_grouped(variant, type, jobs, n_in, x, n_tokens, stream);
  }
  with_vecdot(type, [&]<class T>(T) {
    const bool tiles = tiles_blocks(variant) && jobs.size() <= kMaxGroup &&
                       std::all_of(jobs.begin(), jobs.end(), [&](const MmvqJob& job) {
                         return job.n_out > 0 && tile_rows<T>(job.w, n_in);
                       });
    if (tiles) return launch_mmvq_tile<T>(jobs, n_in, x, n_tokens, stream);
    // Rows the tiles cannot read run v5's fallback, v2 (the rows of Gemma 3 270M's Q5_0 and
    // Q8_0 matrices, 640 wide, are no multiple of 16 bytes), the group in one launch too.
    const bool split = tiles_blocks(variant) && jobs.size() <= kMaxGroup &&
                       std::all_of(jobs.begin(), jobs.end(), [&](const MmvqJob& job) {
                         return job.n_out > 0 && !tile_rows<T>(job.w, n_in);
                       });
    if (split) return launch_mmvq_split<T, 2, 2, false>(jobs, n_in, x, n_tokens, stream);
    for (const MmvqJob& job : jobs) {
      if (job.n_out > 0) mmvq(type, job.w, n_in, job.n_out, x, n_tokens, job.y, stream);
    }
  });
}

QRUN_CUDA_NAMESPACE_END
