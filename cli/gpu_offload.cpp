// -ngl and the GPU memory plan (see gpu_offload.h).
#include "cli/gpu_offload.h"

#include <charconv>
#include <cstdio>
#include <set>

#include "core/model_info.h"

#if defined(QRUN_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_info.h"
#include "kernels/cuda/ops.h"
#endif

namespace qrun::cli {

void add_gpu_layers_flag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--n-gpu-layers", value,
                  "Layers on the GPU (-ngl): 0 for the CPU, all (or at least the layer count) "
                  "for the CUDA backend")
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

namespace {

#if defined(QRUN_HAVE_CUDA)
// Bytes the CUDA backend copies to the device: every tensor but an untied embedding table,
// which get_rows reads on the host.
size_t device_weight_bytes(const gguf::File& file) {
  const bool tied = file.find_tensor("output.weight") == nullptr;
  size_t bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    bytes += t.n_bytes;
  }
  return bytes;
}

// The activations one forward chunk keeps on the device (the model's scratch), the largest
// op output that comes back (all rows of logits), the decode attention's partial results
// for a token at the end of the context, and room for the quantized activations and the
// prefill tiles.
size_t device_scratch_bytes(const Model& model, int64_t n_ctx) {
  const ModelHparams& hp = model.hparams();
  const size_t attention = kernels::cuda::attention_scratch_floats(
      1, n_ctx - 1, AttentionParams{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f, 0});
  const auto n = static_cast<size_t>(model.n_batch());
  const auto q = static_cast<size_t>(hp.n_head * hp.head_dim);
  const auto kv = static_cast<size_t>(hp.n_head_kv * hp.head_dim);
  const size_t floats = n * (2 * static_cast<size_t>(hp.n_embd) + 2 * q + 2 * kv +
                             2 * static_cast<size_t>(hp.n_ff) + static_cast<size_t>(hp.n_vocab));
  return (floats + attention) * sizeof(float) + (size_t{96} << 20);
}
#endif

}  // namespace

Result<std::unique_ptr<Backend>> make_gpu_backend(const std::string& ngl, const gguf::File& file,
                                                  const Model& model, const KvCache& kv, bool log) {
  const int64_t layers = gpu_layers(ngl);
  if (layers == 0) return std::unique_ptr<Backend>();
#if !defined(QRUN_HAVE_CUDA)
  (void)file, (void)model, (void)kv, (void)log;
  return make_error(ErrorCode::kUsage,
                    format("-ngl %s: this qrun was built without CUDA (nvcc was not found at "
                           "build time); use -ngl 0",
                           ngl.c_str()));
#else
  const ModelHparams& hp = model.hparams();
  if (layers > 0 && layers < hp.n_layer) {
    return make_error(
        ErrorCode::kUsage,
        format("-ngl %s: splitting layers between CPU and GPU is not supported yet; the model has "
               "%lld layers: use -ngl all or -ngl 0",
               ngl.c_str(), static_cast<long long>(hp.n_layer)));
  }
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
  const size_t weights = device_weight_bytes(file);
  const size_t cache = kv.n_bytes();
  const size_t scratch = device_scratch_bytes(model, kv.n_ctx());
  const size_t total = weights + cache + scratch;
  const kernels::cuda::DeviceMemory mem = kernels::cuda::device_memory();
  const std::string device = kernels::cuda::device_description(0);
  const std::string plan = format("weights %s + KV cache %s + scratch %s = %s",
                                  human_bytes(static_cast<double>(weights)).c_str(),
                                  human_bytes(static_cast<double>(cache)).c_str(),
                                  human_bytes(static_cast<double>(scratch)).c_str(),
                                  human_bytes(static_cast<double>(total)).c_str());
  if (total > mem.free) {
    return make_error(ErrorCode::kUsage,
                      format("-ngl %s: the model needs %s on %s but %s is free; lower -c or -b, or "
                             "use -ngl 0",
                             ngl.c_str(), plan.c_str(), device.c_str(),
                             human_bytes(static_cast<double>(mem.free)).c_str()));
  }
  if (log) {
    std::fprintf(stderr, "qrun: GPU plan on %s: %s of %s free\n", device.c_str(), plan.c_str(),
                 human_bytes(static_cast<double>(mem.free)).c_str());
  }
  auto backend = std::make_unique<kernels::cuda::CudaBackend>();
  QRUN_TRY(model.check_backend(*backend));
  return std::unique_ptr<Backend>(std::move(backend));
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
