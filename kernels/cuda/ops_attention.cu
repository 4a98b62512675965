// Decode attention over an F16 KV cache, split-K ("flash decoding"), for fewer than
// kPrefillMinTokens tokens and for decode rows (more tokens go to ops_attention_prefill.cu):
// the positions a token attends are cut into splits of attention_split(); one block of 4
// warps per (head, split, token) runs an online softmax over its split (each warp over every
// 4th position, each lane over every 32nd dimension), merges its warps, and writes the
// split's (max, sum, unscaled output) to scratch; the last split block of a (head, token) to
// finish (a counter per pair, counted with an atomic after a fence) merges the splits, so a
// decode step's attention is one launch however many splits it has (a second kernel merges
// them when no counters are given). A token's splits are those it has alone; the batch's
// further ones are empty for it (a partial of l = 0, which the merge skips, and a merge of one
// split writes what the split's own output would), so each token's output has the bits it
// has alone. Numerics: q.k and the output are summed in float (q unrounded); the CPU
// reference instead follows llama.cpp's CPU flash attention, which rounds q and its
// accumulator to F16, so the two agree to about F16 precision while this kernel is closer
// to exact (tests/cuda_emu_attention_test.cpp).
#include <cmath>
#include <cstdlib>

#include "kernels/cuda/kv_rows.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/q8_1.cuh"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kWarps = 4;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256
constexpr float kNegInf = -INFINITY;

struct Geometry {
  int64_t n_head;
  int64_t group;  // query heads per KV head
  int64_t head_dim;
  int64_t row_elems;  // n_head_kv * head_dim
  KvRowMap rows;      // where a position's row is (a ring when shorter than the context)
  int64_t pos0;
  int64_t window;  // 0: whole context
  int64_t n_splits;
  int64_t split;  // positions per split (attention_split())
  float scale;    // AttentionParams::score_scale()
  float softcap;  // 0: none
};

// The K and V elements lane owns (dimensions lane + 32 i) of position p, as floats; 0 past
// head_dim.
__device__ __forceinline__ void load_kv_row(const uint16_t* k, const uint16_t* v, const Geometry& g,
                                            int64_t p, int64_t kv_offset, int lane, float* kd,
                                            float* vd) {
  const int64_t row = kv_storage_row(g.rows, p) * g.row_elems + kv_offset;
  QRUN_UNROLL
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int64_t d = lane + kWarp * i;
    const bool in = d < g.head_dim;
    kd[i] = in ? f16_to_f32(k[row + d]) : 0.0f;
    vd[i] = in ? f16_to_f32(v[row + d]) : 0.0f;
  }
}

// Partial result of one split: [m, l, acc[head_dim]].
__device__ __forceinline__ float* partial_of(float* scratch, const Geometry& g, int64_t t,
                                             int64_t h, int64_t s) {
  return scratch + ((t * g.n_head + h) * g.n_splits + s) * (g.head_dim + 2);
}

// Output element e = v, and with q (head_dim a multiple of 32, so each warp holds whole
// blocks of 32 consecutive elements; every lane of the warp calls this) its block too.
__device__ __forceinline__ void store_output(float* out, BlockQ8_1* q, int64_t e, float v) {
  out[e] = v;
  if (q != nullptr) quantize_q8_1_warp(v, q + e / kWarp);
}

// The output of token t, head h from its splits' partial results (each split's weight
// exp(m_s - m), in split order), by every thread of a block. The partials are read past L1
// (__ldcg): other blocks wrote them during this launch when the last split block merges.
__device__ __forceinline__ void merge_splits(const Geometry& g, const float* scratch, int64_t t,
                                             int64_t h, float* out, BlockQ8_1* q) {
  const float* first = scratch + ((t * g.n_head + h) * g.n_splits) * (g.head_dim + 2);
  const int64_t stride = g.head_dim + 2;
  float m = kNegInf;
  for (int64_t s = 0; s < g.n_splits; ++s) m = fmaxf(m, __ldcg(first + s * stride));
  float l = 0.0f;
  for (int64_t s = 0; s < g.n_splits; ++s) {
    const float ls = __ldcg(first + s * stride + 1);
    if (ls > 0.0f) l += ls * expf(__ldcg(first + s * stride) - m);
  }
  const float inv = 1.0f / l;
  const int64_t o = (t * g.n_head + h) * g.head_dim;
  for (int64_t d = threadIdx.x; d < g.head_dim; d += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < g.n_splits; ++s) {
      const float ls = __ldcg(first + s * stride + 1);
      if (ls > 0.0f) {
        a += __ldcg(first + s * stride + 2 + d) * expf(__ldcg(first + s * stride) - m);
      }
    }
    store_output(out, q, o + d, a * inv);
  }
}

