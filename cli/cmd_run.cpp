// `qrun run`: one-shot generation for people and scripts. stdout carries only the
// generated text (or, with --json, one JSON object); logs and timings go to stderr.
// The prompt comes from -p, -f, or a piped stdin; with -p (or -f) and a piped stdin, the
// stdin text is context placed before the prompt. Sampling takes llama.cpp's flags
// (cli/sampling_flags.h); --stop strings are cut from the output. Ctrl-C exits 130.
// --prompt-cache FILE restores the KV state of a cached prompt prefix and saves the prompt's
// after prefill (core/prompt_cache.h). --context-shift with --keep N goes on past a full
// context, as llama.cpp does (core/context_shift.h).
#include <poll.h>
#include <unistd.h>

#include <sys/stat.h>
#include <chrono>
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/draft_flags.h"
#include "cli/gpu_offload.h"
#include "cli/repl_input.h"
#include "cli/sampling_flags.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "cli/timings_report.h"
#include "core/context_shift.h"
#include "core/generate.h"
#include "core/kv_host_sync.h"
#include "core/prompt_cache.h"
#include "core/sampling/sampling.h"
#include "core/stop_strings.h"

namespace qrun::cli {
namespace {

struct RunOptions {
  ModelFlags model;
  std::string prompt;
  bool prompt_given = false;  // -p was given, perhaps as "" (start from BOS alone)
  std::string prompt_file;
  int64_t n_predict = -1;
  SamplingFlags sampling;
  DraftFlags draft;
  bool echo = false;
  bool quiet = false;
  bool json = false;
  bool no_stdin = false;
  std::string prompt_cache;  // --prompt-cache FILE ("" for none)
  bool prompt_cache_ro = false;
  bool context_shift = false;
  int64_t keep = 0;  // --keep: prompt tokens a shift keeps (-1: all), BOS not counted
  bool keep_given = false;
};

// stdin is read only when it is a pipe or a regular file, never a terminal or a socket,
// so `qrun run` never waits for a person to type.
bool stdin_is_data() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISREG(st.st_mode);
}

// With a prompt on the command line, stdin is optional context: it is read only if data
// (or end of file) is there within this grace period, so an idle pipe inherited from a
// parent process never hangs a script.
constexpr int kStdinGraceMs = 1000;

bool stdin_ready(int timeout_ms) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  return poll(&p, 1, timeout_ms) > 0;
}

Result<std::string> assemble_prompt(const RunOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    if (o.prompt_given) return make_error(ErrorCode::kUsage, "give either -p or -f, not both");
    Result<std::string> text = read_text_file("-f", o.prompt_file);
    if (!text.ok()) return text.error();
    prompt = std::move(*text);
  }
  const bool have_flag_prompt = o.prompt_given || !o.prompt_file.empty();
  if (!o.no_stdin && stdin_is_data()) {
    if (!have_flag_prompt) {
      Result<std::string> text = read_text_stdin("stdin");
      if (text.ok() && text->empty())
        return make_error(ErrorCode::kUsage, "the prompt on stdin is empty");
      return text;
    }
    if (stdin_ready(kStdinGraceMs)) {
      Result<std::string> read = read_text_stdin("stdin");
      if (!read.ok()) return read.error();
      std::string context = std::move(*read);
      if (!context.empty() && context.back() != '\n') context += '\n';
      prompt = context + prompt;
    } else if (!o.quiet) {
      std::fprintf(stderr, "qrun: stdin is an open pipe with no data after %d ms; not reading it\n",
                   kStdinGraceMs);
    }
  }
  if (prompt.empty() && !o.prompt_given) {
    return make_error(ErrorCode::kUsage, "no prompt: give -p TEXT, -f FILE, or pipe text on stdin");
  }
  return prompt;
}

void print_timings(const GenerateResult& r) {
  const GenerateTimings& t = r.timings;
  const nlohmann::json j = timings_json(t);
  std::fprintf(stderr,
               "qrun: load %.0f ms | prompt %lld tokens in %.1f ms (%.1f tok/s) | generated %lld "
               "tokens in %.1f ms (%.1f tok/s) | first token after %.1f ms | stop: %s\n",
               t.load_ms, static_cast<long long>(t.n_prompt), t.prompt_ms,
               j["prompt_tok_s"].get<double>(), static_cast<long long>(t.n_gen), t.gen_ms,
               j["gen_tok_s"].get<double>(), t.ttft_ms, stop_reason_name(r.stop_reason));
  if (t.speculative)
    std::fprintf(stderr, "qrun: speculative: %s\n", speculative_summary(t).c_str());
}

