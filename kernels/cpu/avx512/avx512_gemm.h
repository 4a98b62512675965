// The AVX-512 VNNI gemm tile kernels for prefill (avx512/gemm_*.cpp) and their
// registration hook, called from fill_avx512_kernels. Only files in this folder, compiled
// with -mavx512f/bw/vl/dq/vnni, include this header.
#pragma once

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx512 {

// Overrides the gemm entries (inherited from the AVX2 table) of the types below.
void fill_gemm_kernels(CpuKernels& k);

// GemmFn kernels (kernel_table.h), one per weight type against its activation type.
void gemm_q4_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q5_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q8_0_q8_0(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q4_k_q8_k(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q5_k_q8_k(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q6_k_q8_k(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                    const uint8_t* act, size_t act_stride, int64_t n_tokens, float* y, int64_t ldy);

}  // namespace qrun::kernels::avx512
