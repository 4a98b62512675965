// What the CUDA build offers: the architectures compiled in and the devices present.
#pragma once

#include <cstddef>
#include <string>

namespace qrun::kernels::cuda {

// "sm_80 sm_89 sm_90" as compiled.
std::string compiled_architectures();
// Number of usable CUDA devices (0 when there is no driver or no GPU).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" for device i, or the runtime's error text.
std::string device_description(int device);
// Free and total memory of the current device in bytes, {0, 0} when it cannot be read.
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemory device_memory();
// The current device's memory bandwidth in GB/s, bytes read plus bytes written by a
// device-to-device copy of 1 GiB (best of 10 after a warm-up): the roofline that decoding
// is measured against. 0 when it cannot be measured.
double device_copy_gbps();

}  // namespace qrun::kernels::cuda
