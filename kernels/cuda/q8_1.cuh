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

// The same with 4 values a lane: the 8 lanes 8k .. 8k + 7 of a warp hold the 32 values of a
// block, lane 8k + i values 4i .. 4i + 3, and write that block to *out when `valid` (every
// lane of the warp must call it, valid or not). The max and the integer sum are exact in
// any order, so the bits are those of quantize_q8_1_warp.
__device__ __forceinline__ void quantize_q8_1_quad(const float (&v)[4], bool valid,
                                                   BlockQ8_1* out) {
  const int sub = static_cast<int>(threadIdx.x % 8);
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int m = 4; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int qi[4];
  int sum = 0;
  for (int k = 0; k < 4; ++k) {
    qi[k] = static_cast<int>(fminf(fmaxf(rintf(v[k] * id), -128.0f), 127.0f));
    sum += qi[k];
  }
  for (int m = 4; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (!valid) return;
  for (int k = 0; k < 4; ++k) out->qs[4 * sub + k] = static_cast<int8_t>(qi[k]);
  if (sub == 0) {
    out->d = f16_to_f32(f32_to_f16(amax / 127.0f));
    out->sum = sum;
  }
}

QRUN_CUDA_NAMESPACE_END
