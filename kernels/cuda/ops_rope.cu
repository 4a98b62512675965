// RoPE: one block per token and group of kHeadsPerBlock heads (of Q, then of K, when
// rope_qk rotates both in one launch) (each block forms the
// token's angles itself: a decode step's one token then spreads over several blocks, where
// one block rotating all 32 heads of a token took 7.5 us on an H200, ncu). Pair i's angle is formed
// as the CPU backend forms it (ops_rope.cpp, after ggml): p multiplied i times by theta_scale =
// base^(-2/n_rot), in float, so every angle has the reference's bits; thread i does its own i
// multiplications rather than reading a sequential product. cos and sin go to shared memory, then
// the block rotates every (head, pair) of the token. Under the emulator cosf/sinf are glibc's and
// the result equals the reference bit for bit; on the GPU they may differ by an ulp or two and nvcc
// contracts x0 * c - x1 * s into an FMA, a few float ulps per element.
// With a KvDestination (Backend::rope_qk_store), the blocks of K's heads then store those
// heads' rotated keys and their values to the cache rows, as store_kv_f16 would (the same
// F16 roundings), so a decode step's K/V store costs no launch of its own.
// With HeadNormWeights (Backend::norm_rope_qk_store: Qwen 3's and Gemma 3's per-head norms
// and Gemma's scale of q), a block of four heads normalizes each head first, summing its
// squares as rms_norm's kernels sum a row of up to 1024 (segment_sum_f64), and scales q's
// rotated pairs: the bits of the norm, rope and scale launches it replaces.
#include <cmath>

#include "kernels/cuda/kv_rows.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 256;      // a block that only rotates
constexpr int kMaxThreads = 1024;  // a block that normalizes its heads first
constexpr int kHeadsPerBlock = 4;
constexpr int kMaxPairs = 512;  // head_dim <= 1024
constexpr int64_t kMaxNormedHead = kMaxThreads / kHeadsPerBlock;

// Rotates a = [n_tokens, n_head_a, head_dim] and b (n_head_b heads; none when 0) at the
// same positions: grid.y covers a's groups of heads, then b's. Where norms has weights for
// a's or b's heads, blockDim.x / kHeadsPerBlock threads (a power of two, at least a warp,
// not below head_dim) normalize each of the block's heads first.
// What the angles need beyond the positions: RopeParams's, with ggml's theta_scale.
struct RopeAngles {
  float theta_scale;  // freq_base^(-2 / n_rot)
  float freq_scale;
  const float* freq_factors;  // device memory, or null
  float attn_factor;
  float ext_factor;  // YaRN's (see rope_angle in ggml-like/backend.h, which this repeats)
  float corr0, corr1;
};

__device__ __forceinline__ float rope_angle(float extrap, int64_t i, const RopeAngles& r) {
  const float interp = r.freq_scale * extrap;
  if (r.ext_factor == 0.0f) return interp;
  const float span = r.corr1 - r.corr0 > 0.001f ? r.corr1 - r.corr0 : 0.001f;
  const float y = (static_cast<float>(i) - r.corr0) / span;
  const float ramp = 1.0f - (y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y));
  const float mix = ramp * r.ext_factor;
  return interp * (1.0f - mix) + extrap * mix;
}

