// The AVX2 dot kernels and activation converters registered by dot_registry.cpp. Each has
// the signature of its reference twin in ggml-like/quants.h and is tested against it
// (tests/kernels_dot_test.cpp). Only files in avx2/ include this header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qrun::kernels::avx2 {

// dot_legacy.cpp: 32-element blocks against Q8_0 activations (and Q4_1, Q5_1 against Q8_1).
float vec_dot_q4_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q5_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_q8_0_q8_0(int64_t n, const void* x, const void* y);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* x, const void* y);
void quantize_q8_0_act(const float* src, void* dst, int64_t n);
// The offset types against Q8_1 activations, and llama.cpp's x86 Q8_1 activation quantizer.
float vec_dot_q4_1_q8_1(int64_t n, const void* x, const void* y);
float vec_dot_q5_1_q8_1(int64_t n, const void* x, const void* y);
void quantize_q8_1_act(const float* src, void* dst, int64_t n);
// Rows . one activation row, bit-identical to vec_dot (see GemvFn in kernel_table.h).
void gemv_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q4_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_q5_1_q8_1(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);
void gemv_iq4_nl_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                      const uint8_t* act, float* y);

// gemv_repacked.cpp: GemvRepackedFn over the x16 layouts of kernels/cpu/repack.h.
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
void gemv_q5_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);
void gemv_q6_k_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y);

// dot_kquants.cpp: 256-element super-blocks (k-quants, IQ4_XS) against Q8_K activations.
float vec_dot_q2_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q3_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q4_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q5_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_q6_k_q8_k(int64_t n, const void* x, const void* y);
float vec_dot_iq4_xs_q8_k(int64_t n, const void* x, const void* y);
void quantize_q8_k(const float* src, void* dst, int64_t n);
// Rows . one activation row, bit-identical to vec_dot_q2_k_q8_k (see GemvFn).
void gemv_q2_k_q8_k(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, float* y);

// dot_float.cpp: plain float rows.
float vec_dot_f32_f32(int64_t n, const void* x, const void* y);
float vec_dot_f16_f16(int64_t n, const void* x, const void* y);
float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y);
void from_float_f16(const float* src, void* dst, int64_t n);
void from_float_bf16(const float* src, void* dst, int64_t n);

}  // namespace qrun::kernels::avx2
