// Registers the AVX2 gemm kernels (gemm_legacy.cpp, gemm_kquants.cpp) in the CPU kernel
// table. Batches of at least min_tokens tokens go through them; smaller ones through
// vec_dot, which reads each weight row once per token anyway.
#include "kernels/cpu/avx2/avx2_kernels.h"

namespace qrun::kernels::avx2 {

GemmKernels gemm_q4_0_q8_0();
GemmKernels gemm_q5_0_q8_0();
GemmKernels gemm_q8_0_q8_0();

GemmKernels gemm_q4_k_q8_k();
GemmKernels gemm_q5_k_q8_k();
GemmKernels gemm_q6_k_q8_k();

namespace {

void set_gemm(CpuKernels& k, DType type, GemmKernels gemm, int64_t min_tokens) {
  gemm.min_tokens = min_tokens;
  k.for_type(type).gemm = gemm;
}

}  // namespace

void fill_gemm_kernels(CpuKernels& k) {
  set_gemm(k, DType::kQ4_0, gemm_q4_0_q8_0(), 2);
  set_gemm(k, DType::kQ5_0, gemm_q5_0_q8_0(), 2);
  set_gemm(k, DType::kQ8_0, gemm_q8_0_q8_0(), 2);
  set_gemm(k, DType::kQ4_K, gemm_q4_k_q8_k(), 2);
  set_gemm(k, DType::kQ5_K, gemm_q5_k_q8_k(), 2);
  set_gemm(k, DType::kQ6_K, gemm_q6_k_q8_k(), 2);
}

}  // namespace qrun::kernels::avx2
