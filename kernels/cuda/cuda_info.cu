// Device queries for `qrun --version` and the GPU test skips.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_info.h"

namespace qrun::kernels::cuda {

std::string compiled_architectures() {
  return QRUN_CUDA_ARCHS;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  // The name apart: it may fill its 256 bytes, which GCC's -Wformat-truncation rightly flags.
  char buf[64];
  std::snprintf(buf, sizeof buf, " (sm_%d%d, %.1f GiB)", prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return std::string(prop.name, strnlen(prop.name, sizeof prop.name)) + buf;
}

DeviceMemory device_memory() {
  DeviceMemory m;
  if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return m;
}

double device_copy_gbps() {
  constexpr size_t kBytes = size_t{1} << 30;
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0.0;
  if (cudaMalloc(&a, kBytes) == cudaSuccess && cudaMalloc(&b, kBytes) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
      cudaMemset(a, 1, kBytes) == cudaSuccess) {
    for (int i = 0; i < 11; ++i) {  // the first is the warm-up
      float ms = 0.0f;
      if (cudaEventRecord(start) != cudaSuccess ||
          cudaMemcpy(b, a, kBytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
          cudaEventRecord(stop) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
        best = 0.0;
        break;
      }
      if (i > 0 && ms > 0.0f) best = std::max(best, 2.0 * kBytes / (ms * 1e-3) / 1e9);
    }
  }
  cudaGetLastError();
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return best;
}

}  // namespace qrun::kernels::cuda
