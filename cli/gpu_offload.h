// -ngl/--n-gpu-layers: which backend runs the model, and the GPU memory plan printed and
// checked before anything is put on the device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/backend.h"
#include "ggml-like/split_backend.h"

namespace qrun::cli {

// Declares -ngl/--n-gpu-layers (N or "all") on `cmd`, bound to `value`.
void add_gpu_layers_flag(CLI::App* cmd, std::string& value);

// Whether -ngl asks for the GPU (anything but 0).
bool wants_gpu(const std::string& ngl);

// Makes the CPU backend, for the layers -ngl leaves on the CPU.
using CpuBackendFactory = std::function<std::unique_ptr<Backend>()>;

// The backend -ngl asks for, or null for -ngl 0 (the CPU alone): the CUDA backend for the
// whole model (-ngl all, or more than the layer count), or for the last N of its layers
// (-ngl N), with make_cpu's backend running the rest (a SplitBackend, as llama.cpp splits
// them). Before it is made, the memory plan (weights, KV cache, scratch against the
// device's free memory) goes to stderr when `log`; errors name the flag: qrun built without
// CUDA, no device, a KV cache type other than f16, or a plan that does not fit.
Result<std::unique_ptr<Backend>> make_gpu_backend(const std::string& ngl, const gguf::File& file,
                                                  const Model& model, KvCache& kv, bool log,
                                                  const CpuBackendFactory& make_cpu);

// The weights of layers first .. end - 1 ("blk.N." tensors), as a SplitBackend places them.
std::vector<SplitBackend::Placement> layer_weights(const gguf::File& file, int64_t first,
                                                   int64_t end);

// One line for `qrun info`: the GPU -ngl all would use and the kernels it would run on this
// file's matrices (MMVQ for decode, cuBLAS F16 GEMM for prefill), or why there is none: no
// CUDA build, no device, or a tensor type the CUDA backend cannot multiply.
std::string describe_gpu(const gguf::File& file);

// For `qrun --version`: the CUDA devices present, or why none can be used.
std::string describe_gpu_devices();

}  // namespace qrun::cli
