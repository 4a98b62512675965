// The AVX2 (+FMA, F16C) entries of the CPU kernel table. Each group lives in its own
// files and registers itself here; every kernel is tested against its generic twin
// (tests/kernels_*_test.cpp).
#include "kernels/cpu/avx2/avx2_kernels.h"

namespace qrun::kernels {

void fill_avx2_kernels(CpuKernels& k) {
  avx2::fill_dot_kernels(k);  // vec_dot and activation quantizers (avx2/dot_*.cpp)
  avx2::fill_gemm_legacy(k);  // batched tiles for prefill (avx2/gemm_*.cpp)
  avx2::fill_gemm_kquants(k);
  // Batched decode rows (Backend::set_decode_rows) take one gemv pass per row below
  // 16 rows: the tiles pack 8 tokens per vector and unpack every weight, which costs more
  // for a few rows (qrun bench -p 2..16 on Q4_0, Q4_K_M, Q8_0 and Gemma 3, 2026-11-26:
  // docs/PERFORMANCE_SERVE.md).
  set_min_decode_tokens(k, 16);
  avx2::fill_op_kernels(k);  // attention, norms, element-wise (avx2/ops_*.cpp)
}

}  // namespace qrun::kernels
