// Causal grouped-query attention over a KV cache, and the store into it. Each (token,
// head) pair is one work item: one pass over cache positions 0 .. pos0 + t with an online
// softmax (running max m, running sum l, output accumulator rescaled by exp(m_old - m_new)
// whenever the max grows), so memory stays O(head_dim) whatever the context length.
// An F16 cache follows llama.cpp's CPU flash-attention rounding step for step (see
// attend_f16); an F32 cache is computed in float throughout.
#include <cmath>
#include <cstring>
#include <limits>

#include "ggml-like/fp16.h"
#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {
namespace {

constexpr int64_t kMaxHeadDim = 1024;

inline float round_to_f16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

// F32 cache: float scores (q.k summed in double), float accumulator.
void attend_f32(const float* q, const float* k, const float* v, int64_t stride, int64_t n_kv,
                int64_t head_dim, float scale, float* out) {
  float acc[kMaxHeadDim];
  for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t j = 0; j < n_kv; ++j) {
    const float* kr = k + j * stride;
    const float* vr = v + j * stride;
    double dot = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d] * kr[d]);
    const float s = static_cast<float>(dot) * scale;
    float ms = 1.0f;  // rescales the old accumulator when the max grows
    float vs = 1.0f;  // exp(s - m), the weight of this row
    if (s > m) {
      ms = std::exp(m - s);  // 0 on the first row (m = -inf)
      m = s;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] *= ms;
    } else {
      vs = std::exp(s - m);
    }
    for (int64_t d = 0; d < head_dim; ++d) acc[d] += vr[d] * vs;
    l = l * ms + vs;
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

// F16 cache: the numerics of llama.cpp's CPU flash attention, so logits match it closely.
// q is rounded to F16; q.k sums exact F16 x F16 products in double; the output accumulator
// is held in F16 (rounded after every rescale and every multiply-add); the softmax sum is
// float, updated with a fused multiply-add. (llama.cpp casts an F32 cache to F16 before its
// flash attention, so this is also what its "F32 cache" computes.)
void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_kv,
                int64_t head_dim, float scale, float* out) {
  float qh[kMaxHeadDim];
  float acc[kMaxHeadDim];  // values representable in F16
  for (int64_t d = 0; d < head_dim; ++d) {
    qh[d] = round_to_f16(q[d]);
    acc[d] = 0.0f;
  }
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t j = 0; j < n_kv; ++j) {
    const uint16_t* kr = k + j * stride;
    const uint16_t* vr = v + j * stride;
    double dot = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      dot += static_cast<double>(qh[d] * fp16_to_fp32(kr[d]));
    }
    const float s = static_cast<float>(dot) * scale;
    float ms = 1.0f;
    float vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);
      m = s;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] = round_to_f16(acc[d] * ms);
    } else {
      vs = std::exp(s - m);
    }
    for (int64_t d = 0; d < head_dim; ++d) acc[d] = round_to_f16(acc[d] + fp16_to_fp32(vr[d]) * vs);
    l = std::fma(l, ms, vs);
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace

void CpuBackend::kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                          const float* v) {
  QRUN_CHECK(pos >= 0 && pos + n_tokens <= cache.n_ctx,
             "kv_store: positions %lld..%lld outside a cache of %lld", static_cast<long long>(pos),
             static_cast<long long>(pos + n_tokens), static_cast<long long>(cache.n_ctx));
  QRUN_CHECK(cache.type == DType::kF32 || cache.type == DType::kF16, "kv_store: cache type %s",
             dtype_name(cache.type));
  const int64_t n = cache.row_elems();
  const size_t row_bytes = row_size(cache.type, n);
  auto* k_dst = static_cast<uint8_t*>(cache.k) + static_cast<size_t>(pos) * row_bytes;
  auto* v_dst = static_cast<uint8_t*>(cache.v) + static_cast<size_t>(pos) * row_bytes;
  if (cache.type == DType::kF32) {
    std::memcpy(k_dst, k, row_bytes * static_cast<size_t>(n_tokens));
    std::memcpy(v_dst, v, row_bytes * static_cast<size_t>(n_tokens));
    return;
  }
  pool_.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      auto* kr = reinterpret_cast<uint16_t*>(k_dst + static_cast<size_t>(t) * row_bytes);
      auto* vr = reinterpret_cast<uint16_t*>(v_dst + static_cast<size_t>(t) * row_bytes);
      for (int64_t i = 0; i < n; ++i) {
        kr[i] = fp32_to_fp16(k[t * n + i]);
        vr[i] = fp32_to_fp16(v[t * n + i]);
      }
    }
  });
}

void CpuBackend::attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                           const AttentionParams& params, float* out) {
  const int64_t n_head = params.n_head;
  const int64_t n_head_kv = params.n_head_kv;
  const int64_t head_dim = params.head_dim;
  QRUN_CHECK(n_head_kv > 0 && n_head % n_head_kv == 0 && n_head_kv == cache.n_head_kv &&
                 head_dim == cache.head_dim && head_dim <= kMaxHeadDim,
             "attention: n_head %lld, n_head_kv %lld (cache %lld), head_dim %lld (cache %lld)",
             static_cast<long long>(n_head), static_cast<long long>(n_head_kv),
             static_cast<long long>(cache.n_head_kv), static_cast<long long>(head_dim),
             static_cast<long long>(cache.head_dim));
  QRUN_CHECK(pos0 >= 0 && pos0 + n_tokens <= cache.n_ctx,
             "attention: positions %lld..%lld outside a cache of %lld",
             static_cast<long long>(pos0), static_cast<long long>(pos0 + n_tokens),
             static_cast<long long>(cache.n_ctx));
  const int64_t group = n_head / n_head_kv;
  const int64_t stride = cache.row_elems();
  const int64_t q_row = n_head * head_dim;
  pool_.parallel_for(n_tokens * n_head, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_head;
      const int64_t h = item % n_head;
      const int64_t kv_offset = (h / group) * head_dim;
      const int64_t n_kv = pos0 + t + 1;
      const float* qh = q + t * q_row + h * head_dim;
      float* oh = out + t * q_row + h * head_dim;
      if (cache.type == DType::kF32) {
        attend_f32(qh, static_cast<const float*>(cache.k) + kv_offset,
                   static_cast<const float*>(cache.v) + kv_offset, stride, n_kv, head_dim,
                   params.scale, oh);
      } else {
        attend_f16(qh, static_cast<const uint16_t*>(cache.k) + kv_offset,
                   static_cast<const uint16_t*>(cache.v) + kv_offset, stride, n_kv, head_dim,
                   params.scale, oh);
      }
    }
  });
}

}  // namespace qrun::kernels
