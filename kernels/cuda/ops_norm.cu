// RMS norm: one block of 1024 threads per row. Each thread sums the squares (each square
// rounded to float, as the reference) of a strided slice in double, four loads in flight
// at a time; the block sum is in double too, so the mean differs from the reference's
// sequential double sum only in the last bits of a double, invisible once rounded to
// float. The scale is 1 / sqrtf(mean + eps) as in the reference (exact under the emulator;
// correctly rounded sqrtf and division on the GPU too). A decode step normalizes one row,
// so the kernel is one block's latency: on an H200 the former 256 threads with one load in
// flight took 14.5 us for a row of 4096 (ncu), about a tenth of a layer.
#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread

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
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
    float v[kUnroll];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) v[u] = xr[i + u * kThreads];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) sum += static_cast<double>(v[u] * v[u]);
  }
  for (; i < n; i += kThreads) sum += static_cast<double>(xr[i] * xr[i]);
  sum = block_sum_f64(sum);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
    float v[kUnroll], g[kUnroll];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = xr[i + u * kThreads];
      g[u] = w[i + u * kThreads];
    }
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) yr[i + u * kThreads] = (v[u] * scale) * g[u];
  }
  for (; i < n; i += kThreads) yr[i] = (xr[i] * scale) * w[i];
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
