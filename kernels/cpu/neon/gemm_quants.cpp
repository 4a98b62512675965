// The armv8-a instantiation of the NEON gemm kernels (gemm_impl.h) of Q4_0, Q5_0, Q8_0
// (Q8_0 activations) and Q4_K, Q5_K, Q6_K (Q8_K activations). Lanes::dot broadcasts the
// token's 4 levels, SMULL/SMULL2 give the 16 int16 products of 4 rows, SADALP adds their
// pairs into two int32 accumulators (rows 0-1, rows 2-3; exact, |pair| <= 2 * 128 * 128),
// and one ADDP per block folds those into the 4 row sums.
#include <arm_neon.h>

#include "kernels/cpu/neon/gemm_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct WideningLanes {
  static constexpr bool kPairedSteps = false;
  struct Acc {
    int32x4_t lo;  // [row 0 pairs 0-1, 2-3, row 1 pairs 0-1, 2-3]
    int32x4_t hi;  // the same for rows 2, 3
  };
  static Acc zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
  template <int kToken>
  static void dot(Acc& acc, int8x16_t w, int8x16_t a) {
    const int8x16_t b = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(a), kToken));
    acc.lo = vpadalq_s16(acc.lo, vmull_s8(vget_low_s8(w), vget_low_s8(b)));
    acc.hi = vpadalq_s16(acc.hi, vmull_high_s8(w, b));
  }
  static int32x4_t sums(Acc acc) { return vpaddq_s32(acc.lo, acc.hi); }
};

using Gemm = NeonGemm<WideningLanes>;

}  // namespace

GemmKernels gemm_q4_0_q8_0() {
  return Gemm::Driver<Gemm::Q4_0>::kernels();
}
GemmKernels gemm_q5_0_q8_0() {
  return Gemm::Driver<Gemm::Q5_0>::kernels();
}
GemmKernels gemm_q8_0_q8_0() {
  return Gemm::Driver<Gemm::Q8_0>::kernels();
}
GemmKernels gemm_q4_k_q8_k() {
  return Gemm::Driver<Gemm::Q4_K>::kernels();
}
GemmKernels gemm_q5_k_q8_k() {
  return Gemm::Driver<Gemm::Q5_K>::kernels();
}
GemmKernels gemm_q6_k_q8_k() {
  return Gemm::Driver<Gemm::Q6_K>::kernels();
}

}  // namespace qrun::kernels::neon
