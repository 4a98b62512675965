// The SIMT emulator (kernels/cuda/emu) that the CUDA kernels' tests run on: launch
// geometry, __shared__ memory, __syncthreads(), warp shuffles, __dp4a and __byte_perm behave
// as on a GPU, and the waits a GPU would hang on (or leave undefined) abort with a message.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cuda/simt.h"

namespace qrun::kernels::cuda {
namespace {

__global__ void ids_kernel(int* out) {
  wait_for_prior_kernels();
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned n = blockDim.x * blockDim.y * blockDim.z;
  out[block * n + thread] = static_cast<int>(block * 1000 + thread);
}

TEST(CudaEmuSimt, EveryThreadOfEveryBlockRunsOnceWithItsIds) {
  const dim3 grid(3, 2, 2);
  const dim3 block(5, 3, 2);
  const int n = 12 * 30;
  DeviceArray<int> out(n);
  launch(ids_kernel, grid, block, Stream{}, out.data());
  const std::vector<int> got = out.download();
  for (int b = 0; b < 12; ++b) {
    for (int t = 0; t < 30; ++t) EXPECT_EQ(got[b * 30 + t], b * 1000 + t) << b << " " << t;
  }
}

// Reverses blockDim.x values through shared memory: needs the barrier between the writes
// and the reads, because thread i reads what thread n - 1 - i wrote.
__global__ void reverse_kernel(const int* in, int* out) {
  wait_for_prior_kernels();
  __shared__ int buf[256];
  const int i = static_cast<int>(threadIdx.x);
  const int n = static_cast<int>(blockDim.x);
  buf[i] = in[blockIdx.x * n + i];
  __syncthreads();
  out[blockIdx.x * n + i] = buf[n - 1 - i];
}

TEST(CudaEmuSimt, SharedMemoryAndSyncthreads) {
  for (int n : {1, 31, 32, 33, 256}) {
    std::vector<int> in(3 * n);
    std::iota(in.begin(), in.end(), 7);
    DeviceArray<int> din{std::span<const int>(in)};
    DeviceArray<int> dout(in.size());
    launch(reverse_kernel, dim3(3), dim3(n), Stream{}, din.data(), dout.data());
    const std::vector<int> got = dout.download();
    for (int b = 0; b < 3; ++b) {
      for (int i = 0; i < n; ++i) ASSERT_EQ(got[b * n + i], in[b * n + n - 1 - i]) << n;
    }
  }
}

__global__ void shuffle_kernel(int* out) {
  wait_for_prior_kernels();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int base = static_cast<int>(threadIdx.x) * 5;
  const int v = 100 * (static_cast<int>(threadIdx.x) / 32) + lane;
  out[base + 0] = __shfl_xor_sync(0xffffffffu, v, 5);
  out[base + 1] = __shfl_sync(0xffffffffu, v, 31 - lane);
  out[base + 2] = __shfl_down_sync(0xffffffffu, v, 3);
  out[base + 3] = __shfl_up_sync(0xffffffffu, v, 2, 16);
  out[base + 4] = warp_sum(v);
}

TEST(CudaEmuSimt, WarpShufflesReadTheLanesCudaDefines) {
  DeviceArray<int> out(64 * 5);
  launch(shuffle_kernel, dim3(1), dim3(64), Stream{}, out.data());
  const std::vector<int> got = out.download();
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32, lane = t % 32;
    auto value = [&](int l) { return 100 * warp + l; };
    EXPECT_EQ(got[t * 5 + 0], value(lane ^ 5));
    EXPECT_EQ(got[t * 5 + 1], value(31 - lane));
    EXPECT_EQ(got[t * 5 + 2], value(lane + 3 < 32 ? lane + 3 : lane));   // past the warp: own
    EXPECT_EQ(got[t * 5 + 3], value(lane % 16 >= 2 ? lane - 2 : lane));  // within 16 lanes
    EXPECT_EQ(got[t * 5 + 4], 32 * 100 * warp + 31 * 32 / 2);
  }
}

__global__ void block_sum_kernel(const float* in, float* out) {
  wait_for_prior_kernels();
  const float s = block_sum(in[threadIdx.x]);
  const float s2 = block_sum(2.0f * in[threadIdx.x]);  // partial[] reused safely
  if (threadIdx.x == 0) {
    out[0] = s;
    out[1] = s2;
  }
}

TEST(CudaEmuSimt, BlockSumOverSeveralWarps) {
  for (int n : {32, 96, 1024}) {
    std::vector<float> in(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 7) - 3.0f;  // sums exactly
    const float want = std::accumulate(in.begin(), in.end(), 0.0f);
    DeviceArray<float> din{std::span<const float>(in)};
    DeviceArray<float> dout(2);
    launch(block_sum_kernel, dim3(1), dim3(n), Stream{}, din.data(), dout.data());
    const std::vector<float> got = dout.download();
    EXPECT_EQ(got[0], want) << n;
    EXPECT_EQ(got[1], 2.0f * want) << n;
  }
}

TEST(CudaEmuSimt, Dp4aIsFourSignedByteProducts) {
  const int a = static_cast<int>(0x80FF7F01u);  // bytes 1, 127, -1, -128
  const int b = static_cast<int>(0x02FE8003u);  // bytes 3, -128, -2, 2
  EXPECT_EQ(__dp4a(a, b, 10), 10 + 1 * 3 + 127 * -128 + -1 * -2 + -128 * 2);
}

// prmt's default mode as CUDA documents __byte_perm: 3-bit byte selectors over (y:x), the
// fourth bit of each and the high half of the selector ignored.
TEST(CudaEmuSimt, BytePermPicksBytesByTheirLowThreeSelectorBits) {
  const unsigned x = 0x33221100u, y = 0x77665544u;
  EXPECT_EQ(__byte_perm(x, y, 0x3210u), x);
  EXPECT_EQ(__byte_perm(x, y, 0x7654u), y);
  EXPECT_EQ(__byte_perm(x, y, 0x0527u), 0x00552277u);
  EXPECT_EQ(__byte_perm(x, y, 0xBA98u), x);
  EXPECT_EQ(__byte_perm(x, y, 0xFFFF0527u), 0x00552277u);
}

__global__ void divergent_sync_kernel(int* out) {
  wait_for_prior_kernels();
  if (threadIdx.x < 16) {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void two_sync_sites_kernel(int* out) {
  wait_for_prior_kernels();
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle_kernel(int* out) {
  wait_for_prior_kernels();
  if (threadIdx.x < 31) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmuSimtDeathTest, WaitsThatCannotEndAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceArray<int> out(64);
  EXPECT_DEATH(launch(divergent_sync_kernel, dim3(1), dim3(64), Stream{}, out.data()), "deadlock");
  EXPECT_DEATH(launch(two_sync_sites_kernel, dim3(1), dim3(64), Stream{}, out.data()),
               "divergent __syncthreads");
  EXPECT_DEATH(launch(partial_warp_shuffle_kernel, dim3(1), dim3(32), Stream{}, out.data()),
               "deadlock");
}

// On the GPU a kernel may start before the one ahead of it has finished (runtime.h's
// programmatic_launch); one that touches memory without waiting races with it.
__global__ void no_wait_kernel(int* out) {
  if (threadIdx.x != 5) wait_for_prior_kernels();
  out[threadIdx.x] = 1;
}

TEST(CudaEmuSimtDeathTest, AThreadThatDoesNotWaitForPriorKernelsAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceArray<int> out(64);
  EXPECT_DEATH(launch(no_wait_kernel, dim3(2), dim3(64), Stream{}, out.data()),
               "wait_for_prior_kernels");
}

TEST(CudaEmuSimtDeathTest, LaunchesAGpuWouldRefuseAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceArray<int> out(64);
  EXPECT_DEATH(launch(ids_kernel, dim3(1, 65536), dim3(32), Stream{}, out.data()), "65535");
  EXPECT_DEATH(launch(ids_kernel, dim3(1), dim3(1025), Stream{}, out.data()), "block");
  EXPECT_DEATH(launch(ids_kernel, dim3(1), dim3(32, 32, 2), Stream{}, out.data()), "block");
}

TEST(CudaEmuSimt, AllocationsStartAsNaN) {
  DeviceArray<float> a(5);
  for (float v : a.download()) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace qrun::kernels::cuda
