// The chat REPL loop and its slash commands (see chat_repl.h). Invariant: the conversation's
// kv_tokens() always describe the session's KV cache, so every turn reuses the cached
// prefix; /load rebuilds the cache by prefilling the loaded conversation, after restoring
// what FILE.kv (/save FILE --kv) holds of it.
#include "cli/chat_repl.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "cli/draft_flags.h"
#include "cli/repl_commands.h"
#include "cli/text_file.h"
#include "cli/timings_report.h"
#include "core/gguf/replacing_file.h"
#include "core/kv_host_sync.h"
#include "core/prompt_cache.h"

namespace qrun::cli {
namespace {

constexpr const char* kReplyColor = "\033[36m";  // cyan
constexpr const char* kResetColor = "\033[0m";
// readline needs the invisible parts of a prompt between \001 and \002.
constexpr const char* kPromptColored = "\001\033[1;32m\002> \001\033[0m\002";

Result<int64_t> parse_int(std::string_view key, std::string_view value) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return make_error(ErrorCode::kUsage,
                      "/set " + std::string(key) + "=" + std::string(value) + ": not an integer");
  }
  return v;
}

}  // namespace

ChatRepl::ChatRepl(Session& session, Conversation& conversation, LineSource& input,
                   ChatSettings settings)
    : info_(input.interactive() && isatty(STDOUT_FILENO) ? stdout : stderr),
      s_(session),
      conv_(conversation),
      input_(input),
      settings_(std::move(settings)),
      end_of_turn_(end_of_turn_tokens(*session.tokenizer, conversation.chat_template())) {}

Result<void> ChatRepl::rebuild_sampler() {
  Result<SamplingParams> sp = resolve_sampling_params(settings_.sampling, *s_.tokenizer);
  if (!sp.ok()) return sp.error();
  if (settings_.sampling.seed < 0 && sp->temperature > 0) {
    // Keep the drawn seed: /show and /save report it, and /set keeps it.
    settings_.sampling.seed = sp->seed;
    if (!settings_.quiet) std::fprintf(stderr, "qrun: seed %u\n", sp->seed);
  }
  Sampler sampler = make_sampler(*sp);
  QRUN_TRY(attach_grammar(settings_.sampling, *s_.tokenizer, s_.grammar_vocab, sampler));
  sampler_ = std::move(sampler);
  return {};
}

Result<void> ChatRepl::run() {
  QRUN_TRY(rebuild_sampler());
  const Prompts prompts{settings_.color ? kPromptColored : "> ", "... "};
  for (;;) {
    // No clearing of sigint_flag() here: a Ctrl-C that lands between the end of a reply and
    // the next read is one pressed at the prompt (reply() consumes the one that stopped it).
    std::fflush(stdout);
    MessageRead m = read_message(input_, prompts);
    if (m.status == MessageStatus::kEof) return {};
    if (m.status == MessageStatus::kError) return make_error(ErrorCode::kIo, m.text);
    if (m.status == MessageStatus::kInterrupt) {
      if (!input_.interactive()) return make_error(ErrorCode::kInterrupted, "interrupted");
      if (m.at_empty_prompt) std::fprintf(info_, "(to quit, type /exit or press Ctrl-D)\n");
      continue;
    }
    if (m.text.find_first_not_of(" \t\n") == std::string::npos) continue;
    input_.add_history(m.text);
    if (m.unterminated_block && !settings_.quiet)
      std::fprintf(stderr, "qrun: end of input inside a \"\"\" block; sending what was read\n");

    Result<void> r;
    if (parse_command(m.text)) {
      Result<Next> next = handle_command(m.text);
      if (next.ok() && *next == Next::kExit) return {};
      if (!next.ok()) r = next.error();
    } else {
      r = reply(unescape_message(m.text));
    }
    if (r.ok()) continue;
    // On a pipe nobody reads the message and corrects course: end with the exit code.
    if (!input_.interactive()) return r.error();
    std::fflush(stdout);
    std::fprintf(stderr, "qrun: %s\n", r.error().message.c_str());
  }
}

