// A SIMT emulator for the host: the CUDA kernels of kernels/cuda/ compile with the host
// C++ compiler against this header (through kernels/cuda/simt.h) and run on the CPU, so
// that their logic is tested on machines without a GPU. It checks logic, not speed.
// Blocks of a grid run one after another; the threads of a block run as fibers (ucontext)
// on the calling OS thread, round-robin, each until it waits at a barrier or returns, so a
// run is deterministic. __syncthreads() waits for the whole block, and every warp shuffle
// for all 32 lanes of its warp; a wait that can never end (a __syncthreads() some threads
// skip, two __syncthreads() call sites met at once, a shuffle with a lane missing) aborts
// with a message. `__shared__` variables are static per OS thread: one copy, shared by
// the block that runs, and (as on a GPU) stale, not zeroed, when the next block starts.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace qrun::simt::emu {

inline constexpr int kWarpSize = 32;

// What a running fiber sees of its launch.
struct LaunchIds {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const LaunchIds& ids();

// Runs body(arg) once per thread of every block of the grid, as described above.
void run_grid(dim3 grid, dim3 block, void (*body)(void*), void* arg);

// Waits until every thread of the block has called it from the same call site.
void sync_threads(const char* file, int line);
// Waits until all 32 lanes of the caller's warp have called it.
void sync_warp();
// Lane `src_lane` of the caller's warp's value in the exchange that every lane of the warp
// joins: each lane publishes `bytes` of `value`, all lanes meet, each reads its source, all
// lanes meet again (so the slots can be reused).
void warp_exchange(const void* value, int src_lane, void* out, size_t bytes, unsigned mask);
int lane_id();
// Records that the calling thread has called wait_for_prior_kernels() (simt.h); a thread
// whose kernel returns without it aborts the run.
void note_prior_kernels_waited();

}  // namespace qrun::simt::emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define threadIdx (::qrun::simt::emu::ids().thread_idx)
#define blockIdx (::qrun::simt::emu::ids().block_idx)
#define blockDim (::qrun::simt::emu::ids().block_dim)
#define gridDim (::qrun::simt::emu::ids().grid_dim)
#define warpSize 32
#define __syncthreads() ::qrun::simt::emu::sync_threads(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  ::qrun::simt::emu::sync_warp();
}

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  const int lane = ::qrun::simt::emu::lane_id();
  const int src = (lane / width) * width + (src_lane % width);
  T out;
  ::qrun::simt::emu::warp_exchange(&v, src, &out, sizeof(T), mask);
  return out;
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  const int lane = ::qrun::simt::emu::lane_id();
  int src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;  // out of the segment: the lane's own value
  T out;
  ::qrun::simt::emu::warp_exchange(&v, src, &out, sizeof(T), mask);
  return out;
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  const int lane = ::qrun::simt::emu::lane_id();
  int src = lane + static_cast<int>(delta);
  if (src / width != lane / width) src = lane;
  T out;
  ::qrun::simt::emu::warp_exchange(&v, src, &out, sizeof(T), mask);
  return out;
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  const int lane = ::qrun::simt::emu::lane_id();
  int src = lane - static_cast<int>(delta);
  if (src < 0 || src / width != lane / width) src = lane;
  T out;
  ::qrun::simt::emu::warp_exchange(&v, src, &out, sizeof(T), mask);
  return out;
}

// Atomics, fences and uncached loads: one OS thread runs a grid's blocks one after another,
// and a block's threads as fibers that switch only at barriers and shuffles, so a plain
// read-modify-write is atomic and every thread sees every write at once.
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline void __threadfence() {}
template <class T>
T __ldcg(const T* p) {
  return *p;
}

// Four signed 8-bit products summed into c, as the GPU's dp4a instruction.
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k));
  }
  return c;
}
// Bytes of the pair (y:x) picked by s, as the GPU's prmt in its default mode: byte n of the
// result is byte (s >> 4n) & 7 of the 8 bytes x (0-3) then y (4-7); bit 3 of each
// selector nibble and bits 16-31 of s are ignored.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t bytes = static_cast<uint64_t>(y) << 32 | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned sel = (s >> (4 * n)) & 7u;
    r |= static_cast<unsigned>((bytes >> (8 * sel)) & 0xFFu) << (8 * n);
  }
  return r;
}
// The GPU's float multiply and add rounded to nearest, which nvcc never fuses into an FMA:
// plain operations, in a library compiled with -ffp-contract=off (emu/CMakeLists.txt).
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
