// Prefill attention as matrix products (tensor cores through cuBLAS): the tokens are cut
// into chunks; for a chunk and each KV head g, the group's query heads of every token are
// the rows of Q_g (rounded to F16, row t * group + j for query head g * group + j), the
// positions the chunk attends (lo .. the last token's position) the columns of
// S_g = Q_g K_g^T, summed in float by gemm_f16_batched over the KV heads. A kernel masks
// each row to its token's positions (causal, sliding window), takes exp(logit(s) - max) in
// float, rounds the weights to F16 into P and keeps 1 / (sum of the rounded weights);
// O_g = P_g V_g (float sums again), scaled by that and scattered to [token, head, dim].
// The ring cache (position p in row p % n_rows) splits both products into runs of
// consecutive rows; a paged cache's rows of the chunk are gathered into scratch first
// (F16 copies, so the same values in position order). Numerics, against exact softmax
// attention over the cache's F16 values: a score moves by the F16 rounding of q (2^-11
// relative per term) plus the float sums; each weight by its F16 rounding (2^-11
// relative, 2^-25 absolute below 2^-14), so the output by up to about 2^-10 max|v| more
// than the split-K kernel's (measured under the emulator: 3.5e-4 max|v| at most, against
// 8e-8 for split-K; tests/cuda_emu_attention_test).
// Q beyond F16's range (65504) would become inf: llama.cpp's flash attention rounds it too.
#include <cmath>

#include "kernels/cuda/kv_rows.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 128;
constexpr int64_t kMinChunk = 16;
constexpr size_t kScoreBytes = size_t{128} << 20;  // S (float) and P (F16) of one chunk
constexpr int64_t kAlignFloats = 64;               // 256 bytes, for each scratch region

int64_t round_up(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}

// Positions the widest chunk of `chunk` tokens attends: its last token's position + 1, or
// the window plus the chunk's other tokens.
int64_t max_positions(int64_t n_tokens, int64_t pos0, int64_t window, int64_t chunk) {
  const int64_t all = pos0 + n_tokens;
  return window > 0 && window + chunk - 1 < all ? window + chunk - 1 : all;
}

// The scratch, in floats from its start (each region 256-byte aligned): q of the chunk in
// F16 [n_head_kv][chunk * group][head_dim], S [n_head_kv][chunk * group][ld] in float, P
// in F16 with the same shape, 1 / l per row, O [n_head_kv][chunk * group][head_dim], and
// for a paged cache the chunk's K and V rows gathered, F16 [ld][row_elems] each.
struct Layout {
  int64_t q, s, p, inv_l, o, k, v, total;
  Layout(int64_t n_head, int64_t head_dim, int64_t chunk, int64_t ld, int64_t gathered_row_elems) {
    const int64_t rows = n_head * chunk;
    q = 0;
    s = q + round_up((rows * head_dim + 1) / 2, kAlignFloats);
    p = s + round_up(rows * ld, kAlignFloats);
    inv_l = p + round_up((rows * ld + 1) / 2, kAlignFloats);
    o = inv_l + round_up(rows, kAlignFloats);
    k = o + round_up(rows * head_dim, kAlignFloats);
    v = k + round_up((ld * gathered_row_elems + 1) / 2, kAlignFloats);
    total = v + round_up((ld * gathered_row_elems + 1) / 2, kAlignFloats);
  }
};

// One chunk of tokens: its first token is at position first_pos, and it attends positions
// lo .. lo + n_kv - 1, columns 0 .. n_kv - 1 of S and P (row stride ld).
struct Chunk {
  int64_t tokens;
  int64_t group;  // query heads per KV head
  int64_t n_head;
  int64_t head_dim;
  int64_t first_pos;
  int64_t lo;
  int64_t n_kv;
  int64_t ld;
  int64_t window;
  float scale;    // AttentionParams::score_scale()
  float softcap;  // 0: none
};

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
}

// Row r = t * group + j of KV head g holds query head g * group + j of token t: the flat
// index of (g, r, d) in [n_head_kv][tokens * group][head_dim] and of (t, h, d) in
// [tokens][n_head][head_dim] name the same value.
__device__ __forceinline__ int64_t token_major(const Chunk& c, int64_t i) {
  const int64_t d = i % c.head_dim;
  const int64_t row = i / c.head_dim;
  const int64_t rows_per_kv = c.tokens * c.group;
  const int64_t g = row / rows_per_kv;
  const int64_t t = (row % rows_per_kv) / c.group;
  const int64_t j = row % c.group;
  return (t * c.n_head + g * c.group + j) * c.head_dim + d;
}

__global__ void __launch_bounds__(kThreads) gather_q_kernel(const float* q, Chunk c, uint16_t* qh) {
  wait_for_prior_kernels();
  const int64_t n = c.tokens * c.n_head * c.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    qh[i] = f32_to_f16(q[token_major(c, i)]);
  }
}

