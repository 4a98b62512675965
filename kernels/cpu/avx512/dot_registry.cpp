// Registers the AVX-512 dot kernels in the CPU kernel table. Everything else (activation
// quantizers, the other types' dots, the Q8_0 gemv) stays AVX2's, from which the table
// starts: on the Xeon host those measured as fast as any AVX-512 form.
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/dot_kernels.h"

namespace qrun::kernels::avx512 {

void fill_dot_kernels(CpuKernels& k) {
  k.for_type(DType::kQ4_0).vec_dot = vec_dot_q4_0_q8_0;
  k.for_type(DType::kQ4_0).gemv = gemv_q4_0_q8_0;
  k.for_type(DType::kQ4_0).gemv_repacked = gemv_q4_0_x16;
  k.for_type(DType::kQ4_0).gemv_repacked_rows = gemv_q4_0_x16_rows;
  k.for_type(DType::kIQ4_NL).gemv_repacked = gemv_iq4_nl_x16;
  k.for_type(DType::kIQ4_NL).gemv_repacked_rows = gemv_iq4_nl_x16_rows;
  k.for_type(DType::kQ5_0).gemv_repacked = gemv_q5_0_x16;
  k.for_type(DType::kQ8_0).vec_dot = vec_dot_q8_0_q8_0;
  k.for_type(DType::kQ8_0).gemv_repacked = gemv_q8_0_x16;
  k.for_type(DType::kQ3_K).vec_dot = vec_dot_q3_k_q8_k;
  k.for_type(DType::kQ4_K).vec_dot = vec_dot_q4_k_q8_k;
  k.for_type(DType::kQ4_K).gemv_repacked = gemv_q4_k_x16;
  k.for_type(DType::kQ4_K).gemv_repacked_rows = gemv_q4_k_x16_rows;
  k.for_type(DType::kQ5_K).gemv_repacked = gemv_q5_k_x16;
  k.for_type(DType::kQ5_K).gemv_repacked_rows = gemv_q5_k_x16_rows;
  k.for_type(DType::kQ6_K).vec_dot = vec_dot_q6_k_q8_k;
  k.for_type(DType::kQ6_K).gemv_repacked = gemv_q6_k_x16;
  k.for_type(DType::kQ6_K).gemv_repacked_rows = gemv_q6_k_x16_rows;
}

}  // namespace qrun::kernels::avx512
