// A forkpty harness for testing interactive commands for real: spawn the qrun binary on a
// pseudo-terminal (stdin, stdout and stderr all on it), type keystrokes, read what it
// prints with timeouts (never sleeps), send Ctrl-C / Ctrl-D, and wait for the exit code.
// The child gets an 80x24 window, TERM=dumb and the extra environment given.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace qrun::test {

class PtyProcess {
 public:
  // Runs `binary` with `args` (argv[1..]) and `env` ("KEY=VALUE") added to the environment.
  PtyProcess(const std::string& binary, const std::vector<std::string>& args,
             const std::vector<std::string>& env = {});
  ~PtyProcess();  // kills the child if it still runs
  PtyProcess(const PtyProcess&) = delete;
  PtyProcess& operator=(const PtyProcess&) = delete;

  bool started() const { return pid_ > 0; }
  // Writes raw bytes to the terminal (as typed: "\r" is Enter).
  void write(const std::string& keys);
  void ctrl_c() { write("\x03"); }
  void ctrl_d() { write("\x04"); }

  // Reads until `needle` appears in the output after the mark (see mark()); true when it
  // did, false on timeout or end of output. The mark moves past the match.
  bool expect(const std::string& needle,
              std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Reads until at least `n` bytes arrived after the mark, without moving it.
  bool expect_bytes(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Without reading, waits until the child sleeps for 50 ms on end (its main thread in state
  // S at every look, 10 ms apart), as when a write to the full terminal blocks it: true when
  // it did, false on timeout.
  bool expect_child_asleep(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Everything read so far, and what came after the mark.
  const std::string& output() const { return out_; }
  std::string since_mark() const { return out_.substr(mark_); }
  void mark() { mark_ = out_.size(); }

  // Waits for the child to exit, reading (and keeping) its output meanwhile. The exit code,
  // 128 + signal when killed, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  // One read with a timeout; false at end of output (the child closed the terminal).
  bool read_some(std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  int fd_ = -1;
  bool eof_ = false;
  int exit_code_ = -1;
  std::string out_;
  size_t mark_ = 0;
};

}  // namespace qrun::test
