// The row moves of a mixture-of-experts layer (Backend::gather_rows and weighted_row_sum):
// gridDim.x blocks stride over the output rows, gridDim.y blocks of threads over a row's
// elements. Numerics: gather_rows copies; weighted_row_sum rounds each product w * s to
// float and adds the products in j order, the first not added to 0 (__fmul_rn and __fadd_rn,
// which nvcc never contracts into an FMA; the emulated build is compiled without
// contraction), so it equals the Backend default bit for bit on the GPU as on the host.
#include <algorithm>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535;

dim3 grid_for(int64_t n_rows, int64_t n) {
  const int64_t cols = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(std::min(n_rows, kMaxGrid)),
              static_cast<unsigned>(std::min(cols, kMaxGrid)));
}

__device__ __forceinline__ int64_t first_col() {
  return static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t col_stride() {
  return static_cast<int64_t>(gridDim.y) * blockDim.x;
}

__global__ void gather_rows_kernel(const float* x, int64_t n, const int32_t* rows, int64_t n_rows,
                                   float* out) {
  wait_for_prior_kernels();
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    const float* src = x + static_cast<int64_t>(rows[r]) * n;
    float* dst = out + r * n;
    for (int64_t i = first_col(); i < n; i += col_stride()) dst[i] = src[i];
  }
}

__global__ void weighted_row_sum_kernel(const float* src, int64_t n, const int32_t* rows,
                                        const float* weights, int64_t k, int64_t n_out,
                                        float* out) {
  wait_for_prior_kernels();
  for (int64_t t = blockIdx.x; t < n_out; t += gridDim.x) {
    const int32_t* r = rows + t * k;
    const float* w = weights + t * k;
    for (int64_t i = first_col(); i < n; i += col_stride()) {
      float sum = __fmul_rn(w[0], src[static_cast<int64_t>(r[0]) * n + i]);
      for (int64_t j = 1; j < k; ++j) {
        sum = __fadd_rn(sum, __fmul_rn(w[j], src[static_cast<int64_t>(r[j]) * n + i]));
      }
      out[t * n + i] = sum;
    }
  }
}

}  // namespace

void gather_rows(const float* x, int64_t n, const int32_t* rows, int64_t n_rows, float* out,
                 Stream stream) {
  if (n <= 0 || n_rows <= 0) return;
  launch(gather_rows_kernel, grid_for(n_rows, n), dim3(kThreads), stream, x, n, rows, n_rows, out);
}

void weighted_row_sum(const float* src, int64_t n, const int32_t* rows, const float* weights,
                      int64_t k, int64_t n_out, float* out, Stream stream) {
  if (n <= 0 || n_out <= 0) return;
  QRUN_CHECK(k > 0, "weighted_row_sum: k = %lld", static_cast<long long>(k));
  launch(weighted_row_sum_kernel, grid_for(n_out, n), dim3(kThreads), stream, src, n, rows, weights,
         k, n_out, out);
}

QRUN_CUDA_NAMESPACE_END
