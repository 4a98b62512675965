// Linked into the cuda_gpu_* tests (the cuda_emu_* sources built against the nvcc target):
// every test is skipped, with the reason, on a machine without a CUDA device, so a CUDA
// build passes on machines without a GPU and checks the kernels on the GPU where there is one.
#include <gtest/gtest.h>

#include "kernels/cuda/cuda_info.h"

namespace {

class CudaDeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (qrun::kernels::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

const ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new CudaDeviceEnvironment);

}  // namespace
