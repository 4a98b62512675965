// open_session: file -> tokenizer -> model -> backend -> KV cache.
#include "cli/session.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "cli/demo_model.h"
#include "cli/gpu_offload.h"
#include "cli/text_file.h"
#include "cli/threads.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"

namespace qrun::cli {

void add_model_flags(CLI::App* cmd, ModelFlags& f) {
  add_file_option(cmd, "-m,--model", f.model, "GGUF model file (default: the embedded demo model)");
  add_threads_option(cmd, f.threads, "CPU threads (default: one per physical core)");
  cmd->add_option("-c,--ctx-size", f.ctx_size,
                  "Context size in tokens (default: the model's, at most 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}));
  cmd->add_option("-b,--batch-size", f.batch_size, "Prompt tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_cache_type_flags(cmd, f);
  add_gpu_layers_flag(cmd, f.n_gpu_layers);
  cmd->add_flag("!--no-warmup", f.warmup,
                "Skip the warm-up pass at load (the first prompt pays for paging in the weights)");
}

namespace {

constexpr const char* kKvTypeNames[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};

// The check of a cache type flag: one line naming the valid values.
CLI::Validator kv_type_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        for (const char* name : kKvTypeNames) {
          if (value == name) return {};
        }
        return "'" + value + "' is not a KV cache type (use f32, f16, bf16, q8_0 or q4_0)";
      },
      "f32|f16|bf16|q8_0|q4_0");
}

DType kv_dtype(const std::string& name) {
  std::optional<DType> t = dtype_from_name(name);
  QRUN_CHECK(t.has_value() && is_kv_cache_type(*t), "KV cache type '%s'", name.c_str());
  return *t;
}

}  // namespace

void add_cache_type_flags(CLI::App* cmd, ModelFlags& f) {
  cmd->add_option("--cache-type", f.cache_type, "KV cache element type of K and V")
      ->capture_default_str()
      ->check(kv_type_validator());
  cmd->add_option("--cache-type-k", f.cache_type_k, "K cache type (-ctk; default: --cache-type)")
      ->check(kv_type_validator());
  cmd->add_option("--cache-type-v", f.cache_type_v, "V cache type (-ctv; default: --cache-type)")
      ->check(kv_type_validator());
}

KvTypes kv_types(const ModelFlags& f) {
  return KvTypes(kv_dtype(f.cache_type_k.empty() ? f.cache_type : f.cache_type_k),
                 kv_dtype(f.cache_type_v.empty() ? f.cache_type : f.cache_type_v));
}

std::string kv_types_text(const KvTypes& t) {
  if (t.k == t.v) return dtype_name(t.k);
  return format("K %s, V %s", dtype_name(t.k), dtype_name(t.v));
}

Result<KvCache> make_flagged_kv_cache(const Model& model, const ModelFlags& flags, int64_t n_ctx) {
  const KvTypes types = kv_types(flags);
  const int64_t head_dim = model.hparams().head_dim;
  // A quantized type whose blocks do not tile a head: name the flag that chose it.
  for (const auto& [type, own, flag] :
       {std::tuple{types.k, flags.cache_type_k, "--cache-type-k"},
        std::tuple{types.v, flags.cache_type_v, "--cache-type-v"}}) {
    const std::string problem = kv_head_dim_problem(type, head_dim);
    if (!problem.empty()) {
      return make_error(ErrorCode::kUsage, format("%s %s: %s", own.empty() ? "--cache-type" : flag,
                                                  dtype_name(type), problem.c_str()));
    }
  }
  Result<KvCache> kv = make_kv_cache(model, n_ctx, types);
  if (!kv.ok()) {  // too large for this machine: say which flag to lower
    return make_error(kv.error().code, format("--ctx-size %lld: %s", static_cast<long long>(n_ctx),
                                              kv.error().message.c_str()));
  }
  return kv;
}

