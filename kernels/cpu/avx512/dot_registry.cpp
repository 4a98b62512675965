// Registers the AVX-512 dot kernels in the CPU kernel table. The activation quantizers
// and the other types' dots stay those of AVX2, from which the table starts.
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/dot_kernels.h"

namespace qrun::kernels::avx512 {

void fill_dot_kernels(CpuKernels& k) {
  k.for_type(DType::kQ4_0).vec_dot = vec_dot_q4_0_q8_0;
  k.for_type(DType::kQ4_0).gemv = gemv_q4_0_q8_0;
  k.for_type(DType::kQ8_0).vec_dot = vec_dot_q8_0_q8_0;
  k.for_type(DType::kQ4_K).vec_dot = vec_dot_q4_k_q8_k;
  k.for_type(DType::kQ6_K).vec_dot = vec_dot_q6_k_q8_k;
}

}  // namespace qrun::kernels::avx512
