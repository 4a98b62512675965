// The armv8-a instantiation of the NEON repacked decode gemv (gemv_repacked_impl.h) of Q4_0,
// IQ4_NL, Q5_0, Q8_0 (Q8_0 activations), Q4_K and Q6_K (Q8_K activations): Lanes::dot
// broadcasts 4 activation levels, SMULL/SMULL2 give the 16 int16 products of a quad's column,
// SADALP adds their pairs into two int32 accumulators (rows 0-1, rows 2-3; exact) and ADDP folds
// those into the 4 row sums. Each output is the baseline vec_dot's bit for bit, and so the dotprod
// one's.
// GCC 12's scheduling before register allocation hoists the quant loads of a whole block and
// then spills the 16 float accumulators of the Q4_0 / Q5_0 / Q8_0 groups (and the k-quant
// temporaries); without it the same loops hold everything in registers (SDOT Q4_0: 118 -> 112
// instructions per block of 16 rows, armv8-a Q8_0: 477 -> 245). It only reorders code. Set
// before every include, so that the inlined intrinsics share the options.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif
#include <arm_neon.h>

#include "kernels/cpu/neon/gemv_repacked_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct WideningLanes {
  struct Acc {
    int32x4_t lo;  // [row 0 pairs 0-1, 2-3, row 1 pairs 0-1, 2-3]
    int32x4_t hi;  // the same for rows 2, 3
  };
  static Acc zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
  // sums() of the result is init: lane i's pairs are [init_i, 0].
  static Acc start(int32x4_t init) {
    return {vzip1q_s32(init, vdupq_n_s32(0)), vzip2q_s32(init, vdupq_n_s32(0))};
  }
  template <int kColumn>
  static void dot(Acc& acc, int8x16_t w, int8x16_t a) {
    const int8x16_t b = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(a), kColumn));
    acc.lo = vpadalq_s16(acc.lo, vmull_s8(vget_low_s8(w), vget_low_s8(b)));
    acc.hi = vpadalq_s16(acc.hi, vmull_high_s8(w, b));
  }
  static int32x4_t sums(Acc acc) { return vpaddq_s32(acc.lo, acc.hi); }
};

using Gemv = RepackedGemv<WideningLanes>;

}  // namespace

void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  Gemv::gemv_q4_0(n, groups, n_groups, act, y);
}

void gemv_iq4_nl_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                     float* y) {
  Gemv::gemv_iq4_nl(n, groups, n_groups, act, y);
}

void gemv_q5_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  Gemv::gemv_q5_0(n, groups, n_groups, act, y);
}

void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  Gemv::gemv_q8_0(n, groups, n_groups, act, y);
}

void gemv_q4_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  Gemv::gemv_q4_k(n, groups, n_groups, act, y);
}

void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  Gemv::gemv_q6_k(n, groups, n_groups, act, y);
}

}  // namespace qrun::kernels::neon
