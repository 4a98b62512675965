// Element-wise ops on float activations: the SwiGLU and GELU gates, the residual add,
// scaling and soft-capping. Threads take contiguous chunks; results do not depend on the
// thread count.
#include <cmath>

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

void CpuBackend::geglu(const float* gate, const float* up, int64_t n, float* out) {
  const BinaryFn fn = kernels_->geglu;
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

// One float multiply per element, as ggml_scale.
void CpuBackend::scale(const float* x, int64_t n, float s, float* out) {
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = x[i] * s;
      },
      kMinPerThread);
}

// Scale by 1 / cap, tanh, scale by cap: llama.cpp's three ops, each rounded to float.
void CpuBackend::softcap(const float* x, int64_t n, float cap, float* out) {
  const float inv = 1.0f / cap;
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = std::tanh(x[i] * inv) * cap;
      },
      kMinPerThread);
}

}  // namespace qrun::kernels
