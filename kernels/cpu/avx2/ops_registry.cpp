// Registers the AVX2 op kernels in the CPU kernel table.
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/ops_kernels.h"

namespace qrun::kernels::avx2 {

void fill_op_kernels(CpuKernels& k) {
  k.attend_f32 = attend_f32;
  k.attend_f16 = attend_f16;
  k.rms_norm_row = rms_norm_row;
  k.swiglu = swiglu;
  k.add = add;
  k.to_f16 = to_f16;
}

}  // namespace qrun::kernels::avx2
