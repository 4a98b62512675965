// Element-wise ops on float activations: the SwiGLU gate and the residual add. Threads
// take contiguous chunks; results do not depend on the thread count.
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {
namespace {

constexpr int64_t kMinPerThread = 16 * 1024;

}  // namespace

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const BinaryFn fn = kernels_->swiglu;
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) { fn(gate + begin, up + begin, end - begin, out + begin); },
      kMinPerThread);
}

void CpuBackend::add(const float* a, const float* b, int64_t n, float* out) {
  const BinaryFn fn = kernels_->add;
  pool_.parallel_for(
      n, [&](int64_t begin, int64_t end) { fn(a + begin, b + begin, end - begin, out + begin); },
      kMinPerThread);
}

}  // namespace qrun::kernels
