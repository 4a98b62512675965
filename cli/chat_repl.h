// The chat REPL behind `qrun chat`: reads messages from a LineSource (readline on a
// terminal, plain lines from a pipe), runs slash commands, and answers everything else with
// one Conversation turn on the session's model, keeping the KV cache across turns so that
// each turn prefills only the tokens after the cached prefix. Replies stream to stdout;
// notes and errors go to stderr; command output goes where the prompt goes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/repl_input.h"
#include "cli/sampling_flags.h"
#include "cli/session.h"
#include "core/conversation.h"
#include "ggml-like/result.h"

namespace qrun::cli {

struct ChatSettings {
  SamplingFlags sampling;
  int64_t n_predict = -1;  // per reply; < 0: until end of turn or a full context
  int64_t n_batch = 512;   // prompt tokens per forward pass
  ContextPolicy policy = ContextPolicy::kDropOldest;
  bool color = false;             // escape codes on stdout (only ever true when it is a terminal)
  bool quiet = false;             // no load log and no per-reply notes on stderr
  SpeculativeParams speculative;  // a drafter (-md, --lookup-ngram), or none
};

class ChatRepl {
 public:
  // `session`, `conversation` and `input` must outlive the REPL.
  ChatRepl(Session& session, Conversation& conversation, LineSource& input, ChatSettings settings);

  // Runs until /exit or end of input (Ok), or until an error that ends the session: on a
  // pipe (not a terminal), a refused turn or a Ctrl-C ends it with that error, so scripts
  // see the exit code; on a terminal such errors are printed and the REPL goes on.
  Result<void> run();

 private:
  enum class Next { kContinue, kExit };

  Result<Next> handle_command(const std::string& message);
  // Adds the user message (when not empty) and generates the reply.
  Result<void> reply(std::optional<std::string> user_message);
  Result<void> rebuild_sampler();
  Result<void> apply_set(const std::string& args);
  // /save FILE [--kv]: the conversation as JSON, and with --kv the KV state as FILE.kv.
  Result<void> save(const std::string& args) const;
  // /load FILE: the conversation, and the KV state of FILE.kv as far as it matches.
  Result<void> load(const std::string& path);
  // Restores FILE.kv's prefix of the loaded conversation into the (cleared) cache; returns
  // the tokens restored (0 without a usable file, with a note saying why).
  Result<int64_t> restore_kv(const std::string& kv_path);
  void show() const;
  void stats() const;
  void context() const;

  // Where command output goes: the terminal's stdout when the prompt is shown there, else
  // stderr, so a piped stdout holds only replies.
  std::FILE* info_;
  Session& s_;
  Conversation& conv_;
  LineSource& input_;
  ChatSettings settings_;
  Sampler sampler_;
  std::vector<bool> end_of_turn_;
  std::optional<TurnResult> last_;
  int64_t total_generated_ = 0;
  double total_gen_ms_ = 0;
  int n_turns_ = 0;
};

}  // namespace qrun::cli
