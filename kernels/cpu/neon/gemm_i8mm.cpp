// The I8MM (Armv8.6 int8 matrix multiply) instantiation of the NEON gemm kernels
// (gemm_impl.h): each vmmlaq_s32 (SMMLA) multiplies 2 weight rows by 2 tokens over 8
// elements, adding the 4 exact int32 dots, so a step pair of a 4 x 8 tile is 8 SMMLAs where
// SDOT needs 16. Compiled with -march=armv8.2-a+dotprod+i8mm and registered only when the
// CPU reports i8mm (and asimddp); the integer block sums equal gemm_quants.cpp's, so the
// outputs do too. Nothing else belongs in this file: code compiled here may use
// instructions older CPUs lack.
#include <arm_neon.h>

#include "kernels/cpu/neon/gemm_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct MmlaLanes {
  static constexpr bool kPairedSteps = true;
  static int32x4_t mmla(int32x4_t acc, int8x16_t w, int8x16_t a) { return vmmlaq_s32(acc, w, a); }
};

using Gemm = NeonGemm<MmlaLanes>;

}  // namespace

GemmKernels gemm_q4_0_q8_0_i8mm() {
  return Gemm::Driver<Gemm::Q4_0>::kernels();
}
GemmKernels gemm_q5_0_q8_0_i8mm() {
  return Gemm::Driver<Gemm::Q5_0>::kernels();
}
GemmKernels gemm_q8_0_q8_0_i8mm() {
  return Gemm::Driver<Gemm::Q8_0>::kernels();
}
GemmKernels gemm_q4_k_q8_k_i8mm() {
  return Gemm::Driver<Gemm::Q4_K>::kernels();
}
GemmKernels gemm_q5_k_q8_k_i8mm() {
  return Gemm::Driver<Gemm::Q5_K>::kernels();
}
GemmKernels gemm_q6_k_q8_k_i8mm() {
  return Gemm::Driver<Gemm::Q6_K>::kernels();
}

}  // namespace qrun::kernels::neon
