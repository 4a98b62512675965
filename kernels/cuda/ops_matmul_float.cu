// The decode matmul's helpers that read no quantized weights: the quantization of
// activations into BlockQ8_1 for MMVQ (quantize_q8_1), and the matmuls of F16 and F32
// weights, which small models keep for some matrices (mmv_float).
#include "kernels/cuda/ops.h"
#include "kernels/cuda/q8_1.cuh"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kQuantThreads = 256;  // 8 warps, one activation block each
constexpr int kRowsPerBlock = 4;    // one warp per output row

// One warp per block of 32 values: lane j quantizes x[j] (see BlockQ8_1).
__global__ void __launch_bounds__(kQuantThreads)
    quantize_q8_1_kernel(const float* x, int64_t n_blocks, BlockQ8_1* out) {
  wait_for_prior_kernels();
  const int64_t b =
      static_cast<int64_t>(blockIdx.x) * (kQuantThreads / kWarp) + threadIdx.x / kWarp;
  if (b >= n_blocks) return;  // whole warps leave together
  quantize_q8_1_warp(x[b * kWarp + threadIdx.x % kWarp], out + b);
}

// F16 and F32 weights (small models keep some matrices unquantized): one warp per output
// row, lanes over every 32nd element, float sums. F16 weights see x rounded to F16, as
// the CPU backend converts x to F16 (their vec_dot_type) before its dot.
template <bool kF16>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    mmv_float_kernel(const void* w, int64_t n_in, int64_t n_out, const float* x, float* y) {
  wait_for_prior_kernels();
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

QRUN_CUDA_NAMESPACE_END