// The rows of positions lo .. lo + n_kv - 1 of a paged cache, in that order, into k_out
// and v_out (rows of row_elems F16 values, copied two at a time: row_elems is even).
__global__ void __launch_bounds__(kThreads)
    gather_kv_kernel(const uint32_t* k, const uint32_t* v, KvRowMap rows, int64_t lo, int64_t n_kv,
                     int64_t row_elems, uint32_t* k_out, uint32_t* v_out) {
  wait_for_prior_kernels();
  const int64_t row_pairs = row_elems / 2;
  const int64_t n = n_kv * row_pairs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t from = kv_storage_row(rows, lo + i / row_pairs) * row_pairs + i % row_pairs;
    k_out[i] = k[from];
    v_out[i] = v[from];
  }
}

__global__ void __launch_bounds__(kThreads)
    scatter_out_kernel(const float* o, const float* inv_l, Chunk c, float* out) {
  wait_for_prior_kernels();
  const int64_t n = c.tokens * c.n_head * c.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[token_major(c, i)] = o[i] * inv_l[i / c.head_dim];
  }
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[kWarp];
  v = warp_max(v);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x) / kWarp ? partial[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// One block per row of S (KV head g, token t, query head j of the group): the token's
// weights exp(logit(s) - max) over the positions it attends (kq_logit), rounded to F16 (0
// elsewhere), and 1 / their sum (of the rounded values, so P and l agree).
__global__ void __launch_bounds__(kThreads)
    softmax_kernel(const float* s, Chunk c, uint16_t* p, float* inv_l) {
  wait_for_prior_kernels();
  const int64_t row = blockIdx.x;
  const int64_t t = (row % (c.tokens * c.group)) / c.group;
  const int64_t pos = c.first_pos + t;
  const int64_t lo_pos = c.window > 0 && pos - c.window + 1 > 0 ? pos - c.window + 1 : 0;
  const int64_t first = lo_pos - c.lo;  // columns first .. last are attended
  const int64_t last = pos - c.lo;
  const float* sr = s + row * c.ld;
  uint16_t* pr = p + row * c.ld;
  float m = -INFINITY;
  for (int64_t col = first + threadIdx.x; col <= last; col += blockDim.x) {
    m = fmaxf(m, kq_logit(sr[col], c.scale, c.softcap));
  }
  m = block_max(m);
  float l = 0.0f;
  for (int64_t col = threadIdx.x; col < c.n_kv; col += blockDim.x) {
    uint16_t w = 0;  // +0 in F16
    if (col >= first && col <= last) {
      w = f32_to_f16(expf(kq_logit(sr[col], c.scale, c.softcap) - m));
      l += f16_to_f32(w);
    }
    pr[col] = w;
  }
  l = block_sum(l);  // >= 1: the maximum's weight is exactly 1
  if (threadIdx.x == 0) inv_l[row] = 1.0f / l;
}

}  // namespace

int64_t prefill_chunk_tokens(int64_t n_tokens, int64_t pos0, const AttentionParams& params) {
  int64_t chunk = n_tokens > kMinChunk ? n_tokens : kMinChunk;
  auto bytes = [&](int64_t tokens) {
    const int64_t ld = round_up(max_positions(n_tokens, pos0, params.window, tokens), 8);
    return static_cast<size_t>(params.n_head * tokens * ld) * (sizeof(float) + sizeof(uint16_t));
  };
  while (chunk > kMinChunk && bytes(chunk) > kScoreBytes) {
    chunk = (chunk + 1) / 2 > kMinChunk ? (chunk + 1) / 2 : kMinChunk;
  }
  return chunk;
}

size_t attention_prefill_scratch_floats(int64_t n_tokens, int64_t pos0,
                                        const AttentionParams& params, int64_t chunk_tokens,
                                        bool paged) {
  const int64_t chunk = chunk_tokens < n_tokens ? chunk_tokens : n_tokens;
  const int64_t ld = round_up(max_positions(n_tokens, pos0, params.window, chunk), 8);
  const int64_t gathered = paged ? params.n_head_kv * params.head_dim : 0;
  return static_cast<size_t>(Layout(params.n_head, params.head_dim, chunk, ld, gathered).total);
}

