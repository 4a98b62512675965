// `qrun perplexity -m MODEL -f TEXT`: the model's perplexity on a text (core/perplexity.h),
// with llama.cpp's method so the figures compare. Progress on stderr; the result on stdout.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/repl_input.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "core/perplexity.h"

namespace qrun::cli {
namespace {

struct PerplexityCliOptions {
  ModelFlags model;
  std::string file;
  int64_t chunks = 0;
  bool json = false;
  bool quiet = false;
};

constexpr int64_t kDefaultChunkTokens = 512;

Result<void> run_perplexity(PerplexityCliOptions o) {
  Result<std::string> text = read_text_file("-f", o.file);
  if (!text.ok()) return text.error();
  if (o.model.ctx_size <= 0) o.model.ctx_size = kDefaultChunkTokens;
  Result<std::unique_ptr<Session>> session = open_session(o.model, !o.quiet);
  if (!session.ok()) return session.error();
  Session& s = **session;

  const std::vector<int32_t> tokens =
      s.tokenizer->encode(*text, /*add_special=*/true, /*parse_special=*/false);
  PerplexityOptions po;
  po.n_ctx = s.kv.n_ctx();
  if (s.tokenizer->add_bos()) po.bos = s.tokenizer->bos();
  po.max_chunks = o.chunks;
  po.interrupt = &sigint_flag();
  if (!o.quiet) {
    std::fprintf(stderr, "qrun: %zu tokens, %lld chunks of %lld (the second half of each scored)\n",
                 tokens.size(), static_cast<long long>(tokens.size() / po.n_ctx),
                 static_cast<long long>(po.n_ctx));
    po.on_chunk = [](int64_t c, int64_t n, double ppl) {
      std::fprintf(stderr, "[%lld]%.4f%s", static_cast<long long>(c + 1), ppl,
                   c + 1 == n ? "\n" : ",");
    };
  }
  Result<PerplexityResult> r = [&] {
    const SigintGuard guard;  // Ctrl-C ends the run after the current chunk
    return evaluate_perplexity(*s.model, *s.backend, s.kv, tokens, po);
  }();
  if (!r.ok()) return r.error();
  if (r->interrupted && !o.quiet) std::fprintf(stderr, "\n");
  const double tok_per_s =
      r->seconds > 0 ? static_cast<double>(r->n_chunks * po.n_ctx) / r->seconds : 0;
  if (o.json) {
    const nlohmann::json j = {{"ppl", r->ppl},
                              {"ppl_stderr", r->ppl_stderr},
                              {"mean_nll", r->mean_nll},
                              {"n_chunks", r->n_chunks},
                              {"n_ctx", po.n_ctx},
                              {"n_scored", r->n_scored},
                              {"n_tokens", tokens.size()},
                              {"seconds", r->seconds},
                              {"tokens_per_second", tok_per_s},
                              {"interrupted", r->interrupted}};
    std::printf("%s\n", j.dump().c_str());
  } else if (r->n_scored > 0) {
    std::printf("PPL = %.4f +/- %.5f (%lld tokens scored in %lld chunks of %lld)\n", r->ppl,
                r->ppl_stderr, static_cast<long long>(r->n_scored),
                static_cast<long long>(r->n_chunks), static_cast<long long>(po.n_ctx));
  }
  if (!o.quiet) {
    std::fprintf(stderr, "qrun: %.2f s, %.1f tokens/s\n", r->seconds, tok_per_s);
  }
  if (r->interrupted) return make_error(ErrorCode::kInterrupted, "interrupted");
  return {};
}

}  // namespace

void register_perplexity(CLI::App& app, Action* selected) {
  auto o = std::make_shared<PerplexityCliOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Measure a model's perplexity on a text");
  add_model_flags(cmd, o->model);
  add_file_option(cmd, "-f,--file", o->file, "Text file ('-' reads stdin)")->required();
  cmd->add_option("--chunks", o->chunks, "Score at most this many chunks (default: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the PPL line");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress or timings on stderr");
  cmd->footer(
      "The text is cut into chunks of -c tokens (default 512); each starts with BOS and\n"
      "runs from an empty cache, and the second half of each is scored, as llama.cpp's\n"
      "perplexity tool does. Ctrl-C stops after the current chunk and prints the figures so\n"
      "far (exit 130).");
  cmd->callback([o, selected] { *selected = [o] { return run_perplexity(*o); }; });
}

}  // namespace qrun::cli
