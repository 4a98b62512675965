// The portability layer every kernel of kernels/cuda/ is written against. Kernels use the
// CUDA vocabulary (__global__, __shared__, threadIdx, __syncthreads(), __shfl_xor_sync,
// __dp4a) and the helpers below; nvcc compiles them for the GPU, and the host compiler
// compiles the same source under the SIMT emulator (emu/simt_emu.h, QRUN_SIMT_EMU).
// Launches go through launch(), the one place that differs: <<<...>>> on the GPU, the
// emulator's grid runner on the host. Blocks must be whole warps (32 threads) wherever a
// kernel shuffles.
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>

#include "ggml-like/result.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/runtime.h"

#if defined(QRUN_SIMT_EMU)
#include <cstring>

#include "ggml-like/fp16.h"
#include "kernels/cuda/emu/simt_emu.h"
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

QRUN_CUDA_NAMESPACE_BEGIN

inline constexpr int kWarp = 32;

// Before a loop with a constant trip count whose arrays must stay in registers: nvcc's
// `#pragma unroll`; nothing under the emulator (the host compiler has its own heuristics).
#if defined(QRUN_SIMT_EMU)
#define QRUN_UNROLL
#else
#define QRUN_UNROLL _Pragma("unroll")
#endif

#if defined(QRUN_SIMT_EMU)

inline float f16_to_f32(uint16_t h) {
  return fp16_to_fp32(h);
}
inline uint16_t f32_to_f16(float f) {
  return fp32_to_fp16(f);
}

// Runs kernel(args...) on a grid of `grid` blocks of `block` threads; parameters are
// converted to the kernel's parameter types once and every thread gets its own copy.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, Stream stream, A&&... args) {
  note_kernel(stream);
  const std::tuple<P...> params(std::forward<A>(args)...);
  struct Call {
    void (*kernel)(P...);
    const std::tuple<P...>* params;
  } call{kernel, &params};
  simt::emu::run_grid(
      grid, block,
      [](void* c) {
        const Call& k = *static_cast<const Call*>(c);
        std::apply(k.kernel, *k.params);
      },
      &call);
}

#else

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// With programmatic_launch() (runtime.h), the kernel may start before the one queued
// ahead of it on the stream has finished; it waits for it in wait_for_prior_kernels().
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, Stream stream, A&&... args) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = static_cast<cudaStream_t>(stream.handle);
  config.attrs = &early;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  const cudaError_t err =
      cudaLaunchKernelEx(&config, kernel, static_cast<P>(std::forward<A>(args))...);
  QRUN_CHECK(err == cudaSuccess, "kernel launch: %s", cudaGetErrorString(err));
}

#endif

// Called once by every thread of every kernel, before any other memory access (the
// emulator checks that each thread calls it): lets the next kernel on the stream launch
// early (its blocks take the SMs this grid leaves free and run up to their own call), then
// waits until the kernels queued before this one have finished and their writes are
// visible. Above it a kernel may only compute from its parameters and read or prefetch
// weights (device memory that no kernel writes); reading an earlier kernel's output, or
// writing anything, there races with the kernels still running.
// A no-op before compute capability 9.0 and without programmatic_launch(), where kernels
// start only after the previous one has finished.
__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(QRUN_SIMT_EMU)
  simt::emu::note_prior_kernels_waited();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks for the 128-byte line holding p to be brought into L2 (weights that the kernel
// will read once wait_for_prior_kernels() returns). A no-op under the emulator.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(QRUN_SIMT_EMU)
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// A 32-bit little-endian load from an address that is only 2-byte aligned (the quant
// blocks of 18, 22, 34 and 210 bytes), as two 16-bit loads.
__device__ __forceinline__ int load_i32_a2(const void* p) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}
__device__ __forceinline__ int load_i32_a4(const void* p) {
  return *static_cast<const int*>(p);
}

// 16 bytes at p (16-byte aligned) into v[0..3], and v[0..3] to dst (16-byte aligned), each
// as one vector access on the GPU.
__device__ __forceinline__ void load_16b(const void* p, int* v) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(v, p, 16);
#else
  const int4 q = *static_cast<const int4*>(p);
  v[0] = q.x;
  v[1] = q.y;
  v[2] = q.z;
  v[3] = q.w;
#endif
}
__device__ __forceinline__ void store_16b(void* dst, const int* v) {
#if defined(QRUN_SIMT_EMU)
  std::memcpy(dst, v, 16);
#else
  *static_cast<int4*>(dst) = make_int4(v[0], v[1], v[2], v[3]);
#endif
}

// Sums over the 32 lanes of a warp (butterfly: every lane gets the total, in the same
// order on every lane, so all lanes hold the same bits).
__device__ __forceinline__ float warp_sum(float v) {
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ int warp_sum(int v) {
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int m = kWarp / 2; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// Sums v over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread
// gets the total. Uses 32 floats of shared memory and two __syncthreads().
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kWarp];
  v = warp_sum(v);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int n_warps = static_cast<int>(blockDim.x) / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < n_warps ? partial[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();  // partial may be reused by the caller's next block_sum
  return v;
}

// Sums v over each segment of `warps` consecutive warps of the block (a power of two, at
// most 32; blockDim.x / 32 sums the whole block), in double; every thread of a segment gets
// its segment's total. Each warp's butterfly, then one over the segment's warp sums: the
// same bits for a row whichever segment width holds it, as long as the warps past the row
// sum zeros. Uses 32 doubles of shared memory and two __syncthreads().
__device__ __forceinline__ double segment_sum_f64(double v, int warps) {
  __shared__ double partial[kWarp];
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[warp / warps * warps + lane] : 0.0;
  for (int m = kWarp / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  __syncthreads();  // partial may be reused by the caller's next sum
  return v;
}

QRUN_CUDA_NAMESPACE_END
