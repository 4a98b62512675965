// Element-wise kernels: add, scale, softcap, SwiGLU and GELU-gated, one thread per element
// (grid-stride). Numerics: add and scale are exact. SwiGLU, softcap and GELU call expf and
// tanhf, which on the GPU may differ from glibc's by an ulp or two; under the emulator
// they are glibc's and the results equal the scalar reference bit for bit. GELU follows
// the reference (gate rounded to F16, GELU of it rounded to F16), so on the GPU a one-ulp
// tanhf difference can move the F16 result by one F16 ulp (2^-11 relative).
#include <bit>

#include "kernels/cuda/kv_rows.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/q8_1.cuh"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 256;

dim3 grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  wait_for_prior_kernels();
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(const float* x, int64_t n, float s, float* out) {
  wait_for_prior_kernels();
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = x[i] * s;
}

__global__ void softcap_kernel(const float* x, int64_t n, float cap, float* out) {
  wait_for_prior_kernels();
  const float inv = 1.0f / cap;
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = cap * tanhf(x[i] * inv);
}

// The gated activations, out[i] = act(gate[i]) * up[i]; with kQuant (n a multiple of 32,
// so every warp's 32 consecutive elements are a whole block, and every lane of a warp runs
// the same iterations) also quantized into q.
template <class Act, bool kQuant>
__global__ void gated_kernel(const float* gate, const float* up, int64_t n, float* out,
                             BlockQ8_1* q) {
  wait_for_prior_kernels();
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = Act::apply(gate[i]) * up[i];
    out[i] = v;
    if constexpr (kQuant) quantize_q8_1_warp(v, q + i / kWarp);
  }
}

struct Silu {
  __device__ static float apply(float g) { return g / (1.0f + expf(-g)); }
};

// GELU, tanh approximation, of the F16 value nearest g, rounded to F16: llama.cpp's table.
__device__ __forceinline__ float gelu_f16(float g) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float x = f16_to_f32(f32_to_f16(g));
  return f16_to_f32(
      f32_to_f16(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)))));
}

struct Gelu {
  __device__ static float apply(float g) {
    if (g <= -10.0f) return 0.0f;
    if (g < 10.0f || g != g) return gelu_f16(g);
    return g;  // GELU(x) = x to float precision for x >= 10
  }
};

template <class Act>
void gated(const float* gate, const float* up, int64_t n, float* out, Stream stream, BlockQ8_1* q) {
  if (n <= 0) return;
  if (q == nullptr) {
    launch(gated_kernel<Act, false>, grid_for(n), dim3(kThreads), stream, gate, up, n, out, q);
    return;
  }
  QRUN_CHECK(n % kWarp == 0, "gated activation: %lld elements cannot be quantized in blocks of 32",
             static_cast<long long>(n));
  launch(gated_kernel<Act, true>, grid_for(n), dim3(kThreads), stream, gate, up, n, out, q);
}

// Rows t of k and v (row_elems floats each) to the rows of positions pos + t in the F16
// caches k_dst and v_dst: one launch for both halves of the cache.
__global__ void store_kv_f16_kernel(const float* k, const float* v, int64_t n_tokens,
                                    int64_t row_elems, int64_t pos, KvRowMap rows, uint16_t* k_dst,
                                    uint16_t* v_dst) {
  wait_for_prior_kernels();
  const int64_t n = n_tokens * row_elems;
  for (int64_t i = first_index(); i < 2 * n; i += grid_stride()) {
    const bool is_v = i >= n;
    const int64_t j = is_v ? i - n : i;
    const int64_t t = j / row_elems;
    uint16_t* dst = is_v ? v_dst : k_dst;
    dst[kv_storage_row(rows, pos + t) * row_elems + j % row_elems] = f32_to_f16(is_v ? v[j] : k[j]);
  }
}

}  // namespace

KvRowMap kv_row_map(const KvLayerView& cache) {
  KvRowMap m;
  m.n_rows = cache.n_rows;
  if (cache.paged()) {
    QRUN_CHECK(std::has_single_bit(static_cast<uint64_t>(cache.block_rows)) &&
                   cache.n_rows % cache.block_rows == 0,
               "cuda kv: blocks of %lld rows for a view of %lld",
               static_cast<long long>(cache.block_rows), static_cast<long long>(cache.n_rows));
    m.table = cache.block_table;
    m.block_shift = std::countr_zero(static_cast<uint64_t>(cache.block_rows));
  }
  return m;
}

void store_kv_f16(const float* k, const float* v, int64_t n_tokens, int64_t row_elems, int64_t pos,
                  const KvRowMap& rows, uint16_t* k_dst, uint16_t* v_dst, Stream stream) {
  const int64_t n = 2 * n_tokens * row_elems;
  if (n > 0) {
    launch(store_kv_f16_kernel, grid_for(n), dim3(kThreads), stream, k, v, n_tokens, row_elems, pos,
           rows, k_dst, v_dst);
  }
}

void add(const float* a, const float* b, int64_t n, float* out, Stream stream) {
  if (n > 0) launch(add_kernel, grid_for(n), dim3(kThreads), stream, a, b, n, out);
}

void scale(const float* x, int64_t n, float s, float* out, Stream stream) {
  if (n > 0) launch(scale_kernel, grid_for(n), dim3(kThreads), stream, x, n, s, out);
}

void softcap(const float* x, int64_t n, float cap, float* out, Stream stream) {
  if (n > 0) launch(softcap_kernel, grid_for(n), dim3(kThreads), stream, x, n, cap, out);
}

void swiglu(const float* gate, const float* up, int64_t n, float* out, Stream stream,
            BlockQ8_1* q) {
  gated<Silu>(gate, up, n, out, stream, q);
}

void geglu(const float* gate, const float* up, int64_t n, float* out, Stream stream, BlockQ8_1* q) {
  gated<Gelu>(gate, up, n, out, stream, q);
}

QRUN_CUDA_NAMESPACE_END
