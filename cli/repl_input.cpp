// The REPL's line sources and message assembly. readline runs in callback mode: the loop
// polls stdin with a short timeout and feeds readline one character at a time, so SIGINT
// (which only sets a flag) ends the wait and the loop clears the line itself. readline's own
// signal handlers are off.
#include "cli/repl_input.h"

#include <poll.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/text_file.h"

namespace qrun::cli {
namespace {

// The signal handler's only way in (see sigint_flag()).
std::atomic<bool> g_sigint{false};

extern "C" void on_sigint(int) {
  g_sigint.store(true);
}

// How long one wait for a key lasts before the loop looks at the flag again.
constexpr int kPollMs = 50;
constexpr int kHistoryLines = 2000;

// readline's callback interface passes no user data to the line handler, so the finished
// line reaches read_line() through this pointer, set only while a read is in progress.
struct PendingLine {
  bool done = false;
  LineRead result;
};
PendingLine* g_pending = nullptr;

extern "C" void on_readline_line(char* line) {
  rl_callback_handler_remove();  // no new prompt until the next read_line()
  if (g_pending == nullptr) {
    std::free(line);
    return;
  }
  g_pending->done = true;
  if (line == nullptr) {
    g_pending->result.status = LineStatus::kEof;
    return;
  }
  g_pending->result.status = LineStatus::kLine;
  g_pending->result.text = line;
  std::free(line);
}

class ReadlineSource final : public LineSource {
 public:
  ReadlineSource(std::string history_path, std::string* warning)
      : history_path_(std::move(history_path)) {
    rl_readline_name = "qrun";
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_instream = stdin;
    rl_outstream = isatty(STDOUT_FILENO) ? stdout : stderr;
    using_history();
    history_write_timestamps = 1;  // lets multi-line entries read back as one entry
    history_multiline_entries = 1;
    if (history_path_.empty()) return;
    std::error_code ec;
    const std::filesystem::path path(history_path_);
    std::filesystem::create_directories(path.parent_path(), ec);
    if (!std::filesystem::exists(path)) std::ofstream(path, std::ios::app).flush();
    if (!std::filesystem::exists(path)) {
      if (warning != nullptr)
        *warning = "cannot create the history file " + history_path_ + "; history is not saved";
      history_path_.clear();
      return;
    }
    read_history(history_path_.c_str());
  }

  ~ReadlineSource() override {
    if (!history_path_.empty()) history_truncate_file(history_path_.c_str(), kHistoryLines);
    clear_history();
  }

  LineRead read_line(const std::string& prompt) override {
    PendingLine pending;
    g_pending = &pending;
    rl_callback_handler_install(prompt.c_str(), on_readline_line);
    LineRead interrupted;
    while (!pending.done) {
      if (g_sigint.exchange(false)) {
        interrupted = cancel_line();
        break;
      }
      pollfd p{fileno(rl_instream), POLLIN, 0};
      const int r = poll(&p, 1, kPollMs);
      if (r > 0) {
        rl_callback_read_char();
      } else if (r < 0 && errno != EINTR) {
        rl_callback_handler_remove();
        pending.done = true;  // stdin is gone: end of input
      }
    }
    g_pending = nullptr;
    if (!pending.done) return interrupted;
    if (pending.result.status == LineStatus::kEof) {
      std::fputc('\n', rl_outstream);
      std::fflush(rl_outstream);
    }
    return pending.result;
  }

  void add_history(const std::string& entry) override {
    ::add_history(entry.c_str());
    if (!history_path_.empty()) append_history(1, history_path_.c_str());
  }

  bool interactive() const override { return true; }

 private:
  // Ctrl-C: leave what was typed on screen, start a fresh line, forget the line's state.
  LineRead cancel_line() {
    LineRead r;
    r.status = LineStatus::kInterrupt;
    r.had_text = rl_end > 0;
    rl_point = rl_end;
    rl_redisplay();
    std::fputs("^C\n", rl_outstream);
    std::fflush(rl_outstream);
    rl_replace_line("", 0);
    rl_free_line_state();
    rl_callback_sigcleanup();
    rl_callback_handler_remove();
    return r;
  }

  std::string history_path_;
};

class StreamSource final : public LineSource {
 public:
  explicit StreamSource(int fd) : fd_(fd) {}