// direct_out: one split, whose block writes the output itself. Else each block writes its
// partial; with counters (one per (token, head), zero, and left zero), the last block of a
// (token, head) then merges them into out.
__global__ void __launch_bounds__(kWarps* kWarp)
    attention_split_kernel(const float* q, const uint16_t* k, const uint16_t* v, Geometry g,
                           float* scratch, float* direct_out, BlockQ8_1* direct_q,
                           unsigned* counters, float* out, BlockQ8_1* out_q) {
  wait_for_prior_kernels();
  __shared__ float warp_m[kWarps];
  __shared__ float warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kWarp * kMaxDimsPerLane];
  const int64_t h = blockIdx.x;
  const int64_t s = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  // Lane owns dimensions lane + 32 i for i < dims; the last round may leave lanes idle
  // (their terms are 0), so any head_dim up to 256 works.
  const int dims = static_cast<int>((g.head_dim + kWarp - 1) / kWarp);

  const int64_t hi = g.pos0 + t;  // last position attended
  const int64_t lo = g.window > 0 && hi - g.window + 1 > 0 ? hi - g.window + 1 : 0;
  const int64_t begin = lo + s * g.split;
  const int64_t end = begin + g.split < hi + 1 ? begin + g.split : hi + 1;
  const float* qh = q + (t * g.n_head + h) * g.head_dim;
  const int64_t kv_offset = (h / g.group) * g.head_dim;

  // Registers only: every loop over a lane's dimensions is unrolled to kMaxDimsPerLane and
  // guarded, so the arrays are never indexed at run time.
  float qr[kMaxDimsPerLane];
  float acc[kMaxDimsPerLane];
  QRUN_UNROLL
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int64_t d = lane + kWarp * i;
    qr[i] = i < dims && d < g.head_dim ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = kNegInf;
  float l = 0.0f;
  // The next position's K and V are loaded before the current one's arithmetic, so a
  // warp keeps a row in flight while it waits on the shuffles and expf (the loop was
  // bound by the load latency of one row after another).
  float kd[kMaxDimsPerLane], vd[kMaxDimsPerLane];
  if (begin + warp < end) load_kv_row(k, v, g, begin + warp, kv_offset, lane, kd, vd);
  for (int64_t p = begin + warp; p < end; p += kWarps) {
    float kc[kMaxDimsPerLane], vc[kMaxDimsPerLane];
    QRUN_UNROLL
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      kc[i] = kd[i];
      vc[i] = vd[i];
    }
    if (p + kWarps < end) load_kv_row(k, v, g, p + kWarps, kv_offset, lane, kd, vd);
    float dot = 0.0f;
    QRUN_UNROLL
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (i < dims && lane + kWarp * i < g.head_dim) dot += qr[i] * kc[i];
    }
    const float score = kq_logit(warp_sum(dot), g.scale, g.softcap);
    if (score > m) {
      const float ms = expf(m - score);  // 0 on the first position (m = -inf)
      m = score;
      QRUN_UNROLL
      for (int i = 0; i < kMaxDimsPerLane; ++i) acc[i] *= ms;
      l *= ms;
    }
    const float vs = expf(score - m);
    QRUN_UNROLL
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (i < dims && lane + kWarp * i < g.head_dim) acc[i] += vs * vc[i];
    }
    l += vs;
  }

  // Merge the warps: rescale each to the block's max (a warp with no position has l = 0).
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  QRUN_UNROLL
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    if (i < dims) warp_acc[warp][lane + kWarp * i] = acc[i];  // idle lanes: 0
  }
  __syncthreads();
  float block_m = kNegInf;
  for (int w = 0; w < kWarps; ++w) block_m = fmaxf(block_m, warp_m[w]);
  float factor[kWarps];
  float block_l = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = warp_l[w] > 0.0f ? expf(warp_m[w] - block_m) : 0.0f;
    block_l += warp_l[w] * factor[w];
  }
  if (direct_out != nullptr) {  // one split: the output itself, as the merge would write it
    const float inv = 1.0f / block_l;
    const int64_t first = (t * g.n_head + h) * g.head_dim;
    for (int64_t d = threadIdx.x; d < g.head_dim; d += blockDim.x) {
      float a = 0.0f;
      for (int w = 0; w < kWarps; ++w) a += warp_acc[w][d] * factor[w];
      store_output(direct_out, direct_q, first + d, a * inv);
    }
    return;
  }
  float* partial = partial_of(scratch, g, t, h, s);
  if (threadIdx.x == 0) {
    partial[0] = block_m;
    partial[1] = block_l;
  }
  for (int64_t d = threadIdx.x; d < g.head_dim; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kWarps; ++w) a += warp_acc[w][d] * factor[w];
    partial[2 + d] = a;
  }
  if (counters == nullptr) return;
  __shared__ bool last;
  __threadfence();  // this thread's partial before the count that says it is there
  __syncthreads();
  unsigned* counter = counters + t * g.n_head + h;
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(g.n_splits - 1);
  }
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0) *counter = 0;  // for the next launch (none reads it in this one)
  merge_splits(g, scratch, t, h, out, out_q);
}

