// Registration hook of the AVX-512 op kernels (avx512/ops_*.cpp), called from
// fill_avx512_kernels. Only files in this folder include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx512 {

// Attention over F32 and F16 caches; the element-wise ops keep their AVX2 versions.
void fill_op_kernels(CpuKernels& k);

}  // namespace qrun::kernels::avx512
