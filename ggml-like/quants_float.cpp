// Reference kernels of the plain float weight types (F32, F16, BF16), and the row
// conveniences over the traits table. Each dot product multiplies in float and sums the
// products in double, as llama.cpp's scalar CPU code does; F16 and BF16 weights dot
// against activations of their own type (converted with round-to-nearest-even).
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "ggml-like/result.h"

namespace qrun {

void to_float_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void from_float_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32_f32(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const float*>(x);
  const auto* b = static_cast<const float*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  return static_cast<float>(sum);
}

void to_float_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void from_float_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

float vec_dot_f16_f16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint16_t*>(x);
  const auto* b = static_cast<const uint16_t*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]));
  }
  return static_cast<float>(sum);
}

void to_float_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void from_float_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

float vec_dot_bf16_bf16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint16_t*>(x);
  const auto* b = static_cast<const uint16_t*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(bf16_to_fp32(a[i]) * bf16_to_fp32(b[i]));
  }
  return static_cast<float>(sum);
}

void quantize_rows(DType type, const float* src, void* dst, int64_t n_rows, int64_t row_len) {
  const TypeTraits& t = type_traits(type);
  QRUN_CHECK(t.from_float != nullptr, "no reference quantizer for %s", t.name);
  QRUN_CHECK(n_rows >= 0 && row_len >= 0, "negative shape %lld x %lld",
             static_cast<long long>(n_rows), static_cast<long long>(row_len));
  const size_t row_bytes = row_size(type, row_len);  // checks whole blocks
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    t.from_float(src + r * row_len, out + static_cast<size_t>(r) * row_bytes, row_len);
  }
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const TypeTraits& t = type_traits(type);
  QRUN_CHECK(t.to_float != nullptr, "no reference dequantizer for %s", t.name);
  QRUN_CHECK(n >= 0 && n % t.block_elems == 0,
             "%lld elements of %s is not a whole number of blocks", static_cast<long long>(n),
             t.name);
  t.to_float(src, dst, n);
}

}  // namespace qrun
