// Registration hooks of the AVX2 kernel groups (see avx2_kernels.cpp). Only files in
// this folder, compiled with -mavx2 -mfma -mf16c, include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx2 {

void fill_dot_kernels(CpuKernels& k);
void fill_gemm_kernels(CpuKernels& k);
void fill_op_kernels(CpuKernels& k);

}  // namespace qrun::kernels::avx2
