// Device queries for `qrun --version` and the GPU test skips.
#include <cuda_runtime.h>

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

}  // namespace qrun::kernels::cuda
