// `qrun chat -m MODEL`: an interactive conversation through the model's chat template (or
// --chat-template / --chat-template-file; a model without one is an error, never a
// fallback). On a terminal the input is readline with a history file; from a pipe, each line
// (or joined multi-line message) is a user message and the replies go to stdout, one per
// message, unattended.
// Flags: the model and sampling flags of `run`, plus the system prompt, context policy,
// history and colour. The loop itself is cli/chat_repl.cpp.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "cli/chat_repl.h"
#include "cli/chat_template_flags.h"
#include "cli/commands.h"
#include "cli/draft_flags.h"
#include "cli/gpu_offload.h"
#include "cli/repl_input.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "core/conversation.h"
#include "core/jinja/chat_template.h"

namespace qrun::cli {
namespace {

struct ChatOptions {
  ModelFlags model;
  SamplingFlags sampling;
  DraftFlags draft;
  int64_t n_predict = -1;
  std::string system_prompt;
  std::string system_prompt_file;
  ChatTemplateFlags chat_template;
  std::string context_policy = "drop-oldest";
  std::string color = "auto";
  bool no_history = false;
  bool quiet = false;
};

// --color auto: a terminal that is not TERM=dumb, without NO_COLOR; on: any terminal; off:
// never. A stdout that is not a terminal never gets escape codes.
bool use_color(const std::string& mode) {
  if (mode == "off" || !isatty(STDOUT_FILENO)) return false;
  if (mode == "on") return true;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return (no_color == nullptr || no_color[0] == '\0') && term != nullptr &&
         std::string(term) != "dumb";
}

Result<void> run_chat(const ChatOptions& o) {
  if (o.sampling.error) return *o.sampling.error;  // before any I/O
  const std::optional<ContextPolicy> policy = parse_context_policy(o.context_policy);
  QRUN_CHECK(policy.has_value(), "CLI11 let --context-policy %s through", o.context_policy.c_str());
  if (!o.system_prompt.empty() && !o.system_prompt_file.empty()) {
    return make_error(ErrorCode::kUsage,
                      "give either --system-prompt or --system-prompt-file, not both");
  }
  std::string system_prompt = o.system_prompt;
  if (!o.system_prompt_file.empty()) {
    Result<std::string> text = read_text_file("--system-prompt-file", o.system_prompt_file);
    if (!text.ok()) return text.error();
    system_prompt = std::move(*text);
    while (!system_prompt.empty() && (system_prompt.back() == '\n' || system_prompt.back() == '\r'))
      system_prompt.pop_back();  // the file's final newline is not part of the prompt
  }
  Result<std::optional<ChatTemplate>> flag_template = read_chat_template_flags(o.chat_template);
  if (!flag_template.ok()) return flag_template.error();
  std::optional<ChatTemplate> tmpl = std::move(*flag_template);

  Result<std::unique_ptr<Session>> session = open_session(o.model, !o.quiet);
  if (!session.ok()) return session.error();
  Session& s = **session;
  if (!tmpl) {
    Result<ChatTemplate> t = ChatTemplate::from_gguf(s.file, s.model_name);
    if (!t.ok()) return t.error();
    tmpl.emplace(std::move(*t));
  }
  Conversation conversation(*s.tokenizer, std::move(*tmpl));
  conversation.set_system_prompt(system_prompt);

  const bool interactive = isatty(STDIN_FILENO);
  std::unique_ptr<LineSource> input;
  if (interactive) {
    std::string history_path;
    if (!o.no_history) {
      Result<std::string> path = default_history_path();
      if (path.ok()) {
        history_path = *path;
      } else if (!o.quiet) {
        std::fprintf(stderr, "qrun: warning: %s\n", path.error().message.c_str());
      }
    }
    std::string warning;
    input = make_readline_source(history_path, &warning);
    if (!warning.empty()) std::fprintf(stderr, "qrun: warning: %s\n", warning.c_str());
    if (!o.quiet) {
      std::fprintf(stderr,
                   "qrun: chatting with %s (template: %s); /help lists the commands, Ctrl-D "
                   "or /exit quits\n",
                   s.model_name.c_str(), conversation.chat_template().origin().c_str());
    }
  } else {
    input = make_stream_source(STDIN_FILENO);
  }

  ChatSettings settings;
  settings.sampling = o.sampling;
  DraftSetup draft;  // owns the drafter settings.speculative points to
  if (o.draft.enabled()) {
    Result<SamplingParams> sp = resolve_sampling_params(o.sampling, *s.tokenizer);
    if (!sp.ok()) return sp.error();
    Result<DraftSetup> d = open_drafter(o.draft, o.model, s, *sp, !o.quiet);
    if (!d.ok()) return d.error();
    draft = std::move(*d);
    settings.speculative = draft.params;
  }
  settings.n_predict = o.n_predict;
  settings.n_batch = o.model.batch_size;
  settings.policy = *policy;
  settings.color = use_color(o.color);
  settings.quiet = o.quiet;
  SigintGuard sigint;  // Ctrl-C stops a reply or clears the line; it never kills the REPL
  ChatRepl repl(s, conversation, *input, std::move(settings));
  return repl.run();
}

}  // namespace

void register_chat(CLI::App& app, Action* selected) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model (interactive, or lines on stdin)");
  add_model_flags(cmd, o->model);
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "Tokens per reply (-1: until the end of the turn or a full context)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{INT32_MAX}));
  cmd->add_option("--system-prompt", o->system_prompt, "System prompt (also -sys)");
  add_file_option(cmd, "--system-prompt-file", o->system_prompt_file,
                  "Read the system prompt from a file");
  add_chat_template_flags(cmd, o->chat_template);
  cmd->add_option("--context-policy", o->context_policy,
                  "When the conversation outgrows the context: drop-oldest exchanges, shift "
                  "(drop down to half the context), or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"drop-oldest", "shift", "error"}));
  cmd->add_flag("--no-history", o->no_history, "Do not read or write the history file");
  cmd->add_option("--color", o->color, "Colour the prompt and replies: auto (a terminal), on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("-q,--quiet", o->quiet, "No logs or notes on stderr");
  add_sampling_flags(cmd, o->sampling);
  add_draft_flags(cmd, o->draft);
  cmd->footer(
      "Type a message and press Enter. A line ending in \\ continues on the next line; a line\n"
      "\"\"\" opens a block that another \"\"\" line closes. /help lists the slash commands.\n"
      "Ctrl-C stops a reply (the part shown is kept) or clears the line; Ctrl-D quits.\n"
      "History: $XDG_STATE_HOME/qrun/history (default ~/.local/state/qrun/history).\n"
      "stdin not a terminal: each message is read from stdin and each reply is written to\n"
      "stdout followed by a newline; no prompts, no colours. Exit codes as for `run`; on a\n"
      "pipe an error ends the session with its code (bad command 2, refused turn 6, Ctrl-C 130).");
  cmd->callback([o, selected] { *selected = [o] { return run_chat(*o); }; });
}

}  // namespace qrun::cli
