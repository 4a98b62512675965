// Decode matmuls as llama.cpp's MMVQ: activations quantized to 8-bit blocks of 32
// (quantize_q8_1), then one warp per output row, each lane summing the integer dot
// products (vecdot_q8_1.cuh) of the chunks c = lane, lane + 32, ... in float, and a
// butterfly sum over the warp. The result differs from a double-precision sum of the same
// integers and scales by the float rounding of about n_in / 32 / 32 + 5 additions per
// output; tests/cuda_emu_matmul_test.cpp states the bound it checks.
// Not tuned: lanes read whole blocks each (no coalescing across lanes); a GPU at hand is
// where to measure and reshape that.
#include <cmath>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"
#include "kernels/cuda/vecdot_q8_1.cuh"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kQuantThreads = 256;  // 8 warps, one activation block each
constexpr int kRowsPerBlock = 4;    // one warp per output row

// One warp per block of 32 values: lane j quantizes x[j] (see BlockQ8_1).
__global__ void __launch_bounds__(kQuantThreads)
    quantize_q8_1_kernel(const float* x, int64_t n_blocks, BlockQ8_1* out) {
  const int64_t b =
      static_cast<int64_t>(blockIdx.x) * (kQuantThreads / kWarp) + threadIdx.x / kWarp;
  if (b >= n_blocks) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float v = x[b * kWarp + lane];
  const float amax = warp_max(fabsf(v));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float q = fminf(fmaxf(rintf(v * id), -128.0f), 127.0f);  // rintf: half to even
  const int qi = static_cast<int>(q);
  const int sum = warp_sum(qi);
  out[b].qs[lane] = static_cast<int8_t>(qi);
  if (lane == 0) {
    out[b].d = f16_to_f32(f32_to_f16(amax / 127.0f));
    out[b].sum = sum;
  }
}

template <class T>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmvq_kernel(const uint8_t* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x, float* y) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;  // whole warps leave together
  const int64_t t = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t n_chunks = n_in / 32;
  const uint8_t* row = w + o * (n_in / T::kBlockElems) * T::kBlockBytes;
  const BlockQ8_1* xt = x + t * n_chunks;
  float sum = 0.0f;
  for (int64_t c = lane; c < n_chunks; c += kWarp) sum += T::dot(row, c, xt[c]);
  sum = warp_sum(sum);
  if (lane == 0) y[t * n_out + o] = sum;
}

template <class T>
void launch_mmvq(const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x, int64_t n_tokens,
                 float* y, Stream stream) {
  QRUN_CHECK(n_in % T::kBlockElems == 0, "mmvq: %lld inputs, not a multiple of %d",
             static_cast<long long>(n_in), T::kBlockElems);
  const dim3 grid(static_cast<unsigned>((n_out + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(n_tokens));
  launch(mmvq_kernel<T>, grid, dim3(kRowsPerBlock * kWarp), stream, static_cast<const uint8_t*>(w),
         n_in, n_out, x, y);
}

// F16 and F32 weights (small models keep some matrices unquantized): one warp per output
// row, lanes over every 32nd element, float sums. F16 weights see x rounded to F16, as
// the CPU backend converts x to F16 (their vec_dot_type) before its dot.
template <bool kF16>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmv_float_kernel(const void* w, int64_t n_in, int64_t n_out, const float* x, float* y) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;  // whole warps leave together
  const int64_t t = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float* xt = x + t * n_in;
  float sum = 0.0f;
  for (int64_t j = lane; j < n_in; j += kWarp) {
    if constexpr (kF16) {
      const uint16_t* row = static_cast<const uint16_t*>(w) + o * n_in;
      sum += f16_to_f32(row[j]) * f16_to_f32(f32_to_f16(xt[j]));
    } else {
      sum += static_cast<const float*>(w)[o * n_in + j] * xt[j];
    }
  }
  sum = warp_sum(sum);
  if (lane == 0) y[t * n_out + o] = sum;
}

}  // namespace

void mmv_float(DType type, const void* w, int64_t n_in, int64_t n_out, const float* x,
               int64_t n_tokens, float* y, Stream stream) {
  QRUN_CHECK(type == DType::kF16 || type == DType::kF32, "mmv_float: %s weights", dtype_name(type));
  QRUN_CHECK(n_out >= 0 && n_tokens >= 0 && n_tokens <= 65535, "mmv_float: %lld rows, %lld tokens",
             static_cast<long long>(n_out), static_cast<long long>(n_tokens));
  if (n_out == 0 || n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>((n_out + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(n_tokens));
  if (type == DType::kF16) {
    launch(mmv_float_kernel<true>, grid, dim3(kRowsPerBlock * kWarp), stream, w, n_in, n_out, x, y);
  } else {
    launch(mmv_float_kernel<false>, grid, dim3(kRowsPerBlock * kWarp), stream, w, n_in, n_out, x,
           y);
  }
}

void quantize_q8_1(const float* x, int64_t n_rows, int64_t n, BlockQ8_1* out, Stream stream) {
  QRUN_CHECK(n % 32 == 0, "quantize_q8_1: %lld elements per row, not a multiple of 32",
             static_cast<long long>(n));
  const int64_t n_blocks = n_rows * n / 32;
  if (n_blocks == 0) return;
  const int64_t per_block = kQuantThreads / kWarp;
  launch(quantize_q8_1_kernel, dim3(static_cast<unsigned>((n_blocks + per_block - 1) / per_block)),
         dim3(kQuantThreads), stream, x, n_blocks, out);
}

bool mmvq_supports(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void mmvq(DType type, const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x,
          int64_t n_tokens, float* y, Stream stream) {
  QRUN_CHECK(n_out >= 0 && n_tokens >= 0 && n_tokens <= 65535 &&
                 (n_out + kRowsPerBlock - 1) / kRowsPerBlock <= 0x7fffffff,
             "mmvq: %lld rows, %lld tokens", static_cast<long long>(n_out),
             static_cast<long long>(n_tokens));
  if (n_out == 0 || n_tokens == 0) return;
  switch (type) {
    case DType::kQ4_0:
      return launch_mmvq<vecdot::Q4_0>(w, n_in, n_out, x, n_tokens, y, stream);
    case DType::kQ5_0:
      return launch_mmvq<vecdot::Q5_0>(w, n_in, n_out, x, n_tokens, y, stream);
    case DType::kQ8_0:
      return launch_mmvq<vecdot::Q8_0>(w, n_in, n_out, x, n_tokens, y, stream);
    case DType::kQ4_K:
      return launch_mmvq<vecdot::Q4_K>(w, n_in, n_out, x, n_tokens, y, stream);
    case DType::kQ5_K:
      return launch_mmvq<vecdot::Q5_K>(w, n_in, n_out, x, n_tokens, y, stream);
    case DType::kQ6_K:
      return launch_mmvq<vecdot::Q6_K>(w, n_in, n_out, x, n_tokens, y, stream);
    default:
      QRUN_CHECK(false, "mmvq: no kernel for %s weights", dtype_name(type));
  }
}

QRUN_CUDA_NAMESPACE_END
