// The avx512 entries of the CPU kernel table: each overrides its generic twin and is
// tested against it (tests/kernels_*_test.cpp).
#include "kernels/cpu/avx512/avx512_gemm.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {

void fill_avx512_kernels(CpuKernels& k) {
  avx512::fill_gemm_kernels(k);  // batched VNNI tiles for prefill (avx512/gemm_*.cpp)
}

}  // namespace qrun::kernels
