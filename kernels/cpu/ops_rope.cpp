// Rotary position embedding: pair i of the first n_rot elements of each head, (x[2i], x[2i+1])
// in normal mode or (x[i], x[i + n_rot/2]) in neox mode, turns by
// theta_i = freq_scale * (p * base^(-2i/n_rot)) / f_i (with YaRN, mixed with the unscaled
// angle by rope_angle), and is scaled by attn_factor (cos and sin are multiplied by it before
// the rotation, as ggml does, so 1 leaves them exact).
// The per-pair frequency is formed as ggml forms it, by repeated float multiplication of
// p by base^(-2/n_rot), so angles (and hence logits) agree with llama.cpp to the last bit
// of the angle; cos and sin are computed once per token and shared by all its heads.
#include <algorithm>
#include <cmath>

#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {
namespace {

constexpr int64_t kMaxRotPairs = 1024;

}  // namespace

void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                      std::span<const int32_t> positions, const RopeParams& params) {
  const int64_t n_rot = params.n_rot;
  QRUN_CHECK(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim && n_rot / 2 <= kMaxRotPairs,
             "rope: n_rot %lld must be even, positive and <= head_dim %lld",
             static_cast<long long>(n_rot), static_cast<long long>(head_dim));
  QRUN_CHECK(static_cast<int64_t>(positions.size()) >= n_tokens,
             "rope: %zu positions for %lld tokens", positions.size(),
             static_cast<long long>(n_tokens));
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot));
  pool_.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
    float cos_sin[2 * kMaxRotPairs];
    for (int64_t t = begin; t < end; ++t) {
      float theta = static_cast<float>(positions[static_cast<size_t>(t)]);
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const float ff = params.freq_factors != nullptr ? params.freq_factors[i] : 1.0f;
        const float angle = rope_angle(theta / ff, i, params);
        cos_sin[2 * i] = std::cos(angle) * params.attn_factor;
        cos_sin[2 * i + 1] = std::sin(angle) * params.attn_factor;
        theta *= theta_scale;
      }
      // Pair i is (v[i * stride], v[i * stride + offset]).
      const bool neox = params.mode == RopeMode::kNeox;
      const int64_t stride = neox ? 1 : 2;
      const int64_t offset = neox ? n_rot / 2 : 1;
      for (int64_t h = 0; h < n_head; ++h) {
        float* v = x + (t * n_head + h) * head_dim;
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const float c = cos_sin[2 * i];
          const float s = cos_sin[2 * i + 1];
          float* p0 = v + i * stride;
          float* p1 = p0 + offset;
          const float x0 = *p0;
          const float x1 = *p1;
          *p0 = x0 * c - x1 * s;
          *p1 = x0 * s + x1 * c;
        }
      }
    }
  });
}

}  // namespace qrun::kernels
