// Registers the AVX2 op kernels in the CPU kernel table.
#include "kernels/cpu/avx2/avx2_kernels.h"

namespace qrun::kernels::avx2 {

void fill_op_kernels(CpuKernels& k) {
  (void)k;
}

}  // namespace qrun::kernels::avx2
