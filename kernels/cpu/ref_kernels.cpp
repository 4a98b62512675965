// The generic kernel table: matmul through the dtype traits' reference quantizers and
// dot products, and scalar row kernels for norms, element-wise ops and F16 stores.
#include "kernels/cpu/ref_kernels.h"

#include <cmath>
#include <vector>

#include "ggml-like/fp16.h"

namespace qrun::kernels {
namespace ref {

void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

const uint16_t* gelu_f16_table() {
  static const std::vector<uint16_t> table = [] {
    // The tanh approximation in float, as llama.cpp's ggml_gelu_f32 evaluates it.
    constexpr float kCoefA = 0.044715f;
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    std::vector<uint16_t> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = fp16_to_fp32(static_cast<uint16_t>(h));
      t[h] =
          fp32_to_fp16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x))));
    }
    return t;
  }();
  return table.data();
}

void geglu(const float* gate, const float* up, int64_t n, float* out) {
  const uint16_t* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    float gelu = g;  // GELU(x) = x to float precision for x >= 10
    if (g <= -10.0f) {
      gelu = 0.0f;
    } else if (g < 10.0f || std::isnan(g)) {
      gelu = fp16_to_fp32(table[fp32_to_fp16(g)]);
    }
    out[i] = gelu * up[i];
  }
}

void add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace ref

void fill_generic_kernels(CpuKernels& k) {
  for (const TypeTraits& t : all_types()) {
    if (static_cast<size_t>(t.type) < kTypeSlots)
      k.to_float[static_cast<size_t>(t.type)] = t.to_float;
    if (t.vec_dot == nullptr) continue;
    MatmulKernels& m = k.for_type(t.type);
    m.act_type = t.vec_dot_type;
    m.quantize_act =
        t.vec_dot_type == DType::kF32 ? nullptr : type_traits(t.vec_dot_type).from_float_act;
    m.vec_dot = t.vec_dot;
    m.gemm = GemmKernels{};
  }
  k.attend_f32 = ref::attend_f32;
  k.attend_f16 = ref::attend_f16;
  k.attend_mixed = ref::attend_mixed;
  k.rms_norm_row = ref::rms_norm_row;
  k.swiglu = ref::swiglu;
  k.geglu = ref::geglu;
  k.add = ref::add;
  k.to_f16 = ref::to_f16;
}

}  // namespace qrun::kernels