struct PromptCacheUse {
  uint64_t fingerprint = 0;
  int64_t n_restored = 0;
  bool save = false;  // write the file after the prompt
  double ms = 0.0;    // fingerprint and file reading
};

// --prompt-cache: restores the longest cached prefix of `tokens` into the empty cache (at
// least one token is left to feed, for the first logits) and says what it did on stderr.
// The file is (re)written after the prompt unless --prompt-cache-ro is given or a sound file
// already covers the whole prompt.
PromptCacheUse restore_prompt_cache(const RunOptions& o, Session& s,
                                    std::span<const int32_t> tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  PromptCacheUse use;
  use.fingerprint = prompt_cache_fingerprint(s.file.header_bytes());
  const PromptCacheLoad pc =
      load_prompt_cache(o.prompt_cache, use.fingerprint, s.kv, tokens,
                        static_cast<int64_t>(tokens.size()) - 1, o.model.batch_size);
  if (pc.n_restored > 0) sync_kv_from_host(*s.backend, s.kv);  // (-ngl: onto the GPU)
  use.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  use.n_restored = pc.n_restored;
  use.save = !o.prompt_cache_ro &&
             (!pc.problem.empty() || pc.n_common < static_cast<int64_t>(tokens.size()));
  if (!o.quiet) {
    if (pc.found && !pc.problem.empty()) {
      std::fprintf(stderr, "qrun: warning: --prompt-cache %s; starting cold\n", pc.problem.c_str());
    } else if (!pc.found) {
      std::fprintf(stderr, "qrun: --prompt-cache %s does not exist yet%s\n", o.prompt_cache.c_str(),
                   use.save ? "; it will be written after the prompt" : "");
    } else {
      std::fprintf(stderr, "qrun: --prompt-cache %s: reusing %lld of %zu prompt tokens (%.1f ms)\n",
                   o.prompt_cache.c_str(), static_cast<long long>(pc.n_restored), tokens.size(),
                   use.ms);
    }
  }
  return use;
}

