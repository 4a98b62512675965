// RMS norm: one block of 1024 threads per row. Each thread sums the squares (each square
// rounded to float, as the reference) of a strided slice in double, four loads in flight
// at a time; the block sum is in double too, so the mean differs from the reference's
// sequential double sum only in the last bits of a double, invisible once rounded to
// float. The scale is 1 / sqrtf(mean + eps) as in the reference (exact under the emulator;
// correctly rounded sqrtf and division on the GPU too). A decode step normalizes one row,
// so the kernel is one block's latency: on an H200 the former 256 threads with one load in
// flight took 14.5 us for a row of 4096 (ncu), about a tenth of a layer.
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/q8_1.cuh"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread

__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double partial[kWarp];
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x) / kWarp ? partial[lane] : 0.0;
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// kAdd: x[i] + delta[i] is the row (written back to x_out), as an add launch would make
// it; kQuant: y is also quantized into q (n a multiple of 32: each warp's 32 consecutive
// elements are one block).
template <bool kAdd, bool kQuant>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* delta, float* x_out, const float* w, int64_t n,
                    float eps, float* y, BlockQ8_1* q) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  const float* dr = delta + (kAdd ? r * n : 0);
  float* sr = x_out + (kAdd ? r * n : 0);
  float* yr = y + r * n;
  BlockQ8_1* qr = q + (kQuant ? r * (n / kWarp) : 0);
  // Element i of the row: x's, or x's plus delta's, stored back (each thread reads back
  // only what it wrote itself, and reads delta before anyone writes y, which may alias it:
  // block_sum_f64 syncs the block in between).
  const auto load = [&](int64_t i) {
    if constexpr (kAdd) {
      const float v = xr[i] + dr[i];
      sr[i] = v;
      return v;
    } else {
      return xr[i];
    }
  };
  const auto row = [&](int64_t i) { return kAdd ? sr[i] : xr[i]; };
  double sum = 0.0;
  int64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
    float v[kUnroll];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) v[u] = load(i + u * kThreads);
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) sum += static_cast<double>(v[u] * v[u]);
  }
  for (; i < n; i += kThreads) {
    const float v = load(i);
    sum += static_cast<double>(v * v);
  }
  sum = block_sum_f64(sum);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  const auto store = [&](int64_t j, float v) {
    yr[j] = v;
    if constexpr (kQuant) quantize_q8_1_warp(v, qr + j / kWarp);
  };
  i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
    float v[kUnroll], g[kUnroll];
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = row(i + u * kThreads);
      g[u] = w[i + u * kThreads];
    }
    QRUN_UNROLL
    for (int u = 0; u < kUnroll; ++u) store(i + u * kThreads, (v[u] * scale) * g[u]);
  }
  for (; i < n; i += kThreads) store(i, (row(i) * scale) * w[i]);
}

// The same function for rows of up to kVecThreads * kMaxVecs * 4 floats at 16-byte aligned
// addresses (n a multiple of 4): 256 threads, each loading its 4-float vectors of x (and
// delta) and w at once and keeping them in registers, so the row costs one round trip to
// memory before the block sum instead of two (x, then w), and no re-read after it. Thread t
// sums its squares in the order of its elements, vector t, t + 256, ... (another order than
// rms_norm_kernel's, so a mean one double ulp apart at most).
constexpr int kVecThreads = 256;
constexpr int kMaxVecs = 8;  // rows up to 8192 floats

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(v, p, sizeof v);
#else
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
#endif
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(p, v, sizeof v);
#else
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
#endif
}

