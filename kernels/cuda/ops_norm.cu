// RMS norm: one block of 256 threads per row. Each thread sums the squares (each square
// rounded to float, as the reference) of a strided slice in double; the block sum is in
// double too, so the mean differs from the reference's sequential double sum only in the
// last bits of a double, invisible once rounded to float. The scale is 1 / sqrtf(mean +
// eps) as in the reference (exact under the emulator; correctly rounded sqrtf and division
// on the GPU too).
#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double partial[kWarp];
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x) / kWarp ? partial[lane] : 0.0;
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float sq = xr[i] * xr[i];
    sum += static_cast<double>(sq);
  }
  sum = block_sum_f64(sum);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] * scale) * w[i];
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y,
              Stream stream) {
  QRUN_CHECK(n_rows >= 0 && n_rows <= 0x7fffffff && n > 0, "rms_norm: %lld rows of %lld",
             static_cast<long long>(n_rows), static_cast<long long>(n));
  if (n_rows == 0) return;
  launch(rms_norm_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(kThreads), stream, x, w, n, eps,
         y);
}

QRUN_CUDA_NAMESPACE_END
