// The SDOT (Armv8.2 dotprod) instantiation of the NEON gemm kernels (gemm_impl.h): each
// vdotq_laneq_s32 adds, for 4 weight rows, the 4 products with one token's 4 levels,
// exactly. Compiled with -march=armv8.2-a+dotprod and registered only when the CPU
// reports asimddp; the integer block sums equal gemm_quants.cpp's, so the outputs do too.
// Nothing else belongs in this file: code compiled here may use instructions older CPUs
// lack.
// GCC 12's scheduling before register allocation hoists a block's weight and activation
// loads past what the 8 integer and 8 float accumulators leave free, then shuffles registers:
// without it the Q4_0 tile's block loop is 120 instructions, not 126 (gemv_repacked.cpp has
// the same pragma for the same reason; gemm_i8mm.cpp has not, where it costs 2). It only
// reorders code. Set before every include, so that the inlined intrinsics share the options.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif
#include <arm_neon.h>

#include "kernels/cpu/neon/gemm_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct SdotLanes {
  static constexpr bool kPairedSteps = false;
  using Acc = int32x4_t;
  static Acc zero() { return vdupq_n_s32(0); }
  template <int kToken>
  static void dot(Acc& acc, int8x16_t w, int8x16_t a) {
    acc = vdotq_laneq_s32(acc, w, a, kToken);
  }
  static int32x4_t sums(Acc acc) { return acc; }
};

using Gemm = NeonGemm<SdotLanes>;

}  // namespace

GemmKernels gemm_q4_0_q8_0_dotprod() {
  return Gemm::Driver<Gemm::Q4_0>::kernels();
}
GemmKernels gemm_q5_0_q8_0_dotprod() {
  return Gemm::Driver<Gemm::Q5_0>::kernels();
}
GemmKernels gemm_q8_0_q8_0_dotprod() {
  return Gemm::Driver<Gemm::Q8_0>::kernels();
}
GemmKernels gemm_q4_k_q8_k_dotprod() {
  return Gemm::Driver<Gemm::Q4_K>::kernels();
}
GemmKernels gemm_q5_k_q8_k_dotprod() {
  return Gemm::Driver<Gemm::Q5_K>::kernels();
}
GemmKernels gemm_q6_k_q8_k_dotprod() {
  return Gemm::Driver<Gemm::Q6_K>::kernels();
}

}  // namespace qrun::kernels::neon
