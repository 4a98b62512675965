// Which ISAs an attention test needs to run. The three arm64 levels (kernel_table.h) share
// their attention and row-conversion kernels and differ only in the integer dot products (the
// ones a Q8_0 or Q4_0 K is read with), so a test that ran CpuBackend's kv_store and attention
// on every level ran the same functions up to three times: most of the kernel tests' time
// under qemu. An ISA is kept where any kernel those two read for the cache's types is its own.
#pragma once

#include <algorithm>
#include <vector>

#include "ggml-like/dtype.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {

// Whether CpuBackend's kv_store and attention on a cache of K `k_type` and V `v_type` call
// the same kernels on ISAs a and b (ops_attention.cpp reads these and no others: a type's
// row converter, kv_row_converter, is its quantize_act or the reference quantizer).
inline bool same_attention_kernels(Isa a, Isa b, DType k_type, DType v_type) {
  const CpuKernels& x = cpu_kernels(a);
  const CpuKernels& y = cpu_kernels(b);
  const auto same_type = [&](DType t) {
    const MatmulKernels& m = x.for_type(t);
    const MatmulKernels& n = y.for_type(t);
    return m.vec_dot == n.vec_dot && m.quantize_act == n.quantize_act && m.act_type == n.act_type &&
           x.to_float[static_cast<size_t>(t)] == y.to_float[static_cast<size_t>(t)];
  };
  return x.attend_f32 == y.attend_f32 && x.attend_f16 == y.attend_f16 &&
         x.attend_mixed == y.attend_mixed && x.to_f16 == y.to_f16 && same_type(k_type) &&
         same_type(v_type);
}

// The ISAs of `isas`, in order, less each one whose attention kernels for the cache types
// are those of one before it.
inline std::vector<Isa> isas_with_own_attention(const std::vector<Isa>& isas, DType k_type,
                                                DType v_type) {
  std::vector<Isa> out;
  for (const Isa isa : isas) {
    const bool seen = std::any_of(out.begin(), out.end(), [&](Isa kept) {
      return same_attention_kernels(kept, isa, k_type, v_type);
    });
    if (!seen) out.push_back(isa);
  }
  return out;
}

}  // namespace qrun::kernels
