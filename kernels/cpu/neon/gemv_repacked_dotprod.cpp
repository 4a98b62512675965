// The SDOT (Armv8.2 dotprod) instantiation of the NEON repacked decode gemv
// (gemv_repacked_impl.h): each vdotq_laneq_s32 adds a quad's 4-element column, 4 products
// per row lane, exactly. Compiled with -march=armv8.2-a+dotprod and registered only when the
// CPU reports asimddp; the outputs are gemv_repacked.cpp's, bit for bit. Nothing else belongs
// in this file: code compiled here may use instructions older CPUs lack.
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

void gemv_q6_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y) {
  Gemv::gemv_q6_k(n, groups, n_groups, act, y);
}

}  // namespace qrun::kernels::neon
