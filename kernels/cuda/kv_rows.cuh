// The device side of KvRowMap (ops.h): where a cache position's row is stored.
#pragma once

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

QRUN_CUDA_NAMESPACE_END
