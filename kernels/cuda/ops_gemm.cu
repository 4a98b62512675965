// Prefill matmuls: the activations are rounded to F16 once, then the weights are
// dequantized to F16 a tile of output rows at a time (one thread per element, each the F16
// nearest to the scalar reference's float: the same float operations in the same order)
// and multiplied by gemm_f16 (cuBLAS), which sums the exact products of F16 values in
// float. So the result differs from the exact product of the reference's dequantized
// weights with x by the F16 rounding of both operands (each within 2^-11 relative) and the
// float summation; tests/cuda_emu_gemm_test.cpp states and measures both.
// Not tuned: the dequantization reads its block header once per element (from cache, eight
// elements a thread), and the tiles are dequantized and multiplied in turn on one stream,
// not overlapped.
#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"
#include "kernels/cuda/vecdot_q8_1.cuh"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;  // of the tile within the scratch
constexpr int64_t kTileAlignRows = 64;
constexpr size_t kTileBytes = size_t{64} << 20;  // F16 tile bound of matmul_gemm_scratch_bytes

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
}

__device__ __forceinline__ float load_f16(const uint8_t* p) {
  return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
}

// Per type: the block geometry (ggml-like/quants.h) and the F16 of element j of a block,
// computed as the reference dequantizer computes its float.
struct DqF32 {
  static constexpr int kBlockElems = 1;
  static constexpr int kBlockBytes = 4;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int) {
    return f32_to_f16(*reinterpret_cast<const float*>(blk));
  }
};

struct DqF16 {  // a copy of the bits (a NaN stays the very NaN)
  static constexpr int kBlockElems = 1;
  static constexpr int kBlockBytes = 2;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int) {
    return *reinterpret_cast<const uint16_t*>(blk);
  }
};

// x = d * (q - 8); qs[j]: q[j] low nibble, q[j + 16] high nibble.
struct DqQ4_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const uint8_t* qs = blk + 2;
    const int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return f32_to_f16(static_cast<float>(q - 8) * load_f16(blk));
  }
};

// x = d * (q - 16); bit 4 of q[j] is bit j of qh (bytes 2-5), the rest as Q4_0 (bytes 6-21).
struct DqQ5_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 22;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const uint32_t qh = static_cast<uint32_t>(load_i32_a2(blk + 2));
    const uint8_t* qs = blk + 6;
    const int low = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    const int q = low | static_cast<int>((qh >> j) & 1) << 4;
    return f32_to_f16(static_cast<float>(q - 16) * load_f16(blk));
  }
};

// x = d * q + m: d bytes 0-1, m 2-3, qs 4-19 as Q4_0's. q * d is exact in float (4 + 11
// significant bits), so only the sum rounds and an FMA contraction could not change it.
struct DqQ4_1 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 20;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const uint8_t* qs = blk + 4;
    const int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return f32_to_f16(static_cast<float>(q) * load_f16(blk) + load_f16(blk + 2));
  }
};

// As Q4_1 with q in [0, 31]: qh bytes 4-7, qs 8-23, as Q5_0's (q * d: 5 + 11 bits, exact).
struct DqQ5_1 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 24;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const uint32_t qh = static_cast<uint32_t>(load_i32_a2(blk + 4));
    const uint8_t* qs = blk + 8;
    const int low = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    const int q = low | static_cast<int>((qh >> j) & 1) << 4;
    return f32_to_f16(static_cast<float>(q) * load_f16(blk) + load_f16(blk + 2));
  }
};

// x = d * q, q int8 (bytes 2-33).
struct DqQ8_0 {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 34;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int8_t q = static_cast<int8_t>(blk[2 + j]);
    return f32_to_f16(static_cast<float>(q) * load_f16(blk));
  }
};

// x = d * level[q] (levels: kIq4Values, quants.h), qs at bytes 2-17 as Q4_0's. The
// reference's float d * level is exact (11 + 7 significant bits), so its F16 is this one.
struct DqIQ4_NL {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = 18;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const uint8_t* qs = blk + 2;
    const int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return f32_to_f16(load_f16(blk) * static_cast<float>(vecdot::iq4_level(q)));
  }
};

