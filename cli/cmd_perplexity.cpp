// `qrun perplexity -m MODEL -f TEXT`: the model's perplexity on a text (core/perplexity.h),
// with llama.cpp's method so the figures compare. With --kl-divergence-base FILE it also
// writes the run's log-probabilities to FILE, and with --kl-divergence as well it reads them
// back instead and compares this run with them (core/kl_divergence.h), both in llama.cpp's
// file format. Progress on stderr; the result on stdout.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/kld_report.h"
#include "cli/repl_input.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "core/kl_divergence.h"
#include "core/kld_base_file.h"
#include "core/perplexity.h"

namespace qrun::cli {
namespace {

struct PerplexityCliOptions {
  ModelFlags model;
  std::string file;
  int64_t chunks = 0;
  std::string kld_base;
  bool kld = false;
  bool json = false;
  bool quiet = false;
};

constexpr int64_t kDefaultChunkTokens = 512;

// Scores each chunk's logits against the base file's rows for it.
struct KldScorer {
  KldBaseReader base;
  KldAccumulator acc;

  Result<void> add_chunk(std::span<const int32_t> chunk, std::span<const float> logits) {
    Result<std::span<const uint16_t>> rows = base.read_chunk();
    if (!rows.ok()) return rows.error();
    const int64_t n_ctx = base.header().n_ctx;
    const int64_t n_vocab = base.header().n_vocab;
    const int64_t words = kld_row_words(n_vocab);
    for (int64_t r = 0; r < kld_scored_per_chunk(n_ctx); ++r) {
      acc.add(score_token(
          logits.subspan(static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab)),
          rows->subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)),
          chunk[static_cast<size_t>(n_ctx / 2 + r + 1)]));
    }
    return {};
  }
};

Result<void> check_flags(const PerplexityCliOptions& o) {
  if (o.kld && o.kld_base.empty()) {
    return make_error(ErrorCode::kUsage,
                      "--kl-divergence needs --kl-divergence-base FILE (the base run's file)");
  }
  if (!o.kld && o.file.empty()) {
    return make_error(ErrorCode::kUsage,
                      "-f is required (only --kl-divergence takes its tokens from the base file)");
  }
  return {};
}

