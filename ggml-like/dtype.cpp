// The traits table: block geometry of every GGML type, and the reference kernels of
// the types qrun computes with. A test checks that every supported type has a full row.
#include "ggml-like/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "ggml-like/quants.h"
#include "ggml-like/result.h"

namespace qrun {
namespace {

constexpr TypeTraits row(DType t, const char* name, int64_t be, size_t bb, bool q) {
  return TypeTraits{t, name, be, bb, q, t, nullptr, nullptr, nullptr, nullptr};
}

// A row with reference kernels (quants.h): dequantize, quantize, and the dot product
// against `dot_type`, the activation type (the type itself for F32/F16/BF16, Q8_0 for the
// 32-wide quants, Q8_1 for the offset ones Q4_1 and Q5_1, Q8_K for the k-quants and IQ4_XS;
// llama.cpp's
// CPU choices). Activation-only types (Q8_1, Q8_K) have no dot product of their own.
constexpr TypeTraits kernel_row(TypeTraits geometry, DType dot_type, ToFloatFn to, FromFloatFn from,
                                VecDotFn dot) {
  geometry.vec_dot_type = dot_type;
  geometry.to_float = to;
  geometry.from_float = from;
  geometry.from_float_act = from;
  geometry.vec_dot = dot;
  return geometry;
}

// A row whose activations are quantized differently from its weights.
constexpr TypeTraits with_activation_quantizer(TypeTraits t, FromFloatFn act) {
  t.from_float_act = act;
  return t;
}

// Geometry of every known type (block elements, block bytes) in id order, with the
// reference kernels of the types qrun computes with.
constexpr std::array kGeometry = {
    kernel_row(row(DType::kF32, "f32", 1, 4, false), DType::kF32, to_float_f32, from_float_f32,
               vec_dot_f32_f32),
    kernel_row(row(DType::kF16, "f16", 1, 2, false), DType::kF16, to_float_f16, from_float_f16,
               vec_dot_f16_f16),
    kernel_row(row(DType::kQ4_0, "q4_0", 32, 18, true), DType::kQ8_0, dequantize_q4_0,
               quantize_q4_0, vec_dot_q4_0_q8_0),
    kernel_row(row(DType::kQ4_1, "q4_1", 32, 20, true), DType::kQ8_1, dequantize_q4_1,
               quantize_q4_1, vec_dot_q4_1_q8_1),
    kernel_row(row(DType::kQ5_0, "q5_0", 32, 22, true), DType::kQ8_0, dequantize_q5_0,
               quantize_q5_0, vec_dot_q5_0_q8_0),
    kernel_row(row(DType::kQ5_1, "q5_1", 32, 24, true), DType::kQ8_1, dequantize_q5_1,
               quantize_q5_1, vec_dot_q5_1_q8_1),
    with_activation_quantizer(kernel_row(row(DType::kQ8_0, "q8_0", 32, 34, true), DType::kQ8_0,
                                         dequantize_q8_0, quantize_q8_0, vec_dot_q8_0_q8_0),
                              quantize_q8_0_act),
    with_activation_quantizer(kernel_row(row(DType::kQ8_1, "q8_1", 32, 36, true), DType::kQ8_1,
                                         dequantize_q8_1, quantize_q8_1, nullptr),
                              quantize_q8_1_act),
    kernel_row(row(DType::kQ2_K, "q2_k", 256, 84, true), DType::kQ8_K, dequantize_q2_k,
               quantize_q2_k, vec_dot_q2_k_q8_k),
    kernel_row(row(DType::kQ3_K, "q3_k", 256, 110, true), DType::kQ8_K, dequantize_q3_k,
               quantize_q3_k, vec_dot_q3_k_q8_k),
    kernel_row(row(DType::kQ4_K, "q4_k", 256, 144, true), DType::kQ8_K, dequantize_q4_k,
               quantize_q4_k, vec_dot_q4_k_q8_k),
    kernel_row(row(DType::kQ5_K, "q5_k", 256, 176, true), DType::kQ8_K, dequantize_q5_k,
               quantize_q5_k, vec_dot_q5_k_q8_k),
    kernel_row(row(DType::kQ6_K, "q6_k", 256, 210, true), DType::kQ8_K, dequantize_q6_k,
               quantize_q6_k, vec_dot_q6_k_q8_k),
    kernel_row(row(DType::kQ8_K, "q8_k", 256, 292, true), DType::kQ8_K, dequantize_q8_k,
               quantize_q8_k, nullptr),
    row(DType::kIQ2_XXS, "iq2_xxs", 256, 66, true),
    row(DType::kIQ2_XS, "iq2_xs", 256, 74, true),
    row(DType::kIQ3_XXS, "iq3_xxs", 256, 98, true),
    row(DType::kIQ1_S, "iq1_s", 256, 50, true),
    kernel_row(row(DType::kIQ4_NL, "iq4_nl", 32, 18, true), DType::kQ8_0, dequantize_iq4_nl,
               quantize_iq4_nl, vec_dot_iq4_nl_q8_0),
    row(DType::kIQ3_S, "iq3_s", 256, 110, true),
    row(DType::kIQ2_S, "iq2_s", 256, 82, true),
    kernel_row(row(DType::kIQ4_XS, "iq4_xs", 256, 136, true), DType::kQ8_K, dequantize_iq4_xs,
               quantize_iq4_xs, vec_dot_iq4_xs_q8_k),
    row(DType::kI8, "i8", 1, 1, false),
    row(DType::kI16, "i16", 1, 2, false),
    row(DType::kI32, "i32", 1, 4, false),
    row(DType::kI64, "i64", 1, 8, false),
    row(DType::kF64, "f64", 1, 8, false),
    row(DType::kIQ1_M, "iq1_m", 256, 56, true),
    kernel_row(row(DType::kBF16, "bf16", 1, 2, false), DType::kBF16, to_float_bf16, from_float_bf16,
               vec_dot_bf16_bf16),
    row(DType::kTQ1_0, "tq1_0", 256, 54, true),
    row(DType::kTQ2_0, "tq2_0", 256, 66, true),
};

}  // namespace

std::span<const TypeTraits> all_types() {
  return kGeometry;
}

const TypeTraits* find_type(uint32_t id) {
  for (const TypeTraits& t : kGeometry) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const TypeTraits& type_traits(DType type) {
  const TypeTraits* t = find_type(static_cast<uint32_t>(type));
  QRUN_CHECK(t != nullptr, "unknown dtype id %u", static_cast<unsigned>(type));
  return *t;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const TypeTraits& t : kGeometry) {
    std::string_view n = t.name;
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      return t.type;
    }
  }
  return std::nullopt;
}

size_t row_size(DType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  QRUN_CHECK(n % t.block_elems == 0, "%lld elements of %s is not a whole number of blocks",
             static_cast<long long>(n), t.name);
  return static_cast<size_t>(n / t.block_elems) * t.block_bytes;
}

}  // namespace qrun
