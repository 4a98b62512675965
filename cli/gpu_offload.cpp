// -ngl and the GPU memory plan (see gpu_offload.h).
#include "cli/gpu_offload.h"

#include <charconv>
#include <cstdio>
#include <set>
#include <vector>

#include "core/model_info.h"

#if defined(QRUN_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/ops.h"
#endif

namespace qrun::cli {

void add_gpu_layers_flag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--n-gpu-layers", value,
                  "Layers on the GPU (-ngl): 0 for the CPU; N for the last N layers (the rest "
                  "on the CPU); all, or more than the layer count, for the whole model")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            int64_t n = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (v == "all" || (ec == std::errc() && end == v.data() + v.size() && n >= 0)) {
              return {};
            }
            return "'" + v + "' is not a layer count (a number >= 0, or all)";
          },
          "N|all"));
}

namespace {

// Parsed -ngl: -1 for all.
int64_t gpu_layers(const std::string& ngl) {
  if (ngl == "all") return -1;
  int64_t n = 0;
  std::from_chars(ngl.data(), ngl.data() + ngl.size(), n);
  return n;
}

}  // namespace

bool wants_gpu(const std::string& ngl) {
  return gpu_layers(ngl) != 0;
}

std::vector<SplitBackend::Placement> layer_weights(const gguf::File& file, int64_t first,
                                                   int64_t end) {
  std::vector<SplitBackend::Placement> out;
  for (const gguf::TensorInfo& t : file.tensors()) {
    int64_t il = -1;
    if (t.name.rfind("blk.", 0) == 0) {
      const char* digits = t.name.data() + 4;
      const auto [next, ec] = std::from_chars(digits, t.name.data() + t.name.size(), il);
      if (ec != std::errc() || *next != '.') il = -1;
    }
    if (il >= first && il < end) out.push_back({t.data, t.n_bytes});
  }
  return out;
}

namespace {

#if defined(QRUN_HAVE_CUDA)
// Bytes the CUDA backend copies to the device: every tensor but an untied embedding table,
// which get_rows reads on the host; with layers split, only those layers' weights.
size_t device_weight_bytes(const gguf::File& file, std::span<const SplitBackend::Placement> split) {
  if (!split.empty()) {
    size_t bytes = 0;
    for (const SplitBackend::Placement& p : split) bytes += p.n_bytes;
    return bytes;
  }
  const bool tied = file.find_tensor("output.weight") == nullptr;
  size_t bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    bytes += t.n_bytes;
  }
  return bytes;
}

// The KV cache rows of layers first .. n_layer - 1.
size_t device_cache_bytes(KvCache& kv, int64_t first) {
  size_t bytes = 0;
  for (int64_t il = first; il < kv.n_layer(); ++il) {
    const KvLayerView layer = kv.layer(il);
    bytes += static_cast<size_t>(layer.n_rows) * (layer.k_row_bytes() + layer.v_row_bytes());
  }
  return bytes;
}

// The activations one forward chunk keeps on the device (the model's scratch), the largest
// op output that comes back (all rows of logits), the decode attention's partial results
// for a token at the end of the context (CudaBackend::attention launches as many tokens at
// once as fit that), the K and V rows prefill gathers from a paged cache (qrun serve) for a
// chunk at the end of the context, and room for the quantized activations, the prefill
// tiles and the staging of weights repacked at upload.
size_t device_scratch_bytes(const Model& model, int64_t n_ctx) {
  const ModelHparams& hp = model.hparams();
  const size_t attention =
      kernels::cuda::attention_scratch_floats(
          1, n_ctx - 1, AttentionParams{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f, 0}) +
      static_cast<size_t>(n_ctx * hp.n_head_kv * hp.head_dim);  // 2 x F16 per element
  const auto n = static_cast<size_t>(model.n_batch());
  const auto q = static_cast<size_t>(hp.n_head * hp.head_dim);
  const auto kv = static_cast<size_t>(hp.n_head_kv * hp.head_dim);
  const size_t floats = n * (2 * static_cast<size_t>(hp.n_embd) + 2 * q + 2 * kv +
                             2 * static_cast<size_t>(hp.n_ff) + static_cast<size_t>(hp.n_vocab));
  return (floats + attention) * sizeof(float) + (size_t{96} << 20) +
         kernels::cuda::CudaBackend::kRepackStagingBytes;
}
#endif

}  // namespace

