// RMS norm: one block of 1024 threads per row. Each thread sums the squares (each square
// rounded to float, as the reference) of a strided slice in double, four loads in flight
// at a time; the block sum is in double too, so the mean differs from the reference's
// sequential double sum only in the last bits of a double, invisible once rounded to
// float. The scale is 1 / sqrtf(mean + eps) as in the reference (exact under the emulator;
// correctly rounded sqrtf and division on the GPU too). A decode step normalizes one row,
// so the kernel is one block's latency: on an H200 the former 256 threads with one load in
// flight took 14.5 us for a row of 4096 (ncu), about a tenth of a layer.
// Rows of up to 8192 (rms_norm_regs_kernel) keep each thread's elements and weights in
// registers, the weights loaded with the row before the block's sum, so the kernel waits
// on memory once instead of three times (the row, its reduction, then the row again and
// the weights); longer rows stream twice (rms_norm_kernel). The same sums in the same
// order either way: the same bits. QRUN_CUDA_NORM=v1 runs the streaming kernel on every
// row (A/B measurement).
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/q8_1.cuh"
#include "kernels/cuda/simt.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread
// The longest row the register kernels hold, 8 elements a thread.
constexpr int64_t kMaxRegisterRow = 8 * kThreads;

__device__ __forceinline__ double block_sum_f64(double v) {
  return segment_sum_f64(v, kThreads / kWarp);
}

// Block blockIdx.x's row of x, delta, x_out, y and q (those a kernel without kAdd or
// kQuant does not use stay at the arrays' starts).
struct NormRow {
  const float* x;
  const float* delta;
  float* x_out;
  float* y;
  BlockQ8_1* q;
};
template <bool kAdd, bool kQuant>
__device__ __forceinline__ NormRow row_of(const float* x, const float* delta, float* x_out,
                                          float* y, BlockQ8_1* q, int64_t n) {
  const int64_t r = blockIdx.x;
  return NormRow{x + r * n, delta + (kAdd ? r * n : 0), x_out + (kAdd ? r * n : 0), y + r * n,
                 q + (kQuant ? r * (n / kWarp) : 0)};
}

// kAdd: x[i] + delta[i] is the row (written back to x_out), as an add launch would make
// it; kQuant: y is also quantized into q (n a multiple of 32: each warp's 32 consecutive
// elements are one block).
template <bool kAdd, bool kQuant>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* delta, float* x_out, const float* w, int64_t n,
                    float eps, float* y, BlockQ8_1* q) {
  wait_for_prior_kernels();
  const auto [xr, dr, sr, yr, qr] = row_of<kAdd, kQuant>(x, delta, x_out, y, q, n);
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

// 1 / sqrt(mean of squares + eps) of a row of n, of which this thread holds the elements
// threadIdx.x + u * kThreads (u < kPer; those below n count) in v, summed as
// rms_norm_kernel sums them.
template <int kPer>
__device__ __forceinline__ float regs_rms_scale(const float (&v)[kPer], int64_t n, float eps) {
  double sum = 0.0;
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
    if (i < n) sum += static_cast<double>(v[u] * v[u]);
  }
  sum = block_sum_f64(sum);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / sqrtf(mean + eps);
}

// As rms_norm_kernel for rows of n <= kPer * kThreads, thread j holding elements
// j + u * kThreads (u < kPer, the order in which rms_norm_kernel adds them) in registers.
template <bool kAdd, bool kQuant, int kPer>
__global__ void __launch_bounds__(kThreads)
    rms_norm_regs_kernel(const float* x, const float* delta, float* x_out, const float* w,
                         int64_t n, float eps, float* y, BlockQ8_1* q) {
  wait_for_prior_kernels();
  const auto [xr, dr, sr, yr, qr] = row_of<kAdd, kQuant>(x, delta, x_out, y, q, n);
  float v[kPer], g[kPer];
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
    v[u] = 0.0f;
    g[u] = 0.0f;
    if (i < n) {
      v[u] = kAdd ? xr[i] + dr[i] : xr[i];
      g[u] = w[i];
    }
  }
  // (delta is read before anyone writes y, which may alias it: block_sum_f64 syncs.)
  const float scale = regs_rms_scale(v, n, eps);
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
    if (i >= n) break;  // whole warps where kQuant (n a multiple of 32)
    if constexpr (kAdd) sr[i] = v[u];
    const float out = (v[u] * scale) * g[u];
    yr[i] = out;
    if constexpr (kQuant) quantize_q8_1_warp(out, qr + i / kWarp);
  }
}

