// The NEON entries of the CPU kernel table, for each of the three levels (kernel_table.h):
// the armv8-a integer kernels for kNeon, their SDOT versions for kNeonDotprod, and those with
// the SMMLA gemm tiles for kNeonI8mm. All give the same bits, so the level only changes
// speed. Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K have no gemm tiles (batches go through
// the gemv). The gemv of the k-quants and IQ4_XS is the prefetching row loop of gemv_prefetch.h
// over the chosen vec_dot (instantiated here, in a baseline object: it only calls the dot through
// its address); Q4_0, IQ4_NL, Q5_0, Q8_0, Q4_K, Q6_K and (with SDOT) Q5_K also decode from repacked
// copies (repack.h).
#include "kernels/cpu/neon/neon_kernels.h"
#include "kernels/cpu/gemv_prefetch.h"

namespace qrun::kernels {
namespace neon {
namespace {

void set_dot(CpuKernels& k, DType type, VecDotFn fn) {
  k.for_type(type).vec_dot = fn;
}

// The gemm kernels of `level`: baseline, SDOT or SMMLA tiles.
GemmKernels pick(Isa level, GemmKernels (*baseline)(), GemmKernels (*dotprod)(),
                 GemmKernels (*i8mm)()) {
  if (level == Isa::kNeonI8mm) return i8mm();
  return level == Isa::kNeonDotprod ? dotprod() : baseline();
}

}  // namespace

void fill_kernels(CpuKernels& k, Isa level) {
  QRUN_CHECK(level == Isa::kNeon || level == Isa::kNeonDotprod || level == Isa::kNeonI8mm,
             "neon::fill_kernels: %s is not a NEON level", isa_name(level));
  const bool dp = level != Isa::kNeon;
  set_dot(k, DType::kQ4_0, dp ? vec_dot_q4_0_q8_0_dotprod : vec_dot_q4_0_q8_0);
  set_dot(k, DType::kQ5_0, dp ? vec_dot_q5_0_q8_0_dotprod : vec_dot_q5_0_q8_0);
  set_dot(k, DType::kQ8_0, dp ? vec_dot_q8_0_q8_0_dotprod : vec_dot_q8_0_q8_0);
  set_dot(k, DType::kQ4_1, dp ? vec_dot_q4_1_q8_1_dotprod : vec_dot_q4_1_q8_1);
  set_dot(k, DType::kQ5_1, dp ? vec_dot_q5_1_q8_1_dotprod : vec_dot_q5_1_q8_1);
  set_dot(k, DType::kIQ4_NL, dp ? vec_dot_iq4_nl_q8_0_dotprod : vec_dot_iq4_nl_q8_0);
  set_dot(k, DType::kQ2_K, dp ? vec_dot_q2_k_q8_k_dotprod : vec_dot_q2_k_q8_k);
  set_dot(k, DType::kQ3_K, dp ? vec_dot_q3_k_q8_k_dotprod : vec_dot_q3_k_q8_k);
  set_dot(k, DType::kQ4_K, dp ? vec_dot_q4_k_q8_k_dotprod : vec_dot_q4_k_q8_k);
  set_dot(k, DType::kQ5_K, dp ? vec_dot_q5_k_q8_k_dotprod : vec_dot_q5_k_q8_k);
  set_dot(k, DType::kQ6_K, dp ? vec_dot_q6_k_q8_k_dotprod : vec_dot_q6_k_q8_k);
  set_dot(k, DType::kIQ4_XS, dp ? vec_dot_iq4_xs_q8_k_dotprod : vec_dot_iq4_xs_q8_k);
  set_dot(k, DType::kF32, vec_dot_f32_f32);
  set_dot(k, DType::kF16, vec_dot_f16_f16);
  set_dot(k, DType::kBF16, vec_dot_bf16_bf16);
  k.for_type(DType::kQ4_0).gemv = dp ? gemv_q4_0_q8_0_dotprod : gemv_q4_0_q8_0;
  k.for_type(DType::kQ5_0).gemv = dp ? gemv_q5_0_q8_0_dotprod : gemv_q5_0_q8_0;
  k.for_type(DType::kQ8_0).gemv = dp ? gemv_q8_0_q8_0_dotprod : gemv_q8_0_q8_0;
  k.for_type(DType::kQ4_1).gemv = dp ? gemv_q4_1_q8_1_dotprod : gemv_q4_1_q8_1;
  k.for_type(DType::kQ5_1).gemv = dp ? gemv_q5_1_q8_1_dotprod : gemv_q5_1_q8_1;
  k.for_type(DType::kIQ4_NL).gemv = dp ? gemv_iq4_nl_q8_0_dotprod : gemv_iq4_nl_q8_0;
  k.for_type(DType::kQ2_K).gemv =
      dp ? gemv_prefetched<vec_dot_q2_k_q8_k_dotprod> : gemv_prefetched<vec_dot_q2_k_q8_k>;
  k.for_type(DType::kQ3_K).gemv =
      dp ? gemv_prefetched<vec_dot_q3_k_q8_k_dotprod> : gemv_prefetched<vec_dot_q3_k_q8_k>;
  k.for_type(DType::kQ4_K).gemv =
      dp ? gemv_prefetched<vec_dot_q4_k_q8_k_dotprod> : gemv_prefetched<vec_dot_q4_k_q8_k>;
  k.for_type(DType::kQ5_K).gemv =
      dp ? gemv_prefetched<vec_dot_q5_k_q8_k_dotprod> : gemv_prefetched<vec_dot_q5_k_q8_k>;
  k.for_type(DType::kQ6_K).gemv =
      dp ? gemv_prefetched<vec_dot_q6_k_q8_k_dotprod> : gemv_prefetched<vec_dot_q6_k_q8_k>;
  k.for_type(DType::kIQ4_XS).gemv =
      dp ? gemv_prefetched<vec_dot_iq4_xs_q8_k_dotprod> : gemv_prefetched<vec_dot_iq4_xs_q8_k>;
  // Decoding from the repacked copies the backend makes of these types.
  k.for_type(DType::kQ4_0).gemv_repacked = dp ? gemv_q4_0_x16_dotprod : gemv_q4_0_x16;
  k.for_type(DType::kIQ4_NL).gemv_repacked = dp ? gemv_iq4_nl_x16_dotprod : gemv_iq4_nl_x16;
  k.for_type(DType::kQ5_0).gemv_repacked = dp ? gemv_q5_0_x16_dotprod : gemv_q5_0_x16;
  k.for_type(DType::kQ8_0).gemv_repacked = dp ? gemv_q8_0_x16_dotprod : gemv_q8_0_x16;
  k.for_type(DType::kQ4_K).gemv_repacked = dp ? gemv_q4_k_x16_dotprod : gemv_q4_k_x16;
  // Q5_K only with SDOT: llvm-mca (scripts/arm64-mca.sh, 2026-12-07) gives the armv8-a x16
  // loop the row-by-row vec_dot's weight bytes per cycle (1.76 against 1.75 on Neoverse N1,
  // 2.99 against 3.36 on Apple M1), not worth a second copy of the weights; SDOT's is 3.00
  // against 1.53 (N1) and 5.48 against 2.90 (M1).
  if (dp) k.for_type(DType::kQ5_K).gemv_repacked = gemv_q5_k_x16_dotprod;
  k.for_type(DType::kQ6_K).gemv_repacked = dp ? gemv_q6_k_x16_dotprod : gemv_q6_k_x16;
  // Batches of 2 or more tokens through the gemm tiles.
  k.for_type(DType::kQ4_0).gemm =
      pick(level, gemm_q4_0_q8_0, gemm_q4_0_q8_0_dotprod, gemm_q4_0_q8_0_i8mm);
  k.for_type(DType::kQ5_0).gemm =
      pick(level, gemm_q5_0_q8_0, gemm_q5_0_q8_0_dotprod, gemm_q5_0_q8_0_i8mm);
  k.for_type(DType::kQ8_0).gemm =
      pick(level, gemm_q8_0_q8_0, gemm_q8_0_q8_0_dotprod, gemm_q8_0_q8_0_i8mm);
  k.for_type(DType::kQ4_K).gemm =
      pick(level, gemm_q4_k_q8_k, gemm_q4_k_q8_k_dotprod, gemm_q4_k_q8_k_i8mm);
  k.for_type(DType::kQ5_K).gemm =
      pick(level, gemm_q5_k_q8_k, gemm_q5_k_q8_k_dotprod, gemm_q5_k_q8_k_i8mm);
  k.for_type(DType::kQ6_K).gemm =
      pick(level, gemm_q6_k_q8_k, gemm_q6_k_q8_k_dotprod, gemm_q6_k_q8_k_i8mm);
  // Activation conversions, for every weight type.
  for (MatmulKernels& m : k.matmul) {
    if (m.vec_dot == nullptr) continue;
    switch (m.act_type) {
      case DType::kQ8_0:
        m.quantize_act = quantize_q8_0_act;
        break;
      case DType::kQ8_1:
        m.quantize_act = quantize_q8_1_act;
        break;
      case DType::kQ8_K:
        m.quantize_act = quantize_q8_k;
        break;
      case DType::kF16:
        m.quantize_act = from_float_f16;
        break;
      case DType::kBF16:
        m.quantize_act = from_float_bf16;
        break;
      default:
        break;
    }
  }
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

}  // namespace neon

void fill_neon_kernels(CpuKernels& k, Isa level) {
  neon::fill_kernels(k, level);
}

}  // namespace qrun::kernels