void attention_prefill(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                       const AttentionParams& params, int64_t chunk_tokens, float* scratch,
                       float* out, Stream stream) {
  QRUN_CHECK(cache.k_type == DType::kF16 && cache.v_type == DType::kF16,
             "cuda attention_prefill: %s K and %s V cache (only f16)", dtype_name(cache.k_type),
             dtype_name(cache.v_type));
  QRUN_CHECK(params.head_dim > 0 && params.head_dim == cache.head_dim &&
                 params.n_head_kv == cache.n_head_kv && params.n_head_kv > 0 &&
                 params.n_head % params.n_head_kv == 0 && chunk_tokens > 0 && cache.n_rows > 0,
             "cuda attention_prefill: head_dim %lld, %lld heads, %lld KV heads, chunk %lld, "
             "%lld rows",
             static_cast<long long>(params.head_dim), static_cast<long long>(params.n_head),
             static_cast<long long>(params.n_head_kv), static_cast<long long>(chunk_tokens),
             static_cast<long long>(cache.n_rows));
  if (n_tokens == 0) return;
  const int64_t chunk = chunk_tokens < n_tokens ? chunk_tokens : n_tokens;
  const int64_t hd = params.head_dim;
  const int64_t row_elems = cache.row_elems();
  const bool paged = cache.paged();
  QRUN_CHECK(!paged || row_elems % 2 == 0, "cuda attention_prefill: paged rows of %lld elements",
             static_cast<long long>(row_elems));
  const Layout lay(params.n_head, hd, chunk,
                   round_up(max_positions(n_tokens, pos0, params.window, chunk), 8),
                   paged ? row_elems : 0);
  auto* qh = reinterpret_cast<uint16_t*>(scratch + lay.q);
  float* s = scratch + lay.s;
  auto* p = reinterpret_cast<uint16_t*>(scratch + lay.p);
  float* inv_l = scratch + lay.inv_l;
  float* o = scratch + lay.o;
  auto* k_gathered = reinterpret_cast<uint16_t*>(scratch + lay.k);
  auto* v_gathered = reinterpret_cast<uint16_t*>(scratch + lay.v);
  const KvRowMap map = kv_row_map(cache);

  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
    Chunk c{};
    c.tokens = chunk < n_tokens - t0 ? chunk : n_tokens - t0;
    c.group = params.n_head / params.n_head_kv;
    c.n_head = params.n_head;
    c.head_dim = hd;
    c.first_pos = pos0 + t0;
    c.window = params.window;
    c.lo = c.window > 0 && c.first_pos - c.window + 1 > 0 ? c.first_pos - c.window + 1 : 0;
    c.n_kv = c.first_pos + c.tokens - c.lo;
    c.ld = round_up(c.n_kv, 8);
    c.scale = params.score_scale();
    c.softcap = params.softcap;
    const int64_t rows = c.tokens * c.group;  // per KV head
    const int64_t n = c.tokens * c.n_head * hd;

    launch(gather_q_kernel, grid_for(n), dim3(kThreads), stream, q + t0 * c.n_head * hd, c, qh);
    // The chunk's positions: rows lo % n_rows on of a ring (wrapping), or gathered ones.
    const auto* k = static_cast<const uint16_t*>(cache.k);
    const auto* v = static_cast<const uint16_t*>(cache.v);
    int64_t ring_rows = cache.n_rows;
    int64_t first = c.lo;
    if (paged) {
      launch(gather_kv_kernel, grid_for(c.n_kv * row_elems / 2), dim3(kThreads), stream,
             static_cast<const uint32_t*>(cache.k), static_cast<const uint32_t*>(cache.v), map,
             c.lo, c.n_kv, row_elems, reinterpret_cast<uint32_t*>(k_gathered),
             reinterpret_cast<uint32_t*>(v_gathered));
      k = k_gathered;
      v = v_gathered;
      ring_rows = c.n_kv;
      first = 0;
    }
    // S_g[r][col] = q_g[r] . K[row of position lo + col][g], one product per run of rows.
    for (int64_t col = 0; col < c.n_kv;) {
      const int64_t row = (first + col) % ring_rows;
      const int64_t len = ring_rows - row < c.n_kv - col ? ring_rows - row : c.n_kv - col;
      gemm_f16_batched(len, rows, hd, k + row * row_elems, row_elems, hd, true, qh, hd, rows * hd,
                       s + col, c.ld, rows * c.ld, params.n_head_kv, 0.0f, stream);
      col += len;
    }
    launch(softmax_kernel, dim3(static_cast<unsigned>(rows * params.n_head_kv)), dim3(kThreads),
           stream, static_cast<const float*>(s), c, p, inv_l);
    // O_g[r][d] = sum_col P_g[r][col] V[row of position lo + col][g][d], summed over the runs.
    for (int64_t col = 0; col < c.n_kv;) {
      const int64_t row = (first + col) % ring_rows;
      const int64_t len = ring_rows - row < c.n_kv - col ? ring_rows - row : c.n_kv - col;
      gemm_f16_batched(hd, rows, len, v + row * row_elems, row_elems, hd, false, p + col, c.ld,
                       rows * c.ld, o, hd, rows * hd, params.n_head_kv, col == 0 ? 0.0f : 1.0f,
                       stream);
      col += len;
    }
    launch(scatter_out_kernel, grid_for(n), dim3(kThreads), stream, static_cast<const float*>(o),
           static_cast<const float*>(inv_l), c, out + t0 * c.n_head * hd);
  }
}

QRUN_CUDA_NAMESPACE_END
