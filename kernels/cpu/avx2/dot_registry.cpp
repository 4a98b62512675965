// Registers the AVX2 dot kernels, activation converters and repacked gemvs (dot_legacy.cpp,
// dot_kquants.cpp, dot_float.cpp, gemv_repacked.cpp) in the CPU kernel table. Activation
// types stay those of the generic table; only the functions change.
#include "kernels/cpu/avx2/avx2_kernels.h"
#include "kernels/cpu/avx2/dot_kernels.h"

namespace qrun::kernels::avx2 {
namespace {

void set_dot(CpuKernels& k, DType type, VecDotFn dot, FromFloatFn quantize_act) {
  MatmulKernels& m = k.for_type(type);
  m.vec_dot = dot;
  m.quantize_act = quantize_act;
}

}  // namespace

void fill_dot_kernels(CpuKernels& k) {
  set_dot(k, DType::kQ4_0, vec_dot_q4_0_q8_0, quantize_q8_0_act);
  set_dot(k, DType::kQ5_0, vec_dot_q5_0_q8_0, quantize_q8_0_act);
  set_dot(k, DType::kQ8_0, vec_dot_q8_0_q8_0, quantize_q8_0_act);
  set_dot(k, DType::kQ4_1, vec_dot_q4_1_q8_1, quantize_q8_1_act);
  set_dot(k, DType::kQ5_1, vec_dot_q5_1_q8_1, quantize_q8_1_act);
  set_dot(k, DType::kQ2_K, vec_dot_q2_k_q8_k, quantize_q8_k);
  set_dot(k, DType::kQ3_K, vec_dot_q3_k_q8_k, quantize_q8_k);
  set_dot(k, DType::kQ4_K, vec_dot_q4_k_q8_k, quantize_q8_k);
  set_dot(k, DType::kQ5_K, vec_dot_q5_k_q8_k, quantize_q8_k);
  set_dot(k, DType::kQ6_K, vec_dot_q6_k_q8_k, quantize_q8_k);
  set_dot(k, DType::kIQ4_NL, vec_dot_iq4_nl_q8_0, quantize_q8_0_act);
  set_dot(k, DType::kIQ4_XS, vec_dot_iq4_xs_q8_k, quantize_q8_k);
  set_dot(k, DType::kF32, vec_dot_f32_f32, nullptr);
  set_dot(k, DType::kF16, vec_dot_f16_f16, from_float_f16);
  set_dot(k, DType::kBF16, vec_dot_bf16_bf16, from_float_bf16);
  k.for_type(DType::kQ4_0).gemv = gemv_q4_0_q8_0;
  k.for_type(DType::kQ8_0).gemv = gemv_q8_0_q8_0;
  k.for_type(DType::kQ4_0).gemv_repacked = gemv_q4_0_x16;
  k.for_type(DType::kIQ4_NL).gemv_repacked = gemv_iq4_nl_x16;
  k.for_type(DType::kQ5_0).gemv_repacked = gemv_q5_0_x16;
  k.for_type(DType::kQ8_0).gemv_repacked = gemv_q8_0_x16;
  k.for_type(DType::kQ4_K).gemv_repacked = gemv_q4_k_x16;
  k.for_type(DType::kQ5_K).gemv_repacked = gemv_q5_k_x16;
  k.for_type(DType::kQ6_K).gemv_repacked = gemv_q6_k_x16;
  k.for_type(DType::kQ4_1).gemv = gemv_q4_1_q8_1;
  k.for_type(DType::kQ5_1).gemv = gemv_q5_1_q8_1;
  k.for_type(DType::kIQ4_NL).gemv = gemv_iq4_nl_q8_0;
  k.for_type(DType::kQ2_K).gemv = gemv_q2_k_q8_k;
  // The other types decode row by row through vec_dot, with no software prefetch: on the
  // 2-core EPYC (Zen 4) guest, gemv_prefetched's (gemv_prefetch.h) L1 prefetches two rows
  // ahead made one-thread decode 0.80-0.93x as fast (Q5_K_M, IQ4_XS, Q5_0 and Q4_K
  // without repacking, the Q3_K rows of a Q2_K file) and two-thread decode up to 0.85x.
}

}  // namespace qrun::kernels::avx2