// x = (d * (ls - 32)) * level[q] for sub-block s = j / 32 (ls: vecdot::iq4_xs_ls), its qs at
// bytes 8 + 16s ..+16 as an IQ4_NL block's: the reference's order (dequantize_iq4_xs). Both
// products are exact in float (d has 11 significant bits, ls - 32 in [-32, 31] at most 5, a
// level at most 7: 23 in all), so the reference's float is the exact product d * (ls - 32) *
// level, which this one is too in any order, and the two round to the same F16.
struct DqIQ4_XS {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 136;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int s = j / 32, i = j % 32;
    const uint8_t* qs = blk + 8 + 16 * s;
    const int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    const float dl = load_f16(blk) * static_cast<float>(vecdot::iq4_xs_ls(blk, s) - 32);
    return f32_to_f16(dl * static_cast<float>(vecdot::iq4_level(q)));
  }
};

// The same two types in WeightLayout::kGroups8 (ops.h): a "block" here is a run of 8
// blocks, their 8 quant arrays then their 8 scales.
struct DqQ4_0x8 {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 144;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int b = j / 32, i = j % 32;
    const uint8_t* qs = blk + 16 * b;
    const int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    return f32_to_f16(static_cast<float>(q - 8) * load_f16(blk + 128 + 2 * b));
  }
};

struct DqQ8_0x8 {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 272;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int8_t q = static_cast<int8_t>(blk[j]);
    return f32_to_f16(static_cast<float>(q) * load_f16(blk + 256 + 2 * (j / 32)));
  }
};

// Element j of a Q2_K or Q3_K super-block: bits 2 (j % 128 / 32), +1 of qs[32 (j / 128) +
// j % 32].
__device__ __forceinline__ int k_two_bit_q(const uint8_t* qs, int j) {
  return (qs[32 * (j / 128) + j % 32] >> (2 * (j % 128 / 32))) & 3;
}

// x = (d * (sc & 15)) * q - dmin * (sc >> 4), sc = scales[j / 16] (bytes 0-15), qs at 16,
// d at 80, dmin at 82: the reference's float operations. Both products are exact in float
// (11 + 4 + 2 significant bits), so only the subtraction rounds and an FMA contraction
// could not change it.
struct DqQ2_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 84;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int sc = blk[j / 16];
    const float dl = load_f16(blk + 80) * static_cast<float>(sc & 15);
    const float ml = load_f16(blk + 82) * static_cast<float>(sc >> 4);
    return f32_to_f16(dl * static_cast<float>(k_two_bit_q(blk + 16, j)) - ml);
  }
};

// x = (d * (sc - 32)) * (q - 4), sc the 6-bit scale j / 16 (vecdot::q3_k_ls, bytes 96-107),
// bit 2 of q in bit j / 32 of hmask[j % 32] (bytes 0-31), bits 0-1 as Q2_K's (qs at 32), d at
// 108. Exact in float in any order (11 + 6 + 3 significant bits), as the reference's.
struct DqQ3_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 110;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int q = k_two_bit_q(blk + 32, j) | ((blk[j % 32] >> (j / 32)) & 1) << 2;
    const float dl =
        load_f16(blk + 108) * static_cast<float>(vecdot::q3_k_ls(blk + 96, j / 16) - 32);
    return f32_to_f16(dl * static_cast<float>(q - 4));
  }
};

// x = (d * sc[s]) * q - dmin * m[s] in float, s = j / 32, as the reference computes it.
// The products are exact in float (11 + 6 + 5 significant bits), so only the subtraction
// rounds, and an FMA contraction by nvcc could not change the result.
__device__ __forceinline__ uint16_t k_scale_min_f16(const uint8_t* blk, int j, int q) {
  int sc = 0, m = 0;
  vecdot::k_scale_min(blk + 4, j / 32, &sc, &m);
  const float ds = load_f16(blk) * static_cast<float>(sc);
  const float ms = load_f16(blk + 2) * static_cast<float>(m);
  return f32_to_f16(ds * static_cast<float>(q) - ms);
}

// Group g = j / 64 of 64 elements uses qs[32g + l] (bytes 16-143): low nibble for the
// first 32 elements, high nibble for the next 32.
struct DqQ4_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 144;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int g = j / 64, half = (j / 32) % 2, l = j % 32;
    const int q = (blk[16 + 32 * g + l] >> (4 * half)) & 15;
    return k_scale_min_f16(blk, j, q);
  }
};

// As Q4_K (qs at bytes 48-175), plus bit 4 of q from bit 2g + half of qh[l] (bytes 16-47).
struct DqQ5_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 176;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int g = j / 64, half = (j / 32) % 2, l = j % 32;
    const int low = (blk[48 + 32 * g + l] >> (4 * half)) & 15;
    const int high = (blk[16 + l] >> (2 * g + half)) & 1;
    return k_scale_min_f16(blk, j, low | high << 4);
  }
};