Result<void> run_generation(const RunOptions& o) {
  if (o.sampling.error) return *o.sampling.error;  // before any I/O
  if (o.prompt_cache_ro && o.prompt_cache.empty()) {
    return make_error(ErrorCode::kUsage, "--prompt-cache-ro needs --prompt-cache FILE");
  }
  if (o.keep_given && !o.context_shift) {
    return make_error(ErrorCode::kUsage, "--keep needs --context-shift");
  }
  if (o.context_shift && o.draft.enabled()) {
    return make_error(ErrorCode::kUsage,
                      "--context-shift does not work with speculative decoding "
                      "(-md/--model-draft, --lookup-ngram); drop one of them");
  }
  Result<std::string> prompt = assemble_prompt(o);
  if (!prompt.ok()) return prompt.error();
  Result<std::unique_ptr<Session>> session = open_session(o.model, !o.quiet);
  if (!session.ok()) return session.error();
  Session& s = **session;

  const std::vector<int32_t> tokens =
      s.tokenizer->encode(*prompt, /*add_special=*/true, /*parse_special=*/true);
  if (static_cast<int64_t>(tokens.size()) >= s.kv.n_ctx()) {
    return make_error(
        ErrorCode::kContextOverflow,
        format("the prompt is %zu tokens but the context holds %lld; raise -c/--ctx-size "
               "(the model was trained for %lld)",
               tokens.size(), static_cast<long long>(s.kv.n_ctx()),
               static_cast<long long>(s.model->hparams().n_ctx_train)));
  }

  int64_t n_keep = 0;
  if (o.context_shift) {
    const bool added_bos =
        s.tokenizer->add_bos() && !tokens.empty() && tokens.front() == s.tokenizer->bos();
    n_keep = resolve_keep(o.keep, static_cast<int64_t>(tokens.size()), added_bos);
    QRUN_TRY(check_context_shift(*s.model, s.kv, n_keep));
  }

  Result<SamplingParams> sp = resolve_sampling_params(o.sampling, *s.tokenizer);
  if (!sp.ok()) return sp.error();
  Sampler sampler = make_sampler(*sp);
  QRUN_TRY(attach_grammar(o.sampling, *s.tokenizer, s.grammar_vocab, sampler));
  if (!o.quiet) {
    std::fprintf(stderr, "qrun: sampler %s", sampler.describe().c_str());
    if (sp->temperature > 0) std::fprintf(stderr, ", seed %u", sp->seed);
    std::fprintf(stderr, "\n");
  }

  DraftSetup draft;
  if (o.draft.enabled()) {
    Result<DraftSetup> d = open_drafter(o.draft, o.model, s, *sp, !o.quiet);
    if (!d.ok()) return d.error();
    draft = std::move(*d);
  }

  // --prompt-cache: the prefix it restores is not fed again, but the sampler's penalties still
  // see it first, as in a cold run.
  PromptCacheUse cache;
  if (!o.prompt_cache.empty() && !tokens.empty()) {
    cache = restore_prompt_cache(o, s, tokens);
    for (int64_t i = 0; i < cache.n_restored; ++i)
      sampler.accept_prompt(tokens[static_cast<size_t>(i)]);
  }
  const std::span<const int32_t> cached(tokens.data(), static_cast<size_t>(cache.n_restored));
  const std::span<const int32_t> feed = std::span<const int32_t>(tokens).subspan(cached.size());

  GenerateParams gp;
  gp.n_predict = o.n_predict;
  gp.speculative = draft.params;
  gp.speculative.history = cached;
  if (cache.save) {
    gp.on_prompt = [&] {
      sync_kv_to_host(*s.backend, s.kv);
      Result<void> saved = save_prompt_cache(o.prompt_cache, cache.fingerprint, s.kv, tokens);
      if (saved.ok()) return saved;
      return Result<void>(
          make_error(saved.error().code, "--prompt-cache " + saved.error().message));
    };
  }
  gp.n_batch = o.model.batch_size;
  gp.context_shift.enabled = o.context_shift;
  gp.context_shift.n_keep = n_keep;
  if (!o.quiet) {
    gp.context_shift.on_shift = [](const ContextShift& c) {
      std::fprintf(stderr,
                   "qrun: context full at %lld: kept %lld, dropped %lld, continuing (%.1f ms)\n",
                   static_cast<long long>(c.n_past), static_cast<long long>(c.n_keep),
                   static_cast<long long>(c.n_discard), c.ms);
    };
  }
  gp.interrupt = &sigint_flag();  // set by SIGINT while the guard below is in place

  if (o.echo && !o.json) {
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    std::fflush(stdout);
  }
  StopStringFilter filter(*s.tokenizer, o.sampling.stops);
  std::string text;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    text += piece;
    if (o.json) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  auto on_token = [&](int32_t token) {
    const StopChunk chunk = filter.push(token);
    emit(chunk.text);
    return chunk.stopped ? TokenAction::kStop : TokenAction::kContinue;
  };
  // --ignore-eos: no token ends generation (and resolve_sampling_params banned them).
  IsEog is_eog;
  if (!o.sampling.ignore_eos) is_eog = [&](int32_t token) { return s.tokenizer->is_eog(token); };

  Result<GenerateResult> r = [&] {
    const SigintGuard sigint;  // Ctrl-C stops generation cleanly (exit code 130)
    return generate(*s.model, *s.backend, s.kv, feed, gp, sampler, on_token, is_eog);
  }();
  if (!r.ok()) return r.error();
  if (sampler.constraint() != nullptr && sampler.constraint()->error()) {
    return *sampler.constraint()->error();
  }
  emit(filter.flush());
  r->timings.load_ms = s.load_ms;
  r->timings.prompt_ms += cache.ms;  // reading the prompt cache is part of the prompt's time
  r->timings.ttft_ms += cache.ms;

  if (o.json) {
    nlohmann::json j = {{"prompt_tokens", tokens},
                        {"tokens", r->tokens},
                        {"text", text},
                        {"stop_reason", stop_reason_name(r->stop_reason)},
                        {"n_prompt_tokens", r->timings.n_prompt},
                        {"n_tokens", r->tokens.size()},
                        {"seed", sp->seed},
                        {"sampler", sampler.describe()},
                        {"timings", timings_json(r->timings)}};
    if (r->stop_reason == StopReason::kStop) j["stop_string"] = std::string(filter.matched());
    if (!o.prompt_cache.empty()) j["n_cached_tokens"] = cache.n_restored;
    if (o.context_shift) j["n_context_shifts"] = r->n_context_shifts;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  if (!o.quiet) {
    if (!o.json) std::fprintf(stderr, "\n");
    print_timings(*r);
  }
  if (r->stop_reason == StopReason::kInterrupted) {
    return make_error(ErrorCode::kInterrupted, "interrupted");
  }
  return {};
}

}  // namespace