Result<void> ChatRepl::reply(std::optional<std::string> user_message) {
  const bool new_message = user_message.has_value();
  if (new_message) conv_.add_message("user", std::move(*user_message));
  TurnOptions options;
  options.policy = settings_.policy;
  // Room kept for the reply when deciding what fits: -n when given, else an eighth of the
  // context (a reply longer than what is free stops at the context end).
  const int64_t n_ctx = s_.kv.n_ctx();
  options.n_reserve =
      settings_.n_predict > 0 ? std::min(settings_.n_predict, n_ctx / 2) : n_ctx / 8;
  options.generate.n_predict = settings_.n_predict;
  options.generate.n_batch = settings_.n_batch;
  options.generate.interrupt = &sigint_flag();
  options.generate.speculative = settings_.speculative;
  options.stops = settings_.sampling.stops;
  if (!settings_.sampling.ignore_eos) {
    options.is_eog = [this](int32_t token) {
      return token >= 0 && static_cast<size_t>(token) < end_of_turn_.size() &&
             end_of_turn_[static_cast<size_t>(token)];
    };
  }
  if (settings_.color) std::fputs(kReplyColor, stdout);
  options.on_text = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  Result<TurnResult> turn = conv_.respond(*s_.model, *s_.backend, s_.kv, sampler_, options);
  if (settings_.color) std::fputs(kResetColor, stdout);
  if (!turn.ok()) {
    // Nothing was said: forget the message so that the next one is not stuck behind it.
    if (new_message) conv_.undo();
    std::fflush(stdout);
    return turn.error();
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (sampler_.constraint() != nullptr && sampler_.constraint()->error()) {
    return *sampler_.constraint()->error();
  }
  ++n_turns_;
  total_generated_ += turn->generation.timings.n_gen;
  total_gen_ms_ += turn->generation.timings.gen_ms;
  if (turn->n_dropped > 0 && !settings_.quiet) {
    std::fprintf(stderr,
                 "qrun: context full: dropped the %d oldest messages to make room "
                 "(--context-policy %s)\n",
                 turn->n_dropped, context_policy_name(settings_.policy));
  }
  const StopReason stop = turn->generation.stop_reason;
  last_ = std::move(*turn);
  if (stop == StopReason::kInterrupted) {
    sigint_flag().store(false);  // spent on this reply
    // The part already shown is kept as the reply (respond() stores it); /regen redoes it.
    // Stopped before any text: as if the message had not been sent (a /regen keeps its
    // message, so that /regen can be tried again).
    const bool nothing = last_->reply.empty();
    if (nothing) {
      conv_.drop_last_reply();
      if (new_message) conv_.undo();
    }
    if (!input_.interactive()) return make_error(ErrorCode::kInterrupted, "interrupted");
    std::fprintf(stderr, nothing ? "qrun: reply interrupted before it began; nothing was kept\n"
                                 : "qrun: reply interrupted (the part shown is kept; /regen "
                                   "redoes it)\n");
  } else if (stop == StopReason::kContext && !settings_.quiet) {
    std::fprintf(stderr, "qrun: the reply stopped at the end of the context (%lld tokens)\n",
                 static_cast<long long>(n_ctx));
  }
  return {};
}

Result<ChatRepl::Next> ChatRepl::handle_command(const std::string& message) {
  const CommandLine c = *parse_command(message);
  if (!c.command) {
    return make_error(ErrorCode::kUsage, "unknown command /" + c.name + " (/help lists them)");
  }
  switch (*c.command) {
    case Command::kHelp:
      std::fprintf(info_, "%s\n", command_help().c_str());
      break;
    case Command::kExit:
      return Next::kExit;
    case Command::kClear:
      conv_.clear();
      std::fprintf(info_, "(conversation cleared)\n");
      break;
    case Command::kSystem:
      if (c.args.empty()) {
        std::fprintf(info_, "system prompt: %s\n",
                     conv_.system_prompt().empty() ? "(none)" : conv_.system_prompt().c_str());
      } else {
        conv_.set_system_prompt(c.args == "\"\"" ? "" : c.args);
        std::fprintf(info_, "(system prompt %s)\n", c.args == "\"\"" ? "removed" : "set");
      }
      break;
    case Command::kSet:
      QRUN_TRY(apply_set(c.args));
      break;
    case Command::kShow:
      show();
      break;
    case Command::kSave:
      QRUN_TRY(save(c.args));
      break;
    case Command::kLoad:
      QRUN_TRY(load(c.args));
      break;
    case Command::kRegen:
      if (conv_.messages().empty() ||
          (conv_.messages().back().role != "assistant" && conv_.messages().back().role != "user")) {
        return make_error(ErrorCode::kUsage, "/regen: there is no reply to generate again");
      }
      conv_.drop_last_reply();
      QRUN_TRY(reply(std::nullopt));
      break;
    case Command::kUndo: {
      const int n = conv_.undo();
      std::fprintf(info_, "(%d messages dropped)\n", n);
      break;
    }
    case Command::kStats:
      stats();
      break;
    case Command::kContext:
      context();
      break;
  }
  return Next::kContinue;
}

Result<void> ChatRepl::apply_set(const std::string& args) {
  Result<std::vector<std::pair<std::string, std::string>>> kv = parse_assignments(args);
  if (!kv.ok()) return kv.error();
  if (kv->empty()) return make_error(ErrorCode::kUsage, "/set: expected KEY=VALUE ...");
  ChatSettings updated = settings_;  // all or nothing
  for (const auto& [key, value] : *kv) {
    if (key == "n-predict") {
      Result<int64_t> n = parse_int(key, value);
      if (!n.ok()) return n.error();
      updated.n_predict = *n;
    } else if (key == "context-policy") {
      std::optional<ContextPolicy> p = parse_context_policy(value);
      if (!p) {
        return make_error(ErrorCode::kUsage, "/set context-policy=" + value +
                                                 ": expected drop-oldest, shift or error");
      }
      updated.policy = *p;
    } else {
      QRUN_TRY(set_sampling_flag(updated.sampling, key, value));
    }
  }
  const ChatSettings previous = settings_;
  settings_ = std::move(updated);
  Result<void> r = rebuild_sampler();
  if (!r.ok()) {
    settings_ = previous;
    QRUN_TRY(rebuild_sampler());
    return r.error();
  }
  return {};
}

void ChatRepl::show() const {
  const ModelHparams& hp = s_.model->hparams();
  std::fprintf(info_, "model: %s (%s, %lld layers, vocab %d)\n", s_.model_name.c_str(),
               hp.arch.c_str(), static_cast<long long>(hp.n_layer), s_.tokenizer->n_vocab());
  std::fprintf(info_, "template: %s\n", conv_.chat_template().origin().c_str());
  std::fprintf(info_, "context: %lld tokens, policy %s\n", static_cast<long long>(s_.kv.n_ctx()),
               context_policy_name(settings_.policy));
  std::fprintf(info_, "n-predict=%lld %s\n", static_cast<long long>(settings_.n_predict),
               describe_sampling_flags(settings_.sampling).c_str());
  std::fprintf(info_, "system prompt: %s\n",
               conv_.system_prompt().empty() ? "(none)" : conv_.system_prompt().c_str());
}

void ChatRepl::stats() const {
  if (!last_) {
    std::fprintf(info_, "no reply yet\n");
    return;
  }
  const GenerateTimings& t = last_->generation.timings;
  const nlohmann::json j = timings_json(t);
  std::fprintf(info_,
               "last reply: prompt %lld tokens (%lld reused from the cache, %lld fed in %.1f ms, "
               "%.1f tok/s); generated %lld tokens in %.1f ms (%.1f tok/s); time to first token "
               "%.1f ms; stop: %s\n",
               static_cast<long long>(last_->n_prompt), static_cast<long long>(last_->n_reused),
               static_cast<long long>(last_->n_fed), t.prompt_ms, j["prompt_tok_s"].get<double>(),
               static_cast<long long>(t.n_gen), t.gen_ms, j["gen_tok_s"].get<double>(),
               last_->ttft_ms, stop_reason_name(last_->generation.stop_reason));
  if (t.speculative) std::fprintf(info_, "speculative: %s\n", speculative_summary(t).c_str());
  std::fprintf(info_, "session: %d replies, %lld tokens generated (%.1f tok/s)\n", n_turns_,
               static_cast<long long>(total_generated_),
               tokens_per_second(total_generated_, total_gen_ms_));
}

void ChatRepl::context() const {
  // The conversation as the next turn would render it (before any policy drops), and what
  // the KV cache holds now (the cache is trimmed to match at the next turn).
  int64_t used = 0;
  if (!conv_.messages().empty() || !conv_.system_prompt().empty()) {
    Result<std::vector<int32_t>> tokens = conv_.tokenize(false);
    used = tokens.ok() ? static_cast<int64_t>(tokens->size()) : 0;
  }
  const int64_t n_ctx = s_.kv.n_ctx();
  std::fprintf(info_,
               "context: %lld/%lld tokens used (%.0f%%), %zu messages, %lld tokens in the KV "
               "cache, policy %s\n",
               static_cast<long long>(used), static_cast<long long>(n_ctx),
               n_ctx > 0 ? 100.0 * static_cast<double>(used) / static_cast<double>(n_ctx) : 0.0,
               conv_.messages().size(), static_cast<long long>(s_.kv.n_tokens()),
               context_policy_name(settings_.policy));
}

Result<void> ChatRepl::save(const std::string& args) const {
  // "FILE --kv" (or "--kv FILE"): the KV state too.
  std::string path = args;
  bool with_kv = false;
  constexpr std::string_view kKv = "--kv";
  if (path.size() >= kKv.size() + 1 && path.ends_with(std::string(" ") + std::string(kKv))) {
    path.resize(path.size() - kKv.size() - 1);
    with_kv = true;
  } else if (path.starts_with(std::string(kKv) + " ")) {
    path.erase(0, kKv.size() + 1);
    with_kv = true;
  } else if (path == kKv) {
    path.clear();
  }
  while (!path.empty() && path.back() == ' ') path.pop_back();
  while (!path.empty() && path.front() == ' ') path.erase(0, 1);
  if (path.empty()) return make_error(ErrorCode::kUsage, "/save: give a file name");
  QRUN_TRY(check_output_path("/save", path));  // a FIFO would block the write forever
  nlohmann::ordered_json j = conv_.to_json();
  j["sampling"] = sampling_to_json(settings_.sampling);
  j["n_predict"] = settings_.n_predict;
  j["context_policy"] = context_policy_name(settings_.policy);
  // Through a temporary file: a full disk must not cost the user an earlier save.
  const std::string text =
      j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  const auto failed = [](const Error& e) { return make_error(e.code, "/save: " + e.message); };
  Result<ReplacingFile> out = ReplacingFile::create(path);
  if (!out) return failed(out.error());
  const bool written = std::fwrite(text.data(), 1, text.size(), out->get()) == text.size();
  if (Result<void> r = out->commit(written ? 0 : errno); !r) return failed(r.error());
  if (with_kv) {
    sync_kv_to_host(*s_.backend, s_.kv);  // (-ngl: from the GPU)
    const Result<void> kv = save_prompt_cache(
        path + ".kv", prompt_cache_fingerprint(s_.file.header_bytes()), s_.kv, conv_.kv_tokens());
    if (!kv.ok()) return make_error(kv.error().code, "/save --kv: " + kv.error().message);
    std::fprintf(info_, "(saved %zu messages to %s, and %lld cached tokens to %s.kv)\n",
                 conv_.messages().size(), path.c_str(), static_cast<long long>(s_.kv.n_tokens()),
                 path.c_str());
    return {};
  }
  std::fprintf(info_, "(saved %zu messages to %s)\n", conv_.messages().size(), path.c_str());
  return {};
}

Result<int64_t> ChatRepl::restore_kv(const std::string& kv_path) {
  std::error_code ec;
  if (!std::filesystem::exists(kv_path, ec)) return 0;  // the cache stays as it is
  if (conv_.messages().empty() && conv_.system_prompt().empty()) return 0;
  Result<std::vector<int32_t>> tokens = conv_.tokenize(false);
  if (!tokens.ok()) return tokens.error();
  if (static_cast<int64_t>(tokens->size()) >= s_.kv.n_ctx()) return 0;  // prefill says so
  s_.kv.clear();
  conv_.forget_cache();
  const PromptCacheLoad pc =
      load_prompt_cache(kv_path, prompt_cache_fingerprint(s_.file.header_bytes()), s_.kv, *tokens,
                        static_cast<int64_t>(tokens->size()));
  if (pc.found && !pc.problem.empty() && !settings_.quiet) {
    std::fprintf(stderr, "qrun: warning: %s; prefilling instead\n", pc.problem.c_str());
  }
  if (pc.n_restored > 0) sync_kv_from_host(*s_.backend, s_.kv);  // (-ngl: onto the GPU)
  conv_.adopt_cache(std::span<const int32_t>(*tokens).first(static_cast<size_t>(pc.n_restored)));
  return pc.n_restored;
}

Result<void> ChatRepl::load(const std::string& path) {
  if (path.empty()) return make_error(ErrorCode::kUsage, "/load: give a file name");
  Result<std::string> text = read_text_file("/load", path);
  if (!text.ok()) return text.error();
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(*text, nullptr, false);
  if (j.is_discarded()) return make_error(ErrorCode::kFormat, path + ": not valid JSON");
  ChatSettings updated = settings_;
  if (j.is_object() && j.contains("sampling"))
    QRUN_TRY(sampling_from_json(j["sampling"], path, updated.sampling));
  if (j.is_object() && j.contains("n_predict")) {
    if (!j["n_predict"].is_number_integer())
      return make_error(ErrorCode::kFormat, path + ": \"n_predict\" is not an integer");
    updated.n_predict = j["n_predict"].get<int64_t>();
  }
  if (j.is_object() && j.contains("context_policy")) {
    std::optional<ContextPolicy> p;
    if (j["context_policy"].is_string())
      p = parse_context_policy(j["context_policy"].get<std::string>());
    if (!p) return make_error(ErrorCode::kFormat, path + ": bad \"context_policy\"");
    updated.policy = *p;
  }
  QRUN_TRY(conv_.load_json(j, path));
  const bool color = settings_.color;
  settings_ = std::move(updated);
  settings_.color = color;
  QRUN_TRY(rebuild_sampler());
  last_.reset();
  // Rebuild the KV cache now, so that the next message prefills only itself: from FILE.kv
  // (/save --kv) as far as it holds this conversation, then by prefilling the rest.
  Result<int64_t> restored = restore_kv(path + ".kv");
  if (!restored.ok()) return restored.error();
  Result<int64_t> fed = conv_.prefill(*s_.model, *s_.backend, s_.kv, settings_.n_batch);
  if (!fed.ok()) return fed.error();
  if (*restored > 0) {
    std::fprintf(info_,
                 "(loaded %zu messages from %s; %lld tokens restored from %s.kv, %lld "
                 "prefilled)\n",
                 conv_.messages().size(), path.c_str(), static_cast<long long>(*restored),
                 path.c_str(), static_cast<long long>(*fed));
    return {};
  }
  std::fprintf(info_, "(loaded %zu messages from %s; %lld tokens prefilled)\n",
               conv_.messages().size(), path.c_str(), static_cast<long long>(*fed));
  return {};
}

}  // namespace qrun::cli
