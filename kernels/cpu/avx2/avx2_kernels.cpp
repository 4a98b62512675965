// The AVX2 (+FMA, F16C) entries of the CPU kernel table. Each group lives in its own
// files and registers itself here; every kernel is tested against its generic twin
// (tests/kernels_*_test.cpp).
#include "kernels/cpu/avx2/avx2_kernels.h"

namespace qrun::kernels {

void fill_avx2_kernels(CpuKernels& k) {
  avx2::fill_dot_kernels(k);  // vec_dot and activation quantizers (avx2/dot_*.cpp)
  avx2::fill_gemm_legacy(k);  // batched tiles for prefill (avx2/gemm_*.cpp)
  avx2::fill_gemm_kquants(k);
  avx2::fill_op_kernels(k);  // attention, norms, element-wise (avx2/ops_*.cpp)
}

}  // namespace qrun::kernels
