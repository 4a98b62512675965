// The device side of KvRowMap (ops.h): where a cache position's row is stored; and the
// attention logit of a score, shared by the decode and prefill kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

__device__ __forceinline__ int64_t kv_storage_row(const KvRowMap& m, int64_t p) {
  const int64_t r = p % m.n_rows;
  if (m.table == nullptr) return r;
  const int64_t in_block = r & ((int64_t{1} << m.block_shift) - 1);
  return (static_cast<int64_t>(m.table[r >> m.block_shift]) << m.block_shift) | in_block;
}

// The logit of a score q.k: q.k * mul, then softcap * tanh of that when softcap > 0, mul
// being AttentionParams::score_scale(): the CPU kernels' KqScale, step for step.
__device__ __forceinline__ float kq_logit(float dot, float mul, float softcap) {
  const float s = dot * mul;
  return softcap > 0.0f ? softcap * tanhf(s) : s;
}

QRUN_CUDA_NAMESPACE_END
