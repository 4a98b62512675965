// Element-wise ops on float activations: the SwiGLU gate and the residual add. Threads
// take contiguous chunks; results do not depend on the thread count.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {
namespace {

constexpr int64_t kMinPerThread = 16 * 1024;

}  // namespace

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = gate[i];
          out[i] = g / (1.0f + std::exp(-g)) * up[i];
        }
      },
      kMinPerThread);
}

void CpuBackend::add(const float* a, const float* b, int64_t n, float* out) {
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
      },
      kMinPerThread);
}

}  // namespace qrun::kernels
