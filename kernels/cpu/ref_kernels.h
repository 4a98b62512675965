// The generic (scalar reference) row kernels behind the generic CpuKernels table. SIMD
// kernels are tested against these; each states the numerics it fixes.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels::ref {

inline constexpr int64_t kMaxHeadDim = 1024;

// F32 cache: float scores (q.k summed in double), float accumulator.
void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
// F16 cache: the numerics of llama.cpp's CPU flash attention (see ref_attention.cpp).
void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial);
// Any other pair of K and V types: llama.cpp's CPU flash attention over them (see
// KvRowsMixed and ref_attention.cpp), one row and one head at a time.
void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial);
// The largest converted query row attend_mixed holds: head_dim F32 values.
inline constexpr size_t kMaxQueryBytes = kMaxHeadDim * sizeof(float);
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// gelu(gate) * up with llama.cpp's F16 GELU table: see Backend::geglu.
void geglu(const float* gate, const float* up, int64_t n, float* out);
// GELU (tanh approximation) of the F16 value with bits h, rounded to F16: the table behind
// geglu, one entry per F16 bit pattern, built on first use.
const uint16_t* gelu_f16_table();
void add(const float* a, const float* b, int64_t n, float* out);
void to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace qrun::kernels::ref