Result<void> run_perplexity(PerplexityCliOptions o) {
  QRUN_TRY(check_flags(o));
  std::optional<KldScorer> kld;
  if (o.kld) {
    Result<KldBaseReader> base = KldBaseReader::open(o.kld_base);
    if (!base.ok()) return base.error();
    kld.emplace(KldScorer{std::move(base).value(), {}});
    // The chunks are the base file's; a larger context only leaves room unused.
    const int64_t n_ctx = kld->base.header().n_ctx;
    if (o.model.ctx_size <= 0) o.model.ctx_size = n_ctx;
    if (o.model.ctx_size < n_ctx) {
      return make_error(
          ErrorCode::kUsage,
          format("%s: chunks of %lld tokens need -c %lld or more (not %lld)", o.kld_base.c_str(),
                 static_cast<long long>(n_ctx), static_cast<long long>(n_ctx),
                 static_cast<long long>(o.model.ctx_size)));
    }
  }
  std::string text;
  if (!o.file.empty()) {
    Result<std::string> read = read_text_file("-f", o.file);
    if (!read.ok()) return read.error();
    text = std::move(read).value();
  }
  if (o.model.ctx_size <= 0) o.model.ctx_size = kDefaultChunkTokens;
  Result<std::unique_ptr<Session>> session = open_session(o.model, !o.quiet);
  if (!session.ok()) return session.error();
  Session& s = **session;
  const int64_t n_vocab = s.model->hparams().n_vocab;

  std::vector<int32_t> tokens;
  if (!o.file.empty()) {
    tokens = s.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  }
  PerplexityOptions po;
  po.n_ctx = s.kv.n_ctx();
  if (kld) {
    const KldBaseHeader& h = kld->base.header();
    if (h.n_vocab != n_vocab) {
      return make_error(ErrorCode::kUsage,
                        format("%s: written for a vocabulary of %lld tokens, the model has %lld",
                               o.kld_base.c_str(), static_cast<long long>(h.n_vocab),
                               static_cast<long long>(n_vocab)));
    }
    if (!o.file.empty()) QRUN_TRY(check_kld_tokens(o.kld_base, h, kld->base.tokens(), tokens));
    tokens = kld->base.tokens();
    po.n_ctx = h.n_ctx;
  }
  if (s.tokenizer->add_bos()) po.bos = s.tokenizer->bos();
  po.max_chunks = o.chunks;
  po.interrupt = &sigint_flag();

  std::optional<KldBaseWriter> writer;
  const int64_t n_chunks =
      perplexity_chunk_count(static_cast<int64_t>(tokens.size()), po.n_ctx, o.chunks);
  if (!o.kld_base.empty() && !kld && n_chunks > 0) {
    Result<KldBaseWriter> w = KldBaseWriter::create(
        o.kld_base, po.n_ctx, n_vocab,
        std::span<const int32_t>(tokens).first(static_cast<size_t>(n_chunks * po.n_ctx)));
    if (!w.ok()) return w.error();
    writer.emplace(std::move(w).value());
    po.on_scored_logits = [&](int64_t, std::span<const int32_t>, std::span<const float> logits) {
      return writer->append_chunk(logits);
    };
  } else if (kld) {
    po.on_scored_logits = [&](int64_t, std::span<const int32_t> chunk,
                              std::span<const float> logits) {
      return kld->add_chunk(chunk, logits);
    };
  }
  if (!o.quiet) {
    std::fprintf(stderr, "qrun: %zu tokens, %lld chunks of %lld (the second half of each scored)\n",
                 tokens.size(), static_cast<long long>(n_chunks), static_cast<long long>(po.n_ctx));
    if (kld) {
      print_kld_progress_header(stderr);
      po.on_chunk = [&](int64_t c, int64_t, double) {
        print_kld_progress(stderr, c, kld->acc.summary());
      };
    } else {
      po.on_chunk = [](int64_t c, int64_t n, double ppl) {
        std::fprintf(stderr, "[%lld]%.4f%s", static_cast<long long>(c + 1), ppl,
                     c + 1 == n ? "\n" : ",");
      };
    }
  }
  Result<PerplexityResult> r = [&] {
    const SigintGuard guard;  // Ctrl-C ends the run after the current chunk
    return evaluate_perplexity(*s.model, *s.backend, s.kv, tokens, po);
  }();
  if (writer) {
    // A base file that misses chunks would be rejected later: keep none rather than that
    // (dropping the writer removes its temporary; an earlier file at the path stays whole).
    if (!r.ok() || r->interrupted) {
      writer.reset();
      if (!o.quiet) std::fprintf(stderr, "\nqrun: %s not written\n", o.kld_base.c_str());
    } else {
      QRUN_TRY(writer->finish());
    }
  }
  if (!r.ok()) return r.error();
  if (r->interrupted && !o.quiet) std::fprintf(stderr, "\n");
  const double tok_per_s =
      r->seconds > 0 ? static_cast<double>(r->n_chunks * po.n_ctx) / r->seconds : 0;
  if (o.json) {
    nlohmann::json j = {{"ppl", r->ppl},
                        {"ppl_stderr", r->ppl_stderr},
                        {"mean_nll", r->mean_nll},
                        {"n_chunks", r->n_chunks},
                        {"n_ctx", po.n_ctx},
                        {"n_scored", r->n_scored},
                        {"n_tokens", tokens.size()},
                        {"seconds", r->seconds},
                        {"tokens_per_second", tok_per_s},
                        {"interrupted", r->interrupted}};
    if (kld) j["kl_divergence"] = kld_summary_json(kld->acc.summary());
    std::printf("%s\n", j.dump().c_str());
  } else if (kld && kld->acc.count() > 0) {
    print_kld_summary(stdout, kld->acc.summary());
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
  add_file_option(cmd, "-f,--file", o->file,
                  "Text file ('-' reads stdin); optional with --kl-divergence");
  cmd->add_option("--chunks", o->chunks, "Score at most this many chunks (default: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kl-divergence-base", o->kld_base,
                  "Write this run's log-probabilities to FILE (llama.cpp's format), or with "
                  "--kl-divergence read them");
  cmd->add_flag("--kl-divergence", o->kld,
                "Compare this run with the --kl-divergence-base file: KL divergence, top-token "
                "agreement, Δp, perplexity ratio");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the PPL line");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress or timings on stderr");
  cmd->footer(
      "The text is cut into chunks of -c tokens (default 512); each starts with BOS and\n"
      "runs from an empty cache, and the second half of each is scored, as llama.cpp's\n"
      "perplexity tool does. Ctrl-C stops after the current chunk and prints the figures so\n"
      "far (exit 130).\n"
      "KL divergence, as llama.cpp's: first write a base file from the reference model\n"
      "  qrun perplexity -m base.gguf -f text.txt --kl-divergence-base base.kld\n"
      "(llama-perplexity --kl-divergence-base writes the same file), then compare another\n"
      "model or build on the same tokens (-f is then optional; if given, its tokens must\n"
      "match the file's):\n"
      "  qrun perplexity -m other.gguf --kl-divergence-base base.kld --kl-divergence");
  cmd->callback([o, selected] { *selected = [o] { return run_perplexity(*o); }; });
}

}  // namespace qrun::cli
