// The SDOT (Armv8.2 dotprod) instantiation of the NEON repacked decode gemv
// (gemv_repacked_impl.h): each vdotq_laneq_s32 adds a quad's 4-element column, 4 products
// per row lane, exactly. Compiled with -march=armv8.2-a+dotprod and registered only when the
// CPU reports asimddp; the outputs are gemv_repacked.cpp's, bit for bit. Nothing else belongs
// in this file: code compiled here may use instructions older CPUs lack.
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

struct SdotLanes {
  using Acc = int32x4_t;
  static Acc zero() { return vdupq_n_s32(0); }
  static Acc start(int32x4_t init) { return init; }
  template <int kColumn>
  static void dot(Acc& acc, int8x16_t w, int8x16_t a) {
    acc = vdotq_laneq_s32(acc, w, a, kColumn);
  }
  static int32x4_t sums(Acc acc) { return acc; }
};

using Gemv = RepackedGemv<SdotLanes>;

}  // namespace

void gemv_q4_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q4_0(n, groups, n_groups, act, y);
}

void gemv_iq4_nl_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                             float* y) {
  Gemv::gemv_iq4_nl(n, groups, n_groups, act, y);
}

void gemv_q5_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q5_0(n, groups, n_groups, act, y);
}

void gemv_q8_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q8_0(n, groups, n_groups, act, y);
}

void gemv_q4_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q4_k(n, groups, n_groups, act, y);
}

void gemv_q5_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q5_k(n, groups, n_groups, act, y);
}

void gemv_q6_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q6_k(n, groups, n_groups, act, y);
}

}  // namespace qrun::kernels::neon
