// The host runtime (runtime.h) for the emulated build: device memory is host memory and
// every call completes before it returns. New allocations are filled with NaN bytes so
// that a kernel reading what nobody wrote shows up in the tests.
#include <cstdlib>
#include <cstring>

#include "ggml-like/result.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

const char* runtime_name() {
  return "emulated";
}

void* device_alloc(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  QRUN_CHECK(p != nullptr, "emulated device_alloc of %zu bytes failed", bytes);
  std::memset(p, 0xff, rounded == 0 ? 256 : rounded);  // 0xffffffff is a NaN as a float
  return p;
}

void device_free(void* ptr) {
  std::free(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void fill_zero(void* dst, size_t bytes, Stream) {
  if (bytes != 0) std::memset(dst, 0, bytes);
}

void synchronize(Stream) {}

QRUN_CUDA_NAMESPACE_END