void register_run(CLI::App& app, Action* selected) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (one shot)");
  add_model_flags(cmd, o->model);
  CLI::Option* prompt = cmd->add_option(
      "-p,--prompt", o->prompt, "Prompt text (\"\" starts from the beginning-of-text token alone)");
  add_file_option(cmd, "-f,--file", o->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "Tokens to generate (-1: until end of text or a full context)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{INT32_MAX}));
  cmd->add_flag("--echo", o->echo, "Print the prompt before the generated text");
  cmd->add_flag("-q,--quiet", o->quiet, "No logs or timings on stderr");
  cmd->add_flag("--json", o->json,
                "Print one JSON object (tokens, text, stop reason, timings) instead of the text");
  cmd->add_flag("--no-stdin", o->no_stdin, "Never read stdin, even when it is a pipe");
  add_sampling_flags(cmd, o->sampling);
  add_draft_flags(cmd, o->draft);
  add_file_option(cmd, "--prompt-cache", o->prompt_cache,
                  "Reuse the KV state of a cached prompt prefix from FILE, and save the prompt's "
                  "state there");
  cmd->add_flag("--prompt-cache-ro", o->prompt_cache_ro, "Read --prompt-cache but never write it");
  cmd->add_flag("--context-shift,!--no-context-shift", o->context_shift,
                "When the context is full, keep the first --keep prompt tokens, drop half of the "
                "rest and go on");
  CLI::Option* keep =
      cmd->add_option("--keep", o->keep,
                      "Prompt tokens a context shift keeps (-1: the whole prompt; a BOS token "
                      "is kept beside them)")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{-1}, int64_t{INT32_MAX}));
  cmd->footer(
      "stdout carries only the generated text (with --json, one JSON object: tokens, text,\n"
      "stop_reason eos|length|context|stop|interrupted, token counts, seed, sampler, timings);\n"
      "logs and timings go to stderr, and nothing is colored.\n"
      "stdin: with no -p/-f, a piped stdin is the prompt; with -p or -f, a piped stdin is context\n"
      "placed before the prompt (a newline is added between them). A terminal is never read.\n"
      "Sampling follows llama.cpp: logit bias, penalties, top-k, typical, top-p, min-p,\n"
      "temperature, then a seeded draw; --temp 0 is greedy; --mirostat replaces the filters.\n"
      "--grammar/--grammar-file constrain the text to a GBNF grammar; generation ends when the\n"
      "grammar is complete and nothing more can follow.\n"
      "-md/--model-draft or --lookup-ngram: speculative decoding, the same output law as\n"
      "without (token for token under --temp 0); timings add drafted and accepted tokens.\n"
      "--prompt-cache FILE: a prompt that starts with FILE's tokens prefills only the rest; after\n"
      "the prompt, its KV state is written to FILE (through FILE.tmp and a rename) unless FILE\n"
      "already covers it or --prompt-cache-ro is given. A missing, corrupt or mismatched FILE\n"
      "(another model, cache type or shape) is a cold start with a warning. CPU only (not -ngl).\n"
      "--context-shift: when the context is full, keep the first --keep N prompt tokens (and BOS;\n"
      "-1: the whole prompt), drop half of the rest and go on, saying so on stderr; -n -1 then\n"
      "runs until end of text. Without it generation stops there (stop_reason context).\n"
      "CPU only (not -ngl); not with speculative decoding.\n"
      "Exit codes: 0 ok (whatever the stop reason, but an interruption), 1 runtime error,\n"
      "2 usage, 3 I/O, 4 malformed file, 5 unsupported model, 6 context overflow, 130 "
      "interrupted.");
  cmd->callback([o, prompt, keep, selected] {
    o->prompt_given = prompt->count() > 0;
    o->keep_given = keep->count() > 0;
    *selected = [o] { return run_generation(*o); };
  });
}

}  // namespace qrun::cli