__global__ void __launch_bounds__(kMaxThreads)
    rope_kernel(float* a, int64_t n_head_a, float* b, int64_t n_head_b, int64_t head_dim,
                const int32_t* positions, int64_t n_rot, RopeAngles angles, bool neox,
                HeadNormWeights norms, KvDestination store) {
  __shared__ float cos_sin[2 * kMaxPairs];
  const int64_t t = blockIdx.x;
  const int64_t groups_a = (n_head_a + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const bool in_a = blockIdx.y < groups_a;
  const int64_t n_head = in_a ? n_head_a : n_head_b;
  float* token = (in_a ? a : b) + t * n_head * head_dim;
  const int64_t h0 = (in_a ? blockIdx.y : blockIdx.y - groups_a) * int64_t{kHeadsPerBlock};
  const int64_t heads = n_head - h0 < kHeadsPerBlock ? n_head - h0 : kHeadsPerBlock;
  // Before the wait for the kernels ahead, what none of them writes: the angles (the
  // positions are uploaded before the first launch that reads them, which starts only
  // once the upload is done, and every later launch after it) and the norm's weights.
  const int64_t n_pairs = n_rot / 2;
  for (int64_t i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    float theta = static_cast<float>(positions[t]);
    for (int64_t k = 0; k < i; ++k) theta *= angles.theta_scale;
    const float ff = angles.freq_factors != nullptr ? angles.freq_factors[i] : 1.0f;
    const float angle = rope_angle(theta / ff, i, angles);
    cos_sin[2 * i] = cosf(angle) * angles.attn_factor;
    cos_sin[2 * i + 1] = sinf(angle) * angles.attn_factor;
  }
  const float* norm_w = in_a ? norms.q : norms.k;
  // Thread e of a head's threads holds element e, as in rms_norm's kernels.
  const int per_head = static_cast<int>(blockDim.x) / kHeadsPerBlock;
  const int64_t e = threadIdx.x % per_head;
  const bool mine =
      norm_w != nullptr && static_cast<int64_t>(threadIdx.x / per_head) < heads && e < head_dim;
  const float g = mine ? norm_w[e] : 0.0f;
  wait_for_prior_kernels();
  if (norm_w != nullptr) {  // (uniform over the block)
    float* x = mine ? token + (h0 + threadIdx.x / per_head) * head_dim + e : nullptr;
    const float v = mine ? *x : 0.0f;
    const double sum = segment_sum_f64(mine ? static_cast<double>(v * v) : 0.0, per_head / kWarp);
    const float mean = static_cast<float>(sum / static_cast<double>(head_dim));
    const float scale = 1.0f / sqrtf(mean + norms.eps);
    if (mine) *x = (v * scale) * g;
  }
  __syncthreads();  // the angles formed, and every normalized element written
  // Pair i of a head is (v[i * stride], v[i * stride + offset]).
  const int64_t stride = neox ? 1 : 2;
  const int64_t offset = neox ? n_pairs : 1;
  const bool scaled = in_a && norms.q_scale != 1.0f;
  for (int64_t j = threadIdx.x; j < heads * n_pairs; j += blockDim.x) {
    const int64_t h = h0 + j / n_pairs;
    const int64_t i = j % n_pairs;
    const float c = cos_sin[2 * i];
    const float s = cos_sin[2 * i + 1];
    float* p0 = token + h * head_dim + i * stride;
    float* p1 = p0 + offset;
    const float x0 = *p0;
    const float x1 = *p1;
    float y0 = x0 * c - x1 * s;
    float y1 = x0 * s + x1 * c;
    if (scaled) {
      y0 *= norms.q_scale;
      y1 *= norms.q_scale;
    }
    *p0 = y0;
    *p1 = y1;
  }
  // The elements past n_rot are not rotated, but scaled all the same.
  const int64_t n_rest = head_dim - n_rot;
  if (scaled) {
    for (int64_t j = threadIdx.x; j < heads * n_rest; j += blockDim.x) {
      token[(h0 + j / n_rest) * head_dim + n_rot + j % n_rest] *= norms.q_scale;
    }
  }
  if (in_a || store.k_dst == nullptr) return;  // (uniform over the block)
  __syncthreads();                             // every pair of these heads rotated
  const int64_t row_elems = n_head * head_dim;
  const int64_t row = kv_storage_row(store.rows, store.pos + t) * row_elems;
  const float* v = store.v + t * row_elems;
  for (int64_t j = h0 * head_dim + threadIdx.x; j < (h0 + heads) * head_dim; j += blockDim.x) {
    store.k_dst[row + j] = f32_to_f16(token[j]);
    store.v_dst[row + j] = f32_to_f16(v[j]);
  }
}

// The launch of rope_kernel behind rope_qk and norm_rope_qk.
void launch_rope(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                 int64_t head_dim, const int32_t* positions, const RopeParams& params,
                 const HeadNormWeights& norms, Stream stream, const KvDestination* store) {
  const int64_t n_rot = params.n_rot;
  QRUN_CHECK(n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim && n_rot / 2 <= kMaxPairs,
             "rope: n_rot %lld must be even, positive and <= head_dim %lld (at most %d)",
             static_cast<long long>(n_rot), static_cast<long long>(head_dim), 2 * kMaxPairs);
  const int64_t groups = (n_head + kHeadsPerBlock - 1) / kHeadsPerBlock +
                         (n_head_kv + kHeadsPerBlock - 1) / kHeadsPerBlock;
  QRUN_CHECK(
      n_tokens >= 0 && n_tokens <= 0x7fffffff && n_head >= 0 && n_head_kv >= 0 && groups <= 65535,
      "rope: %lld tokens of %lld + %lld heads", static_cast<long long>(n_tokens),
      static_cast<long long>(n_head), static_cast<long long>(n_head_kv));
  QRUN_CHECK(store == nullptr || (k != nullptr && n_head_kv > 0 && n_tokens <= store->rows.n_rows),
             "rope: a K/V store of %lld tokens into %lld rows, %lld KV heads",
             static_cast<long long>(n_tokens),
             static_cast<long long>(store != nullptr ? store->rows.n_rows : 0),
             static_cast<long long>(n_head_kv));
  const bool normed = norms.q != nullptr || norms.k != nullptr;
  QRUN_CHECK(!normed || norm_rope_fits(head_dim), "norm_rope_qk: heads of %lld (at most %lld)",
             static_cast<long long>(head_dim), static_cast<long long>(kMaxNormedHead));
  if (n_tokens == 0 || groups == 0) return;
  int per_head = kWarp;  // threads a head when normed
  while (per_head < head_dim) per_head *= 2;
  const unsigned threads = normed ? static_cast<unsigned>(kHeadsPerBlock * per_head) : kThreads;
  const RopeAngles angles{std::pow(params.freq_base, -2.0f / static_cast<float>(n_rot)),
                          params.freq_scale,
                          params.freq_factors,
                          params.attn_factor,
                          params.ext_factor,
                          params.yarn_corr[0],
                          params.yarn_corr[1]};
  launch(rope_kernel, dim3(static_cast<unsigned>(n_tokens), static_cast<unsigned>(groups)),
         dim3(threads), stream, q, n_head, k, n_head_kv, head_dim, positions, n_rot, angles,
         params.mode == RopeMode::kNeox, norms, store != nullptr ? *store : KvDestination{});
}

}  // namespace

void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
             int64_t head_dim, const int32_t* positions, const RopeParams& params, Stream stream,
             const KvDestination* store) {
  launch_rope(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params, HeadNormWeights{},
              stream, store);
}

bool norm_rope_fits(int64_t head_dim) {
  return head_dim > 0 && head_dim <= kMaxNormedHead;
}

void norm_rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                  int64_t head_dim, const int32_t* positions, const RopeParams& params,
                  const HeadNormWeights& norms, Stream stream, const KvDestination* store) {
  launch_rope(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params, norms, stream, store);
}

void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
          const RopeParams& params, Stream stream) {
  rope_qk(x, n_head, nullptr, 0, n_tokens, head_dim, positions, params, stream);
}

QRUN_CUDA_NAMESPACE_END
