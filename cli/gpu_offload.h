// -ngl/--n-gpu-layers: which backend runs the model, and the GPU memory plan printed and
// checked before anything is put on the device.
#pragma once

#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/backend.h"

namespace qrun::cli {

// Declares -ngl/--n-gpu-layers (N or "all") on `cmd`, bound to `value`.
void add_gpu_layers_flag(CLI::App* cmd, std::string& value);

// Whether -ngl asks for the GPU (anything but 0).
bool wants_gpu(const std::string& ngl);

// The CUDA backend for `model` when -ngl asks for the GPU, else null (-ngl 0, the CPU).
// Before it is made, the memory plan (weights, KV cache, scratch against the device's free
// memory) goes to stderr when `log`; errors name the flag: qrun built without CUDA, no
// device, a layer count short of the whole model (layers split between CPU and GPU are not
// built yet), a KV cache type other than f16, or a plan that does not fit.
Result<std::unique_ptr<Backend>> make_gpu_backend(const std::string& ngl, const gguf::File& file,
                                                  const Model& model, const KvCache& kv, bool log);

// One line for `qrun info`: the GPU -ngl all would use and the kernels it would run on this
// file's matrices (MMVQ for decode, cuBLAS F16 GEMM for prefill), or why there is none: no
// CUDA build, no device, or a tensor type the CUDA backend cannot multiply.
std::string describe_gpu(const gguf::File& file);

// For `qrun --version`: the CUDA devices present, or why none can be used.
std::string describe_gpu_devices();

}  // namespace qrun::cli
