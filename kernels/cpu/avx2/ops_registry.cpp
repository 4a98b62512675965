// Registers the AVX2 op kernels in the CPU kernel table.
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/ops_kernels.h"

namespace qrun::kernels::avx2 {

void fill_op_kernels(CpuKernels& k) {
  k.attend_f32 = attend_f32;
  k.attend_f16 = attend_f16;
  k.attend_mixed = attend_mixed;
  k.to_float[static_cast<size_t>(DType::kF16)] = f16_to_float;
  k.to_float[static_cast<size_t>(DType::kBF16)] = bf16_to_float;
  k.to_float[static_cast<size_t>(DType::kQ8_0)] = q8_0_to_float;
  k.to_float[static_cast<size_t>(DType::kQ4_0)] = q4_0_to_float;
  k.rms_norm_row = rms_norm_row;
  k.swiglu = swiglu;
  k.add = add;
  k.to_f16 = to_f16;
}

}  // namespace qrun::kernels::avx2