__global__ void __launch_bounds__(kWarps* kWarp)
    attention_merge_kernel(Geometry g, const float* scratch, float* out, BlockQ8_1* q) {
  wait_for_prior_kernels();
  merge_splits(g, scratch, blockIdx.y, blockIdx.x, out, q);
}

int64_t splits_for(int64_t pos0, int64_t n_tokens, int64_t window) {
  const int64_t longest = window > 0 && window < pos0 + n_tokens ? window : pos0 + n_tokens;
  return (longest + attention_split() - 1) / attention_split();
}

}  // namespace

int64_t attention_split() {
  static const int64_t split = [] {
    const char* env = std::getenv("QRUN_CUDA_ATTN_SPLIT");
    if (env == nullptr || *env == '\0') return kDefaultSplit;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    QRUN_CHECK(*end == '\0' && v >= 1 && v <= 65536,
               "QRUN_CUDA_ATTN_SPLIT=%s: not a split size in 1 .. 65536 positions", env);
    return static_cast<int64_t>(v);
  }();
  return split;
}

size_t attention_scratch_floats(int64_t n_tokens, int64_t pos0, const AttentionParams& params,
                                bool paged) {
  if (n_tokens >= kPrefillMinTokens) {
    return attention_prefill_scratch_floats(n_tokens, pos0, params,
                                            prefill_chunk_tokens(n_tokens, pos0, params), paged);
  }
  return static_cast<size_t>(n_tokens * params.n_head * splits_for(pos0, n_tokens, params.window) *
                             (params.head_dim + 2));
}

void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
               const AttentionParams& params, float* scratch, float* out, Stream stream,
               BlockQ8_1* out_q, unsigned* counters, bool split_k) {
  split_k = split_k || n_tokens < kPrefillMinTokens;
  QRUN_CHECK(out_q == nullptr || (split_k && params.head_dim % kWarp == 0),
             "cuda attention: a quantized output for %lld tokens of head_dim %lld",
             static_cast<long long>(n_tokens), static_cast<long long>(params.head_dim));
  if (!split_k) {
    attention_prefill(q, n_tokens, pos0, cache, params,
                      prefill_chunk_tokens(n_tokens, pos0, params), scratch, out, stream);
    return;
  }
  QRUN_CHECK(cache.k_type == DType::kF16 && cache.v_type == DType::kF16,
             "cuda attention: %s K and %s V cache (only f16)", dtype_name(cache.k_type),
             dtype_name(cache.v_type));
  QRUN_CHECK(params.head_dim > 0 && params.head_dim <= kWarp * kMaxDimsPerLane &&
                 params.head_dim == cache.head_dim && params.n_head_kv == cache.n_head_kv &&
                 params.n_head_kv > 0 && params.n_head % params.n_head_kv == 0,
             "cuda attention: head_dim %lld (at most 256), %lld heads, %lld "
             "KV heads",
             static_cast<long long>(params.head_dim), static_cast<long long>(params.n_head),
             static_cast<long long>(params.n_head_kv));
  if (n_tokens == 0) return;
  Geometry g{};
  g.n_head = params.n_head;
  g.group = params.n_head / params.n_head_kv;
  g.head_dim = params.head_dim;
  g.row_elems = cache.row_elems();
  g.rows = kv_row_map(cache);
  g.pos0 = pos0;
  g.window = params.window;
  g.n_splits = splits_for(pos0, n_tokens, params.window);
  g.split = attention_split();
  g.scale = params.score_scale();
  g.softcap = params.softcap;
  const dim3 split_grid(static_cast<unsigned>(g.n_head), static_cast<unsigned>(g.n_splits),
                        static_cast<unsigned>(n_tokens));
  // With one split (up to attention_split() positions) the split kernel writes the output and the
  // merge is skipped: one launch fewer per layer in short-context decoding.
  const bool one_split = g.n_splits == 1;
  launch(attention_split_kernel, split_grid, dim3(kWarps * kWarp), stream, q,
         static_cast<const uint16_t*>(cache.k), static_cast<const uint16_t*>(cache.v), g, scratch,
         one_split ? out : nullptr, one_split ? out_q : nullptr, one_split ? nullptr : counters,
         out, out_q);
  if (one_split || counters != nullptr) return;
  launch(attention_merge_kernel,
         dim3(static_cast<unsigned>(g.n_head), static_cast<unsigned>(n_tokens)),
         dim3(kWarps * kWarp), stream, g, static_cast<const float*>(scratch), out, out_q);
}

QRUN_CUDA_NAMESPACE_END