Result<std::unique_ptr<Backend>> make_gpu_backend(const std::string& ngl, const gguf::File& file,
                                                  const Model& model, KvCache& kv, bool log,
                                                  const CpuBackendFactory& make_cpu) {
  const int64_t layers = gpu_layers(ngl);
  if (layers == 0) return std::unique_ptr<Backend>();
#if !defined(QRUN_HAVE_CUDA)
  (void)file, (void)model, (void)kv, (void)log, (void)make_cpu;
  return make_error(ErrorCode::kUsage,
                    format("-ngl %s: this qrun was built without CUDA (nvcc was not found at "
                           "build time); use -ngl 0",
                           ngl.c_str()));
#else
  const ModelHparams& hp = model.hparams();
  // As llama.cpp: -ngl N puts the last N layers on the GPU, and the output layer too once
  // N exceeds the layer count.
  const bool split = layers > 0 && layers <= hp.n_layer;
  const int64_t first_gpu_layer = split ? hp.n_layer - layers : 0;
  if (kernels::cuda::device_count() == 0) {
    return make_error(ErrorCode::kUsage,
                      format("-ngl %s: no CUDA device found; use -ngl 0", ngl.c_str()));
  }
  if (kv.k_type() != DType::kF16 || kv.v_type() != DType::kF16) {
    return make_error(
        ErrorCode::kUsage,
        format("-ngl %s: the CUDA backend keeps an f16 KV cache only, not %s; drop "
               "--cache-type/-ctk/-ctv",
               ngl.c_str(), dtype_name(kv.k_type() != DType::kF16 ? kv.k_type() : kv.v_type())));
  }
  const std::vector<SplitBackend::Placement> on_gpu =
      split ? layer_weights(file, first_gpu_layer, hp.n_layer)
            : std::vector<SplitBackend::Placement>();
  const size_t weights = device_weight_bytes(file, on_gpu);
  const size_t cache = device_cache_bytes(kv, first_gpu_layer);
  const size_t scratch = device_scratch_bytes(model, kv.n_ctx());
  const size_t total = weights + cache + scratch;
  const kernels::cuda::DeviceMemory mem = kernels::cuda::device_memory();
  const std::string device = kernels::cuda::device_description(0);
  const std::string what =
      split ? format("layers %lld-%lld of %lld", static_cast<long long>(first_gpu_layer),
                     static_cast<long long>(hp.n_layer - 1), static_cast<long long>(hp.n_layer))
            : std::string("the model");
  const std::string plan = format("weights %s + KV cache %s + scratch %s = %s",
                                  human_bytes(static_cast<double>(weights)).c_str(),
                                  human_bytes(static_cast<double>(cache)).c_str(),
                                  human_bytes(static_cast<double>(scratch)).c_str(),
                                  human_bytes(static_cast<double>(total)).c_str());
  if (total > mem.free) {
    return make_error(ErrorCode::kUsage,
                      format("-ngl %s: %s needs %s on %s but %s is free; lower -ngl, -c or -b, or "
                             "use -ngl 0",
                             ngl.c_str(), what.c_str(), plan.c_str(), device.c_str(),
                             human_bytes(static_cast<double>(mem.free)).c_str()));
  }
  if (log) {
    std::fprintf(stderr, "qrun: GPU plan for %s on %s: %s of %s free\n", what.c_str(),
                 device.c_str(), plan.c_str(), human_bytes(static_cast<double>(mem.free)).c_str());
  }
  std::unique_ptr<Backend> backend = std::make_unique<kernels::cuda::CudaBackend>();
  if (split) backend = std::make_unique<SplitBackend>(make_cpu(), std::move(backend), on_gpu);
  QRUN_TRY(model.check_backend(*backend));
  return backend;
#endif
}

std::string describe_gpu_devices() {
#if !defined(QRUN_HAVE_CUDA)
  return "none (CUDA not compiled in)";
#else
  const int n = kernels::cuda::device_count();
  if (n == 0) return "none found";
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += (i > 0 ? "; " : "") + std::to_string(i) + ": " + kernels::cuda::device_description(i);
  }
  return s;
#endif
}

std::string describe_gpu(const gguf::File& file) {
#if !defined(QRUN_HAVE_CUDA)
  (void)file;
  return "none: this qrun was built without CUDA";
#else
  if (kernels::cuda::device_count() == 0) {
    return "none found (CUDA build for " + kernels::cuda::compiled_architectures() + ")";
  }
  std::set<std::string> types;
  std::string missing;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.n_dims < 2 || t.name == "token_embd.weight") continue;  // norms; host lookups
    if (kernels::cuda::mmvq_supports(t.type) || kernels::cuda::gemm_supports(t.type)) {
      types.insert(dtype_name(t.type));
    } else if (missing.empty()) {
      missing = format("%s ('%s')", dtype_name(t.type), t.name.c_str());
    }
  }
  std::string list;
  for (const std::string& t : types) list += (list.empty() ? "" : ", ") + t;
  std::string s = kernels::cuda::device_description(0);
  if (!missing.empty()) return s + ": -ngl all cannot run this file: no CUDA kernel for " + missing;
  return s + ": -ngl all runs MMVQ (decode) and cuBLAS F16 GEMM (prefill) on " + list +
         " weights, split-K attention over an f16 KV cache";
#endif
}

}  // namespace qrun::cli
