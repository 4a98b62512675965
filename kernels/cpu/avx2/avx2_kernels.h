// Registration hooks of the AVX2 kernel groups (see avx2_kernels.cpp). Only files in
// this folder, compiled with -mavx2 -mfma -mf16c, include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx2 {

void fill_dot_kernels(CpuKernels& k);
// The gemm tiles (GemmKernels) of Q4_0, Q5_0, Q8_0 (gemm_legacy.cpp) and Q4_K, Q5_K, Q6_K
// (gemm_kquants.cpp), for batches of GemmKernels::min_tokens (2) or more; smaller ones go
// through vec_dot, which reads each weight row once per token anyway.
void fill_gemm_legacy(CpuKernels& k);
void fill_gemm_kquants(CpuKernels& k);
void fill_op_kernels(CpuKernels& k);

}  // namespace qrun::kernels::avx2
