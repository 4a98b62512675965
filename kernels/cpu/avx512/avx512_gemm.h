// The AVX-512 VNNI gemm tile kernels for prefill (avx512/gemm_*.cpp) and their
// registration hook, called from fill_avx512_kernels. Only files in this folder, compiled
// with -mavx512f/bw/vl/dq/vnni, include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx512 {

// Overrides the gemm entries (inherited from the AVX2 table) of the types below.
void fill_gemm_kernels(CpuKernels& k);

// The gemm kernels (kernel_table.h) of each weight type against its activation type.
GemmKernels gemm_q4_0_q8_0();
GemmKernels gemm_q5_0_q8_0();
GemmKernels gemm_q8_0_q8_0();
GemmKernels gemm_q4_k_q8_k();
GemmKernels gemm_q5_k_q8_k();
GemmKernels gemm_q6_k_q8_k();

}  // namespace qrun::kernels::avx512
