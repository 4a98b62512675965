// The host runtime (runtime.h) on the CUDA runtime API.
#include <cuda_runtime.h>

#include "ggml-like/result.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

void check(cudaError_t err, const char* what) {
  QRUN_CHECK(err == cudaSuccess, "%s: %s", what, cudaGetErrorString(err));
}
cudaStream_t handle(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

}  // namespace

const char* runtime_name() {
  return "cuda";
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}

void device_free(void* ptr) {
  check(cudaFree(ptr), "cudaFree");
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, handle(stream)),
        "cudaMemcpyAsync (to device)");
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, handle(stream)),
        "cudaMemcpyAsync (to host)");
}

void fill_zero(void* dst, size_t bytes, Stream stream) {
  check(cudaMemsetAsync(dst, 0, bytes, handle(stream)), "cudaMemsetAsync");
}

void synchronize(Stream stream) {
  check(cudaStreamSynchronize(handle(stream)), "cudaStreamSynchronize");
}

QRUN_CUDA_NAMESPACE_END
