// Line input for the chat REPL. On a terminal, GNU readline (editing, history, Ctrl-R)
// through its callback interface, so that Ctrl-C is a flag the loop sees, never a kill; from
// a pipe, plain lines with no prompt. read_message() joins lines into one message: a
// trailing backslash continues a line, and a line of three double quotes opens a block that
// another such line closes.
#pragma once

#include <atomic>
#include <csignal>
#include <memory>
#include <string>

#include "ggml-like/result.h"

namespace qrun::cli {

// Set by SIGINT while the REPL runs; the generation loop and line input poll it. A signal
// handler can reach the program only through a global, so this is one.
std::atomic<bool>& sigint_flag();

// Installs the SIGINT handler that sets sigint_flag() for its lifetime (with SA_RESTART:
// blocked writes resume; code that must notice the signal waits in poll() with a timeout),
// and restores the previous handler after.
class SigintGuard {
 public:
  SigintGuard();
  ~SigintGuard();
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction previous_ {};
};

// kError: the input could not be read as lines (a line longer than kMaxTextBytes, as from
// /dev/zero); text holds the message.
enum class LineStatus { kLine, kEof, kInterrupt, kError };

struct LineRead {
  LineStatus status = LineStatus::kEof;
  std::string text;       // the line, without its newline (kError: the message)
  bool had_text = false;  // for kInterrupt: something was typed on the line
};

class LineSource {
 public:
  virtual ~LineSource() = default;
  // One line, shown after `prompt` on a terminal (ignored for pipes).
  virtual LineRead read_line(const std::string& prompt) = 0;
  // Remembers a submitted message (saved to the history file at once, if there is one).
  virtual void add_history(const std::string& entry) = 0;
  virtual bool interactive() const = 0;
};

// readline on the terminal of stdin. `history_path` empty: no history file. The prompt goes
// to stdout when it is a terminal, else to stderr, so piped output holds only replies.
// A history file that cannot be created is a warning in `*warning`, not an error.
std::unique_ptr<LineSource> make_readline_source(const std::string& history_path,
                                                 std::string* warning);
// Plain lines from a file descriptor (a pipe or a file); \r\n and a last unterminated line
// are handled.
std::unique_ptr<LineSource> make_stream_source(int fd);

// $XDG_STATE_HOME/qrun/history, or ~/.local/state/qrun/history; kIo when neither
// XDG_STATE_HOME nor HOME is set.
Result<std::string> default_history_path();

enum class MessageStatus { kMessage, kEof, kInterrupt, kError };

struct MessageRead {
  MessageStatus status = MessageStatus::kEof;
  std::string text;                 // kError: the message of the line source
  bool at_empty_prompt = false;     // kInterrupt with nothing typed and no message begun
  bool unterminated_block = false;  // kMessage: end of input closed an open block
};

struct Prompts {
  std::string first;      // "> "
  std::string continued;  // "... "
};

// Reads one message: lines joined by "\n" where a line ends with a backslash (which is
// dropped) or inside a block of lines between two lines that are exactly three double
// quotes (surrounding spaces allowed). Empty lines outside a block are returned as empty
// messages; the caller skips them. End of input inside a message returns what was read.
MessageRead read_message(LineSource& source, const Prompts& prompts);

}  // namespace qrun::cli
