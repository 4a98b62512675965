// Registers the AVX2 gemm kernels in the CPU kernel table.
#include "kernels/cpu/avx2/avx2_kernels.h"

namespace qrun::kernels::avx2 {

void fill_gemm_kernels(CpuKernels& k) {
  (void)k;
}

}  // namespace qrun::kernels::avx2
