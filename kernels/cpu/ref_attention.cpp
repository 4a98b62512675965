// Scalar reference attention for one token and the KV heads it reads. Each query head is
// one pass over the rows it attends, oldest position first, with an online softmax (running max m,
// running sum l, output accumulator rescaled by exp(m_old - m_new) whenever the max
// grows), so memory stays O(head_dim) whatever the context length. An F16 cache follows
// llama.cpp's CPU flash-attention rounding step for step (see attend_one_f16); an F32
// cache is computed in float throughout; any other pair of K and V types (attend_one_mixed)
// is read as llama.cpp reads it: q converted to K's dot type and dotted with each K row
// (an integer dot for Q8_0 and Q4_0), each V row widened and accumulated.
#include <cmath>
#include <cstring>
#include <limits>

#include "ggml-like/fp16.h"
#include "kernels/cpu/ref_kernels.h"

namespace qrun::kernels::ref {
namespace {

inline float round_to_f16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

// The end of one head's pass: out = acc / l, or (partial not null) acc itself with m and l
// in partial[0], partial[1] (see AttendFn).
void finish_head(const float* acc, float m, float l, int64_t head_dim, float* out, float* partial) {
  if (partial != nullptr) {
    for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d];
    partial[0] = m;
    partial[1] = l;
    return;
  }
  const float inv = 1.0f / l;
  for (int64_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

// F32 cache: float scores (q.k summed in double), float accumulator.
void attend_one_f32(const float* q, const KvRows& kv, int64_t head_dim, KqScale scale, float* out,
                    float* partial) {
  float acc[kMaxHeadDim];
  for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t j = 0; j < kv.n; ++j) {
    const float* kr = static_cast<const float*>(kv.k) + kv.row(j) * kv.stride;
    const float* vr = static_cast<const float*>(kv.v) + kv.row(j) * kv.stride;
    double dot = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d] * kr[d]);
    const float s = scale.logit(static_cast<float>(dot));
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
  finish_head(acc, m, l, head_dim, out, partial);
}

// F16 cache: the numerics of llama.cpp's CPU flash attention, so logits match it closely.
// q is rounded to F16; q.k sums exact F16 x F16 products in double; the output accumulator
// is held in F16 (rounded after every rescale and every multiply-add); the softmax sum is
// float, updated with a fused multiply-add. (llama.cpp casts an F32 cache to F16 before its
// flash attention, so this is also what its "F32 cache" computes.)
void attend_one_f16(const float* q, const KvRows& kv, int64_t head_dim, KqScale scale, float* out,
                    float* partial) {
  float qh[kMaxHeadDim];
  float acc[kMaxHeadDim];  // values representable in F16
  for (int64_t d = 0; d < head_dim; ++d) {
    qh[d] = round_to_f16(q[d]);
    acc[d] = 0.0f;
  }
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t j = 0; j < kv.n; ++j) {
    const uint16_t* kr = static_cast<const uint16_t*>(kv.k) + kv.row(j) * kv.stride;
    const uint16_t* vr = static_cast<const uint16_t*>(kv.v) + kv.row(j) * kv.stride;
    double dot = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      dot += static_cast<double>(qh[d] * fp16_to_fp32(kr[d]));
    }
    const float s = scale.logit(static_cast<float>(dot));
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
  finish_head(acc, m, l, head_dim, out, partial);
}

// Mixed K/V types: q.k by the row functions of `kv` (q converted once); the softmax sum is
// updated with a fused multiply-add as in attend_one_f16; V rows widened to float and
// added with a fused multiply-add to an accumulator held in F16 (V is F16: llama.cpp's
// ggml_vec_mad_f16) or in float (any other V: its ggml_vec_mad_f32 on dequantized rows).
void attend_one_mixed(const float* q, const KvRowsMixed& kv, int64_t head_dim, KqScale scale,
                      float* out, float* partial) {
  alignas(64) uint8_t qc[kMaxQueryBytes];
  float vrow[kMaxHeadDim];
  float acc[kMaxHeadDim];
  if (kv.k_quantize != nullptr) {
    kv.k_quantize(q, qc, head_dim);
  } else {
    std::memcpy(qc, q, static_cast<size_t>(head_dim) * sizeof(float));
  }
  const bool f16_acc = kv.v_type == DType::kF16;
  for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int64_t j = 0; j < kv.n; ++j) {
    const int64_t r = kv.row(j);
    const float s =
        scale.logit(kv.k_dot(head_dim, kv.k + static_cast<size_t>(r) * kv.k_stride, qc));
    float ms = 1.0f;
    float vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);
      m = s;
      for (int64_t d = 0; d < head_dim; ++d) {
        acc[d] = f16_acc ? round_to_f16(acc[d] * ms) : acc[d] * ms;
      }
    } else {
      vs = std::exp(s - m);
    }
    kv.v_to_float(kv.v + static_cast<size_t>(r) * kv.v_stride, vrow, head_dim);
    for (int64_t d = 0; d < head_dim; ++d) {
      acc[d] =
          f16_acc ? round_to_f16(std::fma(vrow[d], vs, acc[d])) : std::fma(vrow[d], vs, acc[d]);
    }
    l = std::fma(l, ms, vs);
  }
  finish_head(acc, m, l, head_dim, out, partial);
}

// Query head h reads KV head h / (n_q / n_heads): these give the rows of KV head g alone.
KvRows one_head(const KvRows& kv, size_t elem_bytes, int64_t g) {
  KvRows r = kv;
  r.k = static_cast<const uint8_t*>(kv.k) + static_cast<size_t>(g * kv.head_stride) * elem_bytes;
  r.v = static_cast<const uint8_t*>(kv.v) + static_cast<size_t>(g * kv.head_stride) * elem_bytes;
  r.n_heads = 1;
  return r;
}

KvRowsMixed one_head(const KvRowsMixed& kv, int64_t g) {
  KvRowsMixed r = kv;
  r.k = kv.k + static_cast<size_t>(g) * kv.k_head_bytes;
  r.v = kv.v + static_cast<size_t>(g) * kv.v_head_bytes;
  r.n_heads = 1;
  return r;
}

}  // namespace

void attend_mixed(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                  int64_t head_dim, KqScale scale, float* out, int64_t out_stride, float* partial) {
  const int64_t group = n_q / kv.n_heads;
  for (int64_t h = 0; h < n_q; ++h) {
    attend_one_mixed(q + h * q_stride, one_head(kv, h / group), head_dim, scale,
                     out + h * out_stride, partial == nullptr ? nullptr : partial + 2 * h);
  }
}

void attend_f32(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  const int64_t group = n_q / kv.n_heads;
  for (int64_t h = 0; h < n_q; ++h) {
    attend_one_f32(q + h * q_stride, one_head(kv, sizeof(float), h / group), head_dim, scale,
                   out + h * out_stride, partial == nullptr ? nullptr : partial + 2 * h);
  }
}

void attend_f16(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv, int64_t head_dim,
                KqScale scale, float* out, int64_t out_stride, float* partial) {
  const int64_t group = n_q / kv.n_heads;
  for (int64_t h = 0; h < n_q; ++h) {
    attend_one_f16(q + h * q_stride, one_head(kv, sizeof(uint16_t), h / group), head_dim, scale,
                   out + h * out_stride, partial == nullptr ? nullptr : partial + 2 * h);
  }
}

}  // namespace qrun::kernels::ref
