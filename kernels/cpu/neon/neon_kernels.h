// The NEON kernels of the CPU kernel table. Baseline kernels (armv8-a Advanced SIMD, which
// every AArch64 CPU has) live in dot_quants.cpp, gemm_quants.cpp, gemv_repacked.cpp,
// dot_float.cpp and ops.cpp; the *_dotprod twins of the integer kernels (dot_dotprod.cpp,
// gemm_dotprod.cpp, gemv_repacked_dotprod.cpp, built with -march=armv8.2-a+dotprod) run only
// from the dotprod and i8mm tables, the *_i8mm gemm tiles (gemm_i8mm.cpp, built with
// -march=armv8.2-a+dotprod+i8mm) only from the i8mm table, and all give the same bits as
// their baseline twins.
// Every kernel has the signature of its generic twin and is tested against it
// (tests/kernels_neon_test.cpp, and with every ISA in kernels_dot_test.cpp and
// kernels_ops_test.cpp); declarations use plain types so tests can call each one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::neon {

// dot_quants.cpp: quantized weights (Q4_0, Q5_0, Q8_0, IQ4_NL against Q8_0 activations; Q4_1,
// Q5_1 against Q8_1; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K), the gemv of Q4_0, Q5_0,
// Q8_0, Q4_1, Q5_1, IQ4_NL (4 rows per pass, each output the bits of the vec_dot above), and the
// activation quantizers
// (bit-identical to quantize_q8_0_act, quantize_q8_1_act and quantize_q8_k).
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_iq4_xs_q8_k(int64_t n, const void* x, const void* y);
void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q5_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_iq4_nl_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, float* y);
void quantize_q8_0_act(const float* src, void* dst, int64_t n);
void quantize_q8_1_act(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// dot_dotprod.cpp: the same dot products with SDOT. Callable only where dotprod exists.
float vec_dot_q4_0_q8_0_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q5_0_q8_0_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q4_1_q8_1_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q5_1_q8_1_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_iq4_nl_q8_0_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q2_k_q8_k_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q3_k_q8_k_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q4_k_q8_k_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q5_k_q8_k_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_q6_k_q8_k_dotprod(int64_t n, const void* x, const void* y);
float vec_dot_iq4_xs_q8_k_dotprod(int64_t n, const void* x, const void* y);
void gemv_q4_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y);
void gemv_q5_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y);
void gemv_q8_0_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y);
void gemv_q4_1_q8_1_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y);
void gemv_q5_1_q8_1_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                            const uint8_t* act, float* y);
void gemv_iq4_nl_q8_0_dotprod(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                              const uint8_t* act, float* y);

// gemm_quants.cpp: the gemm kernels (GemmKernels, kernel_table.h) of Q4_0, Q5_0, Q8_0 and
// Q4_K, Q5_K, Q6_K, 4 rows x 8 tokens per micro-tile (gemm_impl.h); gemm_dotprod.cpp: the
// same with SDOT, callable only where dotprod exists. Both give the same bits.
GemmKernels gemm_q4_0_q8_0();
GemmKernels gemm_q5_0_q8_0();
GemmKernels gemm_q8_0_q8_0();
GemmKernels gemm_q4_k_q8_k();
GemmKernels gemm_q5_k_q8_k();
GemmKernels gemm_q6_k_q8_k();
GemmKernels gemm_q4_0_q8_0_dotprod();
GemmKernels gemm_q5_0_q8_0_dotprod();
GemmKernels gemm_q8_0_q8_0_dotprod();
GemmKernels gemm_q4_k_q8_k_dotprod();
GemmKernels gemm_q5_k_q8_k_dotprod();
GemmKernels gemm_q6_k_q8_k_dotprod();
// gemm_i8mm.cpp: the same with SMMLA (pairs of 8-element steps), callable only where i8mm
// exists; the same bits again.
GemmKernels gemm_q4_0_q8_0_i8mm();
GemmKernels gemm_q5_0_q8_0_i8mm();
GemmKernels gemm_q8_0_q8_0_i8mm();
GemmKernels gemm_q4_k_q8_k_i8mm();
GemmKernels gemm_q5_k_q8_k_i8mm();
GemmKernels gemm_q6_k_q8_k_i8mm();

// gemv_repacked.cpp: decode gemv (GemvRepackedFn) over the x16 layouts of repack.h of Q4_0,
// IQ4_NL, Q5_0, Q8_0, Q4_K and Q6_K (and Q5_K with SDOT only), each output the vec_dot's bits;
// gemv_repacked_dotprod.cpp: the same with SDOT, callable only where dotprod exists.
void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_iq4_nl_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                     float* y);
void gemv_q5_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q4_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q4_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);
void gemv_iq4_nl_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                             float* y);
void gemv_q5_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);
void gemv_q8_0_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);
void gemv_q4_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);
void gemv_q5_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);
void gemv_q6_k_x16_dotprod(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                           float* y);

// dot_float.cpp: float rows, and F32 -> F16 / BF16 activation rows (bit-identical to the
// reference conversions).
float vec_dot_f32_f32(int64_t n, const void* x, const void* y);
float vec_dot_f16_f16(int64_t n, const void* x, const void* y);
float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y);
void from_float_f16(const float* src, void* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);

// ops_attention.cpp: attention over F32 and F16 caches (attention_tiles.h with NEON ops).
void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
// Any other K/V type pair (attention_tiles::attend_mixed), and KV rows widened to float
// (ToFloatFn), bit for bit as the reference dequantizers.
void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial);
void f16_to_float(const void* src, float* dst, int64_t n);
void bf16_to_float(const void* src, float* dst, int64_t n);
void q8_0_to_float(const void* src, float* dst, int64_t n);
void q4_0_to_float(const void* src, float* dst, int64_t n);

// ops.cpp: row kernels.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void add(const float* a, const float* b, int64_t n, float* out);
void to_f16(const float* src, uint16_t* dst, int64_t n);

// Overrides the generic entries of `k` with the NEON kernels of `level` (Isa::kNeon,
// kNeonDotprod or kNeonI8mm; kernel_table.h): the baseline ones, the dotprod ones, or the
// dotprod ones with the i8mm gemm tiles.
void fill_kernels(CpuKernels& k, Isa level);

}  // namespace qrun::kernels::neon