template <bool kAdd, bool kQuant>
__global__ void __launch_bounds__(kVecThreads)
    rms_norm_vec_kernel(const float* x, const float* delta, float* x_out, const float* w, int64_t n,
                        float eps, float* y, BlockQ8_1* q) {
  const int64_t r = blockIdx.x;
  const int64_t n4 = n / 4;
  float v[kMaxVecs][4] = {}, g[kMaxVecs][4] = {};
  double sum = 0.0;
  QRUN_UNROLL
  for (int u = 0; u < kMaxVecs; ++u) {
    const int64_t j = threadIdx.x + int64_t{u} * kVecThreads;
    if (j >= n4) continue;
    load4(x + r * n + 4 * j, v[u]);
    load4(w + 4 * j, g[u]);
    if constexpr (kAdd) {
      float d[4];
      load4(delta + r * n + 4 * j, d);
      for (int k = 0; k < 4; ++k) v[u][k] += d[k];
      store4(x_out + r * n + 4 * j, v[u]);
    }
  }
  QRUN_UNROLL
  for (int u = 0; u < kMaxVecs; ++u) {
    if (threadIdx.x + int64_t{u} * kVecThreads >= n4) continue;
    for (int k = 0; k < 4; ++k) sum += static_cast<double>(v[u][k] * v[u][k]);
  }
  sum = block_sum_f64(sum);  // (also orders every read of delta before y, which may alias it)
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  QRUN_UNROLL
  for (int u = 0; u < kMaxVecs; ++u) {
    const int64_t j = threadIdx.x + int64_t{u} * kVecThreads;
    // (every lane of a warp reaches the quantization while any of it has work: rows of
    // whole blocks give whole 8-lane groups)
    if (j - static_cast<int64_t>(threadIdx.x % kWarp) >= n4) break;
    float o[4];
    for (int k = 0; k < 4; ++k) o[k] = (v[u][k] * scale) * g[u][k];
    if (j < n4) store4(y + r * n + 4 * j, o);
    if constexpr (kQuant) quantize_q8_1_quad(o, j < n4, q + (r * n + 4 * j) / kWarp);
  }
}

// Whether rms_norm_vec_kernel takes rows of n at these addresses (unless QRUN_CUDA_NORM=v1
// asks for rms_norm_kernel everywhere, for A/B measurement).
bool vec_rows(int64_t n, std::initializer_list<const void*> rows) {
  static const bool v1 = [] {
    const char* env = std::getenv("QRUN_CUDA_NORM");
    return env != nullptr && std::strcmp(env, "v1") == 0;
  }();
  if (v1 || n % 4 != 0 || n > int64_t{4} * kVecThreads * kMaxVecs) return false;
  for (const void* p : rows) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

void check_rows(const char* op, int64_t n_rows, int64_t n, const BlockQ8_1* q) {
  QRUN_CHECK(n_rows >= 0 && n_rows <= 0x7fffffff && n > 0, "%s: %lld rows of %lld", op,
             static_cast<long long>(n_rows), static_cast<long long>(n));
  QRUN_CHECK(q == nullptr || n % kWarp == 0, "%s: rows of %lld cannot be quantized in blocks of 32",
             op, static_cast<long long>(n));
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y,
              Stream stream, BlockQ8_1* q) {
  check_rows("rms_norm", n_rows, n, q);
  if (n_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(n_rows));
  if (vec_rows(n, {x, w, y})) {
    if (q != nullptr) {
      launch(rms_norm_vec_kernel<false, true>, grid, dim3(kVecThreads), stream, x, x, nullptr, w, n,
             eps, y, q);
    } else {
      launch(rms_norm_vec_kernel<false, false>, grid, dim3(kVecThreads), stream, x, x, nullptr, w,
             n, eps, y, q);
    }
  } else if (q != nullptr) {
    launch(rms_norm_kernel<false, true>, grid, dim3(kThreads), stream, x, x, nullptr, w, n, eps, y,
           q);
  } else {
    launch(rms_norm_kernel<false, false>, grid, dim3(kThreads), stream, x, x, nullptr, w, n, eps, y,
           q);
  }
}

void add_rms_norm(float* x, const float* delta, const float* w, int64_t n_rows, int64_t n,
                  float eps, float* y, Stream stream, BlockQ8_1* q) {
  check_rows("add_rms_norm", n_rows, n, q);
  if (n_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(n_rows));
  if (vec_rows(n, {x, delta, w, y})) {
    if (q != nullptr) {
      launch(rms_norm_vec_kernel<true, true>, grid, dim3(kVecThreads), stream, x, delta, x, w, n,
             eps, y, q);
    } else {
      launch(rms_norm_vec_kernel<true, false>, grid, dim3(kVecThreads), stream, x, delta, x, w, n,
             eps, y, q);
    }
  } else if (q != nullptr) {
    launch(rms_norm_kernel<true, true>, grid, dim3(kThreads), stream, x, delta, x, w, n, eps, y, q);
  } else {
    launch(rms_norm_kernel<true, false>, grid, dim3(kThreads), stream, x, delta, x, w, n, eps, y,
           q);
  }
}

QRUN_CUDA_NAMESPACE_END
