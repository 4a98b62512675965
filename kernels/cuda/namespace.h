// The namespace of the CUDA kernels and their host calls. The same sources build twice:
// with nvcc for the GPU (inline namespace `device`) and with the host compiler under the
// SIMT emulator (inline namespace `emu`, QRUN_SIMT_EMU defined), so both can be linked
// into one binary without clashing.
#pragma once

#if defined(QRUN_SIMT_EMU)
#define QRUN_CUDA_NAMESPACE_BEGIN namespace qrun::kernels::cuda::inline emu {
#else
#define QRUN_CUDA_NAMESPACE_BEGIN namespace qrun::kernels::cuda::inline device {
#endif
#define QRUN_CUDA_NAMESPACE_END }
