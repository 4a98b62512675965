// A child process with a deadline, for tests that must fail rather than stall when the
// program under test hangs: fork/exec without a shell, stdin chosen from the cases a CLI
// meets (text, a pipe kept open, closed, a directory, /dev/zero, /dev/null), stdout and
// stderr captured through pipes, and wait() that kills the child at its deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace qrun::test {

enum class StdinKind {
  kText,       // a pipe holding the given text, then end of file
  kOpenPipe,   // a pipe the test writes with write_stdin() and closes with close_stdin()
  kClosed,     // descriptor 0 closed (`<&-`)
  kDirectory,  // `< /`
  kDevZero,    // `< /dev/zero`: endless zero bytes
  kDevNull,    // `< /dev/null`
};
const char* stdin_kind_name(StdinKind kind);

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by one
  bool timed_out = false;
  std::string out;
  std::string err;
};

class Process {
 public:
  Process(const std::vector<std::string>& argv, StdinKind stdin_kind,
          const std::string& stdin_text = "");
  ~Process();  // kills the child if it still runs
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void write_stdin(const std::string& text);
  void signal(int sig);
  void close_stdin();
  // Reads stdout (and stderr) until stdout holds `needle`; false on timeout or exit.
  bool wait_for_stdout(const std::string& needle, std::chrono::milliseconds timeout);
  // Waits for the exit; at the deadline the child is killed and timed_out set.
  ProcessResult wait(std::chrono::milliseconds timeout);

 private:
  bool pump(std::chrono::milliseconds timeout);  // one poll round; false when both closed

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  ProcessResult result_;
};

// Runs argv to completion under a deadline.
ProcessResult run_process(const std::vector<std::string>& argv, StdinKind stdin_kind,
                          const std::string& stdin_text = "",
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace qrun::test
