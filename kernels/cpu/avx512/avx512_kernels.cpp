// The avx512 entries of the CPU kernel table: each overrides its AVX2 twin (the table
// starts as a copy of AVX2's) and is tested against the generic one (tests/kernels_*_test.cpp).
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/avx512_ops.h"

namespace qrun::kernels {

void fill_avx512_kernels(CpuKernels& k) {
  avx512::fill_dot_kernels(k);  // vec_dot and gemv (avx512/dot_*.cpp)
  avx512::fill_gemm_legacy(k);  // prefill tiles (avx512/gemm_*.cpp)
  avx512::fill_gemm_kquants(k);
  // Batched decode rows (Backend::set_decode_rows) take one gemv pass per row below
  // 12 rows: the tiles pack 16 tokens per vector and unpack every weight, which costs more
  // for a few rows (qrun bench -p 2..16 on Q4_0, Q4_K_M, Q8_0 and Gemma 3, 2026-11-26:
  // docs/PERFORMANCE_SERVE.md).
  set_min_decode_tokens(k, 12);
  // Types with a multi-row repacked gemv (gemv_repacked_rows) meet each weight block once
  // for all the rows, which beats the tiles further: Q4_0 up to 48 rows, Q4_K and Q6_K up
  // to 16 (qrun bench -n 16 -np 4..48 on TinyLlama-1.1B Q4_0 and Q4_K_M, the rows against
  // the tiles, 2026-11-27: docs/PERFORMANCE_SERVE.md); Q5_K as Q4_K (12 sequences of a
  // Q5_K_M file 1.25x as fast through the rows as through the tiles, 2026-12-07).
  k.for_type(DType::kQ4_0).gemm.min_decode_tokens = 48;
  k.for_type(DType::kQ4_K).gemm.min_decode_tokens = 16;
  k.for_type(DType::kQ5_K).gemm.min_decode_tokens = 16;
  k.for_type(DType::kQ6_K).gemm.min_decode_tokens = 16;
  avx512::fill_op_kernels(k);  // attention (avx512/ops_*.cpp)
}

}  // namespace qrun::kernels