Result<std::unique_ptr<Session>> open_session(const ModelFlags& flags, bool log) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<gguf::File> file = flags.model.empty() ? open_demo_model() : open_gguf("-m", flags.model);
  if (!file.ok()) return file.error();
  if (flags.model.empty() && log) {
    std::fprintf(stderr, "qrun: no -m given, using %s\n", kDemoModelName);
  }

  Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*file);
  if (!tokenizer.ok()) return tokenizer.error();
  if (log) {
    for (const std::string& w : (*tokenizer)->warnings())
      std::fprintf(stderr, "qrun: warning: %s\n", w.c_str());
  }

  ModelOptions model_options;
  model_options.n_batch = flags.batch_size;
  model_options.n_seq = flags.n_seq;
  Result<std::unique_ptr<Model>> model = models::load_model(*file, model_options);
  if (!model.ok()) return model.error();
  const ModelHparams& hp = (*model)->hparams();

  Result<kernels::Isa> isa =
      kernels::resolve_isa(std::getenv("QRUN_FORCE_ISA"), kernels::detect_cpu_features());
  if (!isa.ok()) return isa.error();
  int64_t n_ctx = flags.ctx_size;
  if (n_ctx <= 0)
    n_ctx = hp.n_ctx_train > 0 ? std::min(hp.n_ctx_train, kDefaultMaxCtx) : kDefaultMaxCtx;
  Result<KvCache> kv = make_flagged_kv_cache(**model, flags, n_ctx);
  if (!kv.ok()) return kv.error();

  const CpuBackendFactory make_cpu = [&]() -> std::unique_ptr<Backend> {
    return std::make_unique<kernels::CpuBackend>(capped_threads(flags.threads, !log), *isa);
  };
  Result<std::unique_ptr<Backend>> backend =
      make_gpu_backend(flags.n_gpu_layers, *file, **model, *kv, log, make_cpu);
  if (!backend.ok()) return backend.error();
  if (*backend == nullptr) {
    *backend = make_cpu();
    QRUN_TRY((*model)->check_backend(**backend));
  }

  if (flags.warmup) {
    const int32_t token = std::max((*tokenizer)->bos(), 0);
    std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
    (*model)->set_warmup(true);  // every expert of a mixture of experts, once
    const Result<void> warmed = (*model)->forward(**backend, std::span<const int32_t>(&token, 1), 0,
                                                  *kv, false, logits.data());
    (*model)->set_warmup(false);
    QRUN_TRY(warmed);
    kv->clear();
  }

  auto s =
      std::make_unique<Session>(Session{std::move(*file), "", std::move(*tokenizer),
                                        std::move(*model), std::move(*backend), std::move(*kv)});
  s->model_name = flags.model.empty() ? kDemoModelName : flags.model;
  s->load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (log) {
    const auto cpu_text = [&](const Backend& b) {
      const auto* cpu = dynamic_cast<const kernels::CpuBackend*>(&b);
      return cpu == nullptr
                 ? std::string("CUDA backend")
                 : format("%d threads, %s kernels", cpu->n_threads(), kernels::isa_name(*isa));
    };
    std::string compute = cpu_text(*s->backend);
    if (const auto* split = dynamic_cast<const SplitBackend*>(s->backend.get())) {
      compute = "CUDA backend for the last " + flags.n_gpu_layers + " layers, " +
                cpu_text(split->first()) + " for the rest";
    }
    std::fprintf(stderr,
                 "qrun: %s: %s, %lld layers, n_embd %lld, vocab %d; context %lld (%s cache, %s); "
                 "%s\n",
                 s->model_name.c_str(), hp.arch.c_str(), static_cast<long long>(hp.n_layer),
                 static_cast<long long>(hp.n_embd), s->tokenizer->n_vocab(),
                 static_cast<long long>(n_ctx), kv_types_text(kv_types(flags)).c_str(),
                 kv_memory_summary(s->kv).c_str(), compute.c_str());
  }
  return s;
}

}  // namespace qrun::cli
