// Registration hooks of the AVX2 kernel groups (see avx2_kernels.cpp). Only files in
// this folder, compiled with -mavx2 -mfma -mf16c, include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx2 {

void fill_dot_kernels(CpuKernels& k);
// The gemm tiles (GemmKernels) of the 32-element types (gemm_legacy.cpp) and of the
// k-quants Q2_K .. Q6_K and IQ4_XS (gemm_kquants.cpp), for batches of GemmKernels::min_tokens (2)
// or more; smaller ones go through vec_dot, which reads each weight row once per token anyway.
void fill_gemm_legacy(CpuKernels& k);
void fill_gemm_kquants(CpuKernels& k);
void fill_op_kernels(CpuKernels& k);

}  // namespace qrun::kernels::avx2
