// Matrix multiplication of a weight tensor by a batch of F32 activations, as llama.cpp's
// CPU backend does it: each activation row is first converted to the weight type's
// vec_dot_type (F32 stays as is, F16/BF16 round to nearest even, quantized weights meet
// Q8_0 or Q8_K activations), then every output is one reference vec_dot of a weight row
// with an activation row. Threads split the output rows; each weight row is read once and
// dotted with every token while it is hot in cache.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {
namespace {

// Below this many multiply-adds per thread, splitting costs more than it saves.
constexpr int64_t kMinMacsPerThread = 32 * 1024;

// Q8_0 activations as llama.cpp's x86 CPU backend quantizes them (its AVX/AVX2 row
// quantizer, also used by its repacked Q4_0 GEMM): scale d = amax / 127 stored as F16,
// multiplier 127 / amax (not 1 / d: the two differ in the last bit for some amax), and
// round half to even. The reference quantizer (weights) rounds half away from zero, so the
// two disagree on a few elements per million, enough to move greedy picks at near-ties.
void quantize_act_q8_0(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int64_t i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int64_t i = 0; i < kQK; ++i) {
      const long q = std::lrint(xb[i] * id);
      blocks[b].qs[i] = static_cast<int8_t>(std::clamp<long>(q, -128, 127));
    }
  }
}

// The activation quantizer for a vec_dot_type: llama.cpp's CPU choice where it differs
// from the reference quantizer, else the traits table's.
FromFloatFn activation_quantizer(const TypeTraits& t) {
  if (t.type == DType::kQ8_0) return quantize_act_q8_0;
  return t.from_float;
}

}  // namespace

void CpuBackend::matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  const TypeTraits& wt = type_traits(w.type);
  QRUN_CHECK(wt.vec_dot != nullptr, "matmul: weight '%.*s' has type %s, which has no dot product",
             static_cast<int>(w.name.size()), w.name.data(), wt.name);
  const int64_t n_in = w.ne[0];
  const int64_t n_out = w.n_rows();
  const size_t w_row_bytes = w.row_bytes();
  const auto* w_data = static_cast<const uint8_t*>(w.data);
  if (n_tokens <= 0 || n_out <= 0) return;

  // Activations in the dot type: [n_tokens] rows of act_row_bytes.
  const TypeTraits& at = type_traits(wt.vec_dot_type);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_row_bytes = static_cast<size_t>(n_in) * sizeof(float);
  if (at.type != DType::kF32) {
    QRUN_CHECK(at.from_float != nullptr, "matmul: activation type %s has no quantizer", at.name);
    act_row_bytes = row_size(at.type, n_in);
    const size_t need = act_row_bytes * static_cast<size_t>(n_tokens);
    if (act_buf_.size() < need) act_buf_.resize(need);
    uint8_t* buf = act_buf_.data();
    const FromFloatFn quantize = activation_quantizer(at);
    pool_.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        quantize(x + t * n_in, buf + static_cast<size_t>(t) * act_row_bytes, n_in);
      }
    });
    act = buf;
  }

  const VecDotFn dot = wt.vec_dot;
  const int64_t macs_per_row = std::max<int64_t>(1, n_in * n_tokens);
  const int64_t min_rows = std::max<int64_t>(1, kMinMacsPerThread / macs_per_row);
  pool_.parallel_for(
      n_out,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* w_row = w_data + static_cast<size_t>(r) * w_row_bytes;
          for (int64_t t = 0; t < n_tokens; ++t) {
            y[t * n_out + r] = dot(n_in, w_row, act + static_cast<size_t>(t) * act_row_bytes);
          }
        }
      },
      min_rows);
}

}  // namespace qrun::kernels