// rms_norm_regs_kernel<false, false, kPer> on delta with w_delta, then
// rms_norm_regs_kernel<true, kQuant, kPer> on x and that normed delta: the same sums in
// the same order, so the same bits as the two launches. Every input is loaded before the
// first sum, so the kernel waits on memory once.
template <bool kQuant, int kPer>
__global__ void __launch_bounds__(kThreads)
    norm_add_rms_norm_kernel(float* x, float* delta, const float* w_delta, const float* w,
                             int64_t n, float eps, float* y, BlockQ8_1* q) {
  wait_for_prior_kernels();
  const int64_t r = blockIdx.x;
  float* xr = x + r * n;
  float* dr = delta + r * n;
  float* yr = y + r * n;
  BlockQ8_1* qr = q + (kQuant ? r * (n / kWarp) : 0);
  float d[kPer], gd[kPer], v[kPer], g[kPer];
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
    d[u] = gd[u] = v[u] = g[u] = 0.0f;
    if (i < n) {
      d[u] = dr[i];
      gd[u] = w_delta[i];
      v[u] = xr[i];
      g[u] = w[i];
    }
  }
  const float scale_d = regs_rms_scale(d, n, eps);
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    d[u] = (d[u] * scale_d) * gd[u];
    v[u] = v[u] + d[u];
  }
  const float scale = regs_rms_scale(v, n, eps);
  QRUN_UNROLL
  for (int u = 0; u < kPer; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kThreads;
    if (i >= n) break;  // whole warps where kQuant (n a multiple of 32)
    dr[i] = d[u];
    xr[i] = v[u];
    const float out = (v[u] * scale) * g[u];
    yr[i] = out;
    if constexpr (kQuant) quantize_q8_1_warp(out, qr + i / kWarp);
  }
}

// QRUN_CUDA_NORM, read once: whether rows that fit run rms_norm_regs_kernel.
bool registers_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("QRUN_CUDA_NORM");
    return env == nullptr || std::strcmp(env, "v1") != 0;
  }();
  return enabled;
}

// f(std::integral_constant<int, kPer>{}) for the fewest elements a thread, 1, 2, 4 or 8,
// that hold a row of n <= kMaxRegisterRow.
template <class F>
void with_norm_width(int64_t n, F&& f) {
  if (n <= kThreads) return f(std::integral_constant<int, 1>{});
  if (n <= 2 * kThreads) return f(std::integral_constant<int, 2>{});
  if (n <= 4 * kThreads) return f(std::integral_constant<int, 4>{});
  f(std::integral_constant<int, 8>{});
}

// rms_norm_kernel<kAdd, kQuant>, or the register kernel for rows that fit.
template <bool kAdd, bool kQuant>
void launch_norm(const float* x, const float* delta, float* x_out, const float* w, int64_t n_rows,
                 int64_t n, float eps, float* y, BlockQ8_1* q, Stream stream) {
  const dim3 grid(static_cast<unsigned>(n_rows)), block(kThreads);
  if (!registers_enabled() || n > kMaxRegisterRow) {
    launch(rms_norm_kernel<kAdd, kQuant>, grid, block, stream, x, delta, x_out, w, n, eps, y, q);
    return;
  }
  with_norm_width(n, [&](auto per) {
    launch(rms_norm_regs_kernel<kAdd, kQuant, decltype(per)::value>, grid, block, stream, x, delta,
           x_out, w, n, eps, y, q);
  });
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
  if (q != nullptr) return launch_norm<false, true>(x, x, nullptr, w, n_rows, n, eps, y, q, stream);
  launch_norm<false, false>(x, x, nullptr, w, n_rows, n, eps, y, q, stream);
}

void add_rms_norm(float* x, const float* delta, const float* w, int64_t n_rows, int64_t n,
                  float eps, float* y, Stream stream, BlockQ8_1* q) {
  check_rows("add_rms_norm", n_rows, n, q);
  if (n_rows == 0) return;
  if (q != nullptr) return launch_norm<true, true>(x, delta, x, w, n_rows, n, eps, y, q, stream);
  launch_norm<true, false>(x, delta, x, w, n_rows, n, eps, y, q, stream);
}

bool norm_add_rms_norm_fits(int64_t n) {
  return registers_enabled() && n <= kMaxRegisterRow;
}

void norm_add_rms_norm(float* x, float* delta, const float* w_delta, const float* w, int64_t n_rows,
                       int64_t n, float eps, float* y, Stream stream, BlockQ8_1* q) {
  check_rows("norm_add_rms_norm", n_rows, n, q);
  QRUN_CHECK(norm_add_rms_norm_fits(n), "norm_add_rms_norm: rows of %lld",
             static_cast<long long>(n));
  if (n_rows == 0) return;
  with_norm_width(n, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    const dim3 grid(static_cast<unsigned>(n_rows)), block(kThreads);
    if (q != nullptr) {
      launch(norm_add_rms_norm_kernel<true, kPer>, grid, block, stream, x, delta, w_delta, w, n,
             eps, y, q);
    } else {
      launch(norm_add_rms_norm_kernel<false, kPer>, grid, block, stream, x, delta, w_delta, w, n,
             eps, y, q);
    }
  });
}

QRUN_CUDA_NAMESPACE_END