// x = (d * scales[j / 16]) * (q - 32): ql bytes 0-127, qh 128-191, scales 192-207, d 208.
struct DqQ6_K {
  static constexpr int kBlockElems = 256;
  static constexpr int kBlockBytes = 210;
  __device__ __forceinline__ static uint16_t f16(const uint8_t* blk, int j) {
    const int h = j / 128, part = (j % 128) / 32, l = j % 32;
    const int low = (blk[64 * h + 32 * (part % 2) + l] >> (4 * (part / 2))) & 15;
    const int high = (blk[128 + 32 * h + l] >> (2 * part)) & 3;
    const float scale = static_cast<float>(static_cast<int8_t>(blk[192 + j / 16]));
    return f32_to_f16(load_f16(blk + 208) * scale * static_cast<float>((low | high << 4) - 32));
  }
};

// kPer consecutive elements per thread, grid-stride. One: consecutive threads write
// consecutive F16s. Eight (kBlockElems is 1 or a multiple of 8, so they share a block):
// written in one 16-byte store, with an eighth of the stores and block address
// computations (one per element moved about 0.5 TB/s on an H100, a sixth of its
// bandwidth). The same F16 per element either way.
template <class T, int kPer>
__global__ void __launch_bounds__(kThreads)
    dequantize_f16_kernel(const uint8_t* src, int64_t n, uint16_t* dst) {
  static_assert(kPer == 1 || (kPer == 8 && (T::kBlockElems == 1 || T::kBlockElems % 8 == 0)));
  wait_for_prior_kernels();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n / kPer;
       i += stride) {
    const int64_t e = kPer * i;
    const uint8_t* blk = src + e / T::kBlockElems * T::kBlockBytes;
    const int j = static_cast<int>(e % T::kBlockElems);
    if constexpr (kPer == 1) {
      dst[e] = T::f16(blk, j);
    } else {
      int w[4];
      QRUN_UNROLL
      for (int k = 0; k < 4; ++k) {
        const uint32_t lo =
            T::f16(T::kBlockElems == 1 ? blk + 2 * k * T::kBlockBytes : blk, j + 2 * k);
        const uint32_t hi =
            T::f16(T::kBlockElems == 1 ? blk + (2 * k + 1) * T::kBlockBytes : blk, j + 2 * k + 1);
        w[k] = static_cast<int>(lo | hi << 16);
      }
      store_16b(dst + e, w);
    }
  }
}

template <class T>
void launch_dequantize(const void* src, int64_t n, uint16_t* dst, Stream stream) {
  QRUN_CHECK(n >= 0 && n % T::kBlockElems == 0,
             "dequantize_f16: %lld elements, not a multiple of %d", static_cast<long long>(n),
             T::kBlockElems);
  if (n == 0) return;
  if (n % 8 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    launch(dequantize_f16_kernel<T, 8>, grid_for(n / 8), dim3(kThreads), stream,
           static_cast<const uint8_t*>(src), n, dst);
    return;
  }
  launch(dequantize_f16_kernel<T, 1>, grid_for(n), dim3(kThreads), stream,
         static_cast<const uint8_t*>(src), n, dst);
}

size_t align_up(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// The rows of a tile when `fit` rows fit: all n_out if they fit, else a multiple of 64
// (where 64 fit) so every tile's block of y starts 256-byte aligned as cuBLAS prefers.
int64_t tile_rows(int64_t fit, int64_t n_out) {
  if (fit >= n_out) return n_out;
  if (fit > kTileAlignRows) return fit - fit % kTileAlignRows;
  return fit < 1 ? 1 : fit;
}

}  // namespace

