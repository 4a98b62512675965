// Registers the AVX-512 VNNI gemm kernels (gemm_legacy.cpp, gemm_kquants.cpp) in the
// avx512 kernel table. A batch of at least min_tokens tokens goes through them;
// smaller ones through vec_dot, which reads each weight row once per token anyway.
#include "kernels/cpu/avx512/avx512_gemm.h"

namespace qrun::kernels::avx512 {
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

}  // namespace qrun::kernels::avx512
