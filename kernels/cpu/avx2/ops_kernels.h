// The AVX2 op kernels registered by ops_registry.cpp. Each has the signature of its
// generic twin in kernels/cpu/ref_kernels.h and is tested against it
// (tests/kernels_ops_test.cpp). Only files in avx2/ include this header.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::avx2 {

// ops_attention.cpp
void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial);
// KV cache rows widened to float (ToFloatFn), bit for bit as the reference dequantizers.
void f16_to_float(const void* src, float* dst, int64_t n);
void bf16_to_float(const void* src, float* dst, int64_t n);
void q8_0_to_float(const void* src, float* dst, int64_t n);
void q4_0_to_float(const void* src, float* dst, int64_t n);

// ops_elementwise.cpp
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void add(const float* a, const float* b, int64_t n, float* out);
void to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace qrun::kernels::avx2