bool gemm_supports(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
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

void dequantize_f16(DType type, WeightLayout layout, const void* src, int64_t n, uint16_t* dst,
                    Stream stream) {
  if (layout == WeightLayout::kGroups8) {
    QRUN_CHECK(type == DType::kQ4_0 || type == DType::kQ8_0,
               "dequantize_f16: no grouped layout of %s", dtype_name(type));
    return type == DType::kQ4_0 ? launch_dequantize<DqQ4_0x8>(src, n, dst, stream)
                                : launch_dequantize<DqQ8_0x8>(src, n, dst, stream);
  }
  switch (type) {
    case DType::kF32:
      return launch_dequantize<DqF32>(src, n, dst, stream);
    case DType::kF16:
      return launch_dequantize<DqF16>(src, n, dst, stream);
    case DType::kQ4_0:
      return launch_dequantize<DqQ4_0>(src, n, dst, stream);
    case DType::kQ5_0:
      return launch_dequantize<DqQ5_0>(src, n, dst, stream);
    case DType::kQ4_1:
      return launch_dequantize<DqQ4_1>(src, n, dst, stream);
    case DType::kQ5_1:
      return launch_dequantize<DqQ5_1>(src, n, dst, stream);
    case DType::kQ8_0:
      return launch_dequantize<DqQ8_0>(src, n, dst, stream);
    case DType::kIQ4_NL:
      return launch_dequantize<DqIQ4_NL>(src, n, dst, stream);
    case DType::kIQ4_XS:
      return launch_dequantize<DqIQ4_XS>(src, n, dst, stream);
    case DType::kQ2_K:
      return launch_dequantize<DqQ2_K>(src, n, dst, stream);
    case DType::kQ3_K:
      return launch_dequantize<DqQ3_K>(src, n, dst, stream);
    case DType::kQ4_K:
      return launch_dequantize<DqQ4_K>(src, n, dst, stream);
    case DType::kQ5_K:
      return launch_dequantize<DqQ5_K>(src, n, dst, stream);
    case DType::kQ6_K:
      return launch_dequantize<DqQ6_K>(src, n, dst, stream);
    default:
      QRUN_CHECK(false, "dequantize_f16: no kernel for %s", dtype_name(type));
  }
}

void convert_f32_to_f16(const float* x, int64_t n, uint16_t* out, Stream stream) {
  launch_dequantize<DqF32>(x, n, out, stream);
}

size_t matmul_gemm_scratch_bytes(int64_t n_in, int64_t n_out, int64_t n_tokens) {
  const size_t row_bytes = static_cast<size_t>(n_in) * sizeof(uint16_t);
  if (row_bytes == 0 || n_out <= 0) return align_up(static_cast<size_t>(n_tokens) * row_bytes);
  const int64_t rows = tile_rows(static_cast<int64_t>(kTileBytes / row_bytes), n_out);
  return align_up(static_cast<size_t>(n_tokens) * row_bytes) +
         static_cast<size_t>(rows) * row_bytes;
}

void matmul_gemm(DType type, WeightLayout layout, const void* w, int64_t n_in, int64_t n_out,
                 const float* x, int64_t n_tokens, float* y, void* scratch, size_t scratch_bytes,
                 Stream stream) {
  QRUN_CHECK(gemm_supports(type), "matmul_gemm: no kernel for %s weights", dtype_name(type));
  QRUN_CHECK(n_in > 0 && n_out >= 0 && n_tokens >= 0 && n_in % type_traits(type).block_elems == 0,
             "matmul_gemm: %s weights of %lld x %lld, %lld tokens", dtype_name(type),
             static_cast<long long>(n_out), static_cast<long long>(n_in),
             static_cast<long long>(n_tokens));
  if (n_out == 0 || n_tokens == 0) return;
  const size_t row_bytes = static_cast<size_t>(n_in) * sizeof(uint16_t);
  const size_t x_bytes = align_up(static_cast<size_t>(n_tokens) * row_bytes);
  // F16 weights go to the GEMM as they are; the others need a tile of at least one row.
  const size_t need = x_bytes + (type == DType::kF16 ? 0 : row_bytes);
  QRUN_CHECK(scratch_bytes >= need, "matmul_gemm: %zu bytes of scratch, %zu needed", scratch_bytes,
             need);
  auto* x16 = static_cast<uint16_t*>(scratch);
  convert_f32_to_f16(x, n_tokens * n_in, x16, stream);
  if (type == DType::kF16) {
    gemm_f16(n_out, n_tokens, n_in, static_cast<const uint16_t*>(w), n_in, x16, n_in, y, n_out,
             stream);
    return;
  }

  // y[:, o0:o0 + rows] = tile . x16^T, tile after tile on the one stream (the next tile's
  // dequantization waits for the GEMM that reads the previous one).
  auto* tile = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(scratch) + x_bytes);
  const int64_t max_rows =
      tile_rows(static_cast<int64_t>((scratch_bytes - x_bytes) / row_bytes), n_out);
  const size_t w_row_bytes = row_size(type, n_in);
  for (int64_t o0 = 0; o0 < n_out; o0 += max_rows) {
    const int64_t rows = n_out - o0 < max_rows ? n_out - o0 : max_rows;
    dequantize_f16(type, layout,
                   static_cast<const uint8_t*>(w) + static_cast<size_t>(o0) * w_row_bytes,
                   rows * n_in, tile, stream);
    gemm_f16(rows, n_tokens, n_in, tile, n_in, x16, n_in, y + o0, n_out, stream);
  }
}

QRUN_CUDA_NAMESPACE_END
