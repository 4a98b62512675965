// The SDOT (Armv8.2 dotprod) instantiation of dot_impl.h: each SDOT adds 4 int8 products
// per int32 lane, exactly. Compiled with -march=armv8.2-a+dotprod and registered only when
// the CPU reports asimddp; the results are bit-identical to dot_quants.cpp's. Nothing else
// belongs in this file: code compiled here may use instructions older CPUs lack.
#include <arm_neon.h>

#include "kernels/cpu/neon/dot_impl.h"
#include "kernels/cpu/neon/neon_kernels.h"

namespace qrun::kernels::neon {
namespace {

struct SdotDot {
  static int32x4_t dot(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

using Dots = QuantDots<SdotDot>;

}  // namespace

float vec_dot_q4_0_q8_0_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q4_0_q8_0(n, x, y);
}

float vec_dot_q5_0_q8_0_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q5_0_q8_0(n, x, y);
}

float vec_dot_q8_0_q8_0_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q8_0_q8_0(n, x, y);
}

float vec_dot_q4_1_q8_1_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q4_1_q8_1(n, x, y);
}

float vec_dot_q5_1_q8_1_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q5_1_q8_1(n, x, y);
}

float vec_dot_iq4_nl_q8_0_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::iq4_nl_q8_0(n, x, y);
}

float vec_dot_q2_k_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q2_k_q8_k(n, x, y);
}

float vec_dot_q3_k_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q3_k_q8_k(n, x, y);
}

float vec_dot_q4_k_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q4_k_q8_k(n, x, y);
}

float vec_dot_q5_k_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q5_k_q8_k(n, x, y);
}

float vec_dot_q6_k_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::q6_k_q8_k(n, x, y);
}

float vec_dot_iq4_xs_q8_k_dotprod(int64_t n, const void* x, const void* y) {
  return Dots::iq4_xs_q8_k(n, x, y);
}

void gemv_q4_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y) {
  Dots::gemv_q4_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q5_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y) {
  Dots::gemv_q5_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q8_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y) {
  Dots::gemv_q8_0(n, w, w_stride, n_rows, act, y);
}

void gemv_q4_1_q8_1_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y) {
  Dots::gemv_q4_1(n, w, w_stride, n_rows, act, y);
}

void gemv_q5_1_q8_1_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y) {
  Dots::gemv_q5_1(n, w, w_stride, n_rows, act, y);
}

void gemv_iq4_nl_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                              const uint8_t* act, float* y) {
  Dots::gemv_iq4_nl(n, w, w_stride, n_rows, act, y);
}

}  // namespace qrun::kernels::neon
