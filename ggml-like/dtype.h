// Tensor element types. Enum values equal the GGUF/GGML type ids and never change.
// One constexpr-sized traits table (dtype.cpp) gives every type's block geometry, so the
// GGUF reader can validate any file; the types qrun computes with also carry their
// scalar reference kernels (quantize, dequantize, dot against the activation type).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qrun {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

// Dequantizes n elements (a multiple of the block size) from src into dst.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantizes n elements (a multiple of the block size) from src into dst (reference).
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of n elements: x is a row of this type, y a row of its vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);

struct TypeTraits {
  DType type;
  const char* name;     // lower case, as qrun prints and parses it: "q4_k", "bf16"
  int64_t block_elems;  // elements per block (1 for plain float/int types)
  size_t block_bytes;   // bytes per block
  bool is_quantized;
  // Computation support: null function pointers mean "known to the reader, not runnable".
  DType vec_dot_type;      // the activation type this type's dot product expects
  ToFloatFn to_float;      // scalar reference dequantize
  FromFloatFn from_float;  // scalar reference quantize
  // How a row of this type is produced from F32 activations before a matmul: llama.cpp's
  // CPU behaviour, which for Q8_0 differs from its reference quantizer (see quants.h).
  FromFloatFn from_float_act;
  VecDotFn vec_dot;  // scalar reference dot against vec_dot_type
};

// Traits of a known type. QRUN_CHECKs that `type` is known (see find_type for ids from files).
const TypeTraits& type_traits(DType type);
// Traits for a raw GGUF type id, or nullptr when the id names no known type.
const TypeTraits* find_type(uint32_t id);
// Parses a name as printed by type_traits().name ("q4_0", "F16" ...), case-insensitively.
std::optional<DType> dtype_from_name(std::string_view name);
// All known types, in id order.
std::span<const TypeTraits> all_types();

inline const char* dtype_name(DType type) {
  return type_traits(type).name;
}
// True when qrun has reference kernels for the type, a dot product included (it can be a
// weight type). Activation-only types such as Q8_K convert but are not supported weights.
inline bool is_supported(DType type) {
  return type_traits(type).vec_dot != nullptr;
}
// Bytes of n elements; n must be a multiple of the block size.
size_t row_size(DType type, int64_t n);

}  // namespace qrun
