// Quantizing activations into BlockQ8_1 (ops.h) from inside a kernel: the one definition
// that quantize_q8_1 and the fused producers of matmul inputs (RMS norm, SwiGLU,
// GELU-gated) share, so every path makes the same bits.
#pragma once

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

// The 32 lanes of a warp, lane j holding value j of a block, write that block to *out.
// Every lane of the warp must call it (it shuffles).
__device__ __forceinline__ void quantize_q8_1_warp(float v, BlockQ8_1* out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float amax = warp_max(fabsf(v));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float q = fminf(fmaxf(rintf(v * id), -128.0f), 127.0f);  // rintf: half to even
  const int qi = static_cast<int>(q);
  const int sum = warp_sum(qi);
  out->qs[lane] = static_cast<int8_t>(qi);
  if (lane == 0) {
    out->d = f16_to_f32(f32_to_f16(amax / 127.0f));
    out->sum = sum;
  }
}

QRUN_CUDA_NAMESPACE_END
