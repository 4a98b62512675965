// A gemv (kernel_table.h: several weight rows times one activation row) built from a
// type's vec_dot: the rows go one at a time through that vec_dot, so each output is the
// vec_dot's bit for bit, while the row two ahead is prefetched. Decoding streams every
// weight once; with the next rows already on their way the dot does not wait on memory at
// each row start. For types with no hand-written multi-row kernel. Included by ISA folders
// only; the unnamed namespace keeps each instantiation with its ISA's flags. The prefetch
// is GCC's builtin, PRFM PLDL1KEEP on arm64. Only the NEON table uses it: on x86-64
// (PREFETCHT0) it made decode slower on the 2-core EPYC guest (avx2/dot_registry.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qrun::kernels {
namespace {

inline constexpr int64_t kGemvPrefetchRows = 2;  // rows ahead of the one being dotted
inline constexpr size_t kCacheLine = 64;

template <float (*kDot)(int64_t, const void*, const void*)>
void gemv_prefetched(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                     const uint8_t* act, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * w_stride;
    // Prefetches never fault, so running past the last row of the matrix is harmless.
    const char* ahead = reinterpret_cast<const char*>(row + kGemvPrefetchRows * w_stride);
    for (size_t off = 0; off < w_stride; off += kCacheLine) {
      __builtin_prefetch(ahead + off, 0, 3);
    }
    y[r] = kDot(n, row, act);
  }
}

}  // namespace
}  // namespace qrun::kernels
