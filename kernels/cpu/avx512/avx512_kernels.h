// Registration hooks of the AVX-512 kernel groups (see avx512_kernels.cpp). Only files in
// this folder, compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni,
// include this header; each group overrides entries of the table copied from AVX2's.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx512 {

void fill_dot_kernels(CpuKernels& k);  // vec_dot (avx512/dot_*.cpp)

// The VNNI gemm tiles of Q4_0, Q5_0, Q8_0, IQ4_NL (gemm_legacy.cpp) and Q4_K, Q5_K, Q6_K
// (gemm_kquants.cpp), overriding AVX2's for batches of GemmKernels::min_tokens or more.
void fill_gemm_legacy(CpuKernels& k);
void fill_gemm_kquants(CpuKernels& k);

}  // namespace qrun::kernels::avx512
