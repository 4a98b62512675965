// open_session: file -> tokenizer -> model -> backend -> KV cache.
#include "cli/session.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "cli/demo_model.h"
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
  cmd->add_option("--cache-type", f.cache_type, "KV cache element type")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_flag("!--no-warmup", f.warmup,
                "Skip the warm-up pass at load (the first prompt pays for paging in the weights)");
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
  Result<std::unique_ptr<Model>> model = models::load_model(*file, model_options);
  if (!model.ok()) return model.error();
  const ModelHparams& hp = (*model)->hparams();

  Result<kernels::Isa> isa =
      kernels::resolve_isa(std::getenv("QRUN_FORCE_ISA"), kernels::detect_cpu_features());
  if (!isa.ok()) return isa.error();
  auto backend = std::make_unique<kernels::CpuBackend>(capped_threads(flags.threads, !log), *isa);
  QRUN_TRY((*model)->check_backend(*backend));

  int64_t n_ctx = flags.ctx_size;
  if (n_ctx <= 0)
    n_ctx = hp.n_ctx_train > 0 ? std::min(hp.n_ctx_train, kDefaultMaxCtx) : kDefaultMaxCtx;
  const DType cache_type = flags.cache_type == "f32" ? DType::kF32 : DType::kF16;
  Result<KvCache> kv = make_kv_cache(**model, n_ctx, cache_type);
  if (!kv.ok()) {  // too large for this machine: say which flag to lower
    return make_error(kv.error().code, format("--ctx-size %lld: %s", static_cast<long long>(n_ctx),
                                              kv.error().message.c_str()));
  }

  if (flags.warmup) {
    const int32_t token = std::max((*tokenizer)->bos(), 0);
    std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
    QRUN_TRY((*model)->forward(*backend, std::span<const int32_t>(&token, 1), 0, *kv, false,
                               logits.data()));
    kv->clear();
  }

  auto s =
      std::make_unique<Session>(Session{std::move(*file), "", std::move(*tokenizer),
                                        std::move(*model), std::move(backend), std::move(*kv)});
  s->model_name = flags.model.empty() ? kDemoModelName : flags.model;
  s->load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (log) {
    std::fprintf(
        stderr,
        "qrun: %s: %s, %lld layers, n_embd %lld, vocab %d; context %lld (%s cache, %s); %d "
        "threads, %s kernels\n",
        s->model_name.c_str(), hp.arch.c_str(), static_cast<long long>(hp.n_layer),
        static_cast<long long>(hp.n_embd), s->tokenizer->n_vocab(), static_cast<long long>(n_ctx),
        flags.cache_type.c_str(), kv_memory_summary(s->kv).c_str(),
        static_cast<kernels::CpuBackend&>(*s->backend).n_threads(), kernels::isa_name(*isa));
  }
  return s;
}

}  // namespace qrun::cli