  LineRead read_line(const std::string&) override {
    LineRead r;
    for (;;) {
      const size_t nl = buffer_.find('\n', scanned_);  // only the bytes not searched yet
      scanned_ = buffer_.size();
      if (nl != std::string::npos) {
        r.status = LineStatus::kLine;
        r.text = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        scanned_ = 0;
        if (!r.text.empty() && r.text.back() == '\r') r.text.pop_back();
        return r;
      }
      if (eof_) {
        if (buffer_.empty()) return r;  // kEof
        r.status = LineStatus::kLine;
        r.text = std::move(buffer_);
        buffer_.clear();
        scanned_ = 0;
        return r;
      }
      if (g_sigint.exchange(false)) {
        r.status = LineStatus::kInterrupt;
        r.had_text = !buffer_.empty();
        return r;
      }
      if (buffer_.size() > kMaxTextBytes) {  // endless input without a newline
        r.status = LineStatus::kError;
        r.text = format("standard input: a line longer than %zu MiB", kMaxTextBytes >> 20);
        return r;
      }
      // Wait for data with a timeout, then read: SIGINT restarts a blocked read()
      // (SA_RESTART), never a poll(), and the timeout covers a signal that lands between
      // the look at the flag and the poll.
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, kPollMs);
      if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
      char chunk[65536];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
      } else if (n == 0) {
        eof_ = true;
      } else if (errno != EINTR && errno != EAGAIN) {  // `< /` (EISDIR): an error, not empty
        r.status = LineStatus::kError;
        r.text = format("cannot read standard input: %s", std::strerror(errno));
        return r;
      }
    }
  }

  void add_history(const std::string&) override {}
  bool interactive() const override { return false; }

 private:
  int fd_;
  std::string buffer_;
  size_t scanned_ = 0;  // buffer_[0, scanned_) holds no newline
  bool eof_ = false;
};

bool is_block_fence(const std::string& line) {
  const size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos) return false;
  const size_t e = line.find_last_not_of(" \t");
  return line.compare(b, e - b + 1, "\"\"\"") == 0;
}

}  // namespace

std::atomic<bool>& sigint_flag() {
  return g_sigint;
}

SigintGuard::SigintGuard() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a write of the reply to a terminal or pipe that blocks when the signal lands
  // resumes instead of failing with EINTR, which stdio would keep as an error on stdout (the
  // text lost and the exit code 3). The line sources wait in poll(), which a signal always
  // interrupts.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &previous_);
  g_sigint.store(false);
}

SigintGuard::~SigintGuard() {
  sigaction(SIGINT, &previous_, nullptr);
}

std::unique_ptr<LineSource> make_readline_source(const std::string& history_path,
                                                 std::string* warning) {
  return std::make_unique<ReadlineSource>(history_path, warning);
}

std::unique_ptr<LineSource> make_stream_source(int fd) {
  return std::make_unique<StreamSource>(fd);
}

Result<std::string> default_history_path() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] != '\0') return std::string(state) + "/qrun/history";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.local/state/qrun/history";
  return make_error(ErrorCode::kIo,
                    "no history file: neither XDG_STATE_HOME nor HOME is set (use --no-history)");
}

MessageRead read_message(LineSource& source, const Prompts& prompts) {
  MessageRead m;
  bool in_block = false;
  bool continued = false;
  bool begun = false;
  for (;;) {
    if (m.text.size() > kMaxTextBytes) {  // a block that never closes, as from `yes`
      m.status = MessageStatus::kError;
      m.text = format("standard input: a message longer than %zu MiB", kMaxTextBytes >> 20);
      return m;
    }
    const LineRead line = source.read_line(begun ? prompts.continued : prompts.first);
    if (line.status == LineStatus::kInterrupt) {
      m.status = MessageStatus::kInterrupt;
      m.at_empty_prompt = !begun && !line.had_text;
      m.text.clear();
      return m;
    }
    if (line.status == LineStatus::kError) {
      m.status = MessageStatus::kError;
      m.text = line.text;
      return m;
    }
    if (line.status == LineStatus::kEof) {
      if (!begun) return m;  // kEof
      m.status = MessageStatus::kMessage;
      m.unterminated_block = in_block;
      if (!m.text.empty() && m.text.back() == '\n') m.text.pop_back();
      return m;
    }
    if (in_block) {
      if (is_block_fence(line.text)) {
        if (!m.text.empty() && m.text.back() == '\n') m.text.pop_back();
        m.status = MessageStatus::kMessage;
        return m;
      }
      m.text += line.text + "\n";
      continue;
    }
    if (!continued && is_block_fence(line.text)) {
      in_block = true;
      begun = true;
      continue;
    }
    if (!line.text.empty() && line.text.back() == '\\') {
      m.text += line.text.substr(0, line.text.size() - 1) + "\n";
      continued = true;
      begun = true;
      continue;
    }
    m.text += line.text;
    m.status = MessageStatus::kMessage;
    return m;
  }
}

}  // namespace qrun::cli
