// See pty.h. The child is a session leader with the pty as its controlling terminal, so
// typing Ctrl-C there sends SIGINT through the line discipline, as for a person.
#include "tests/support/pty.h"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

namespace qrun::test {

using Clock = std::chrono::steady_clock;

PtyProcess::PtyProcess(const std::string& binary, const std::vector<std::string>& args,
                       const std::vector<std::string>& env) {
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = 80;
  pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
  if (pid_ == 0) {
    setenv("TERM", "dumb", 1);
    for (const std::string& e : env) {
      const size_t eq = e.find('=');
      setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
}

PtyProcess::~PtyProcess() {
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

void PtyProcess::write(const std::string& keys) {
  size_t done = 0;
  while (done < keys.size()) {
    const ssize_t n = ::write(fd_, keys.data() + done, keys.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

bool PtyProcess::read_some(std::chrono::milliseconds timeout) {
  if (eof_) return false;
  pollfd p{fd_, POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(timeout.count()));
  if (r <= 0) return r == 0 || errno == EINTR;  // a timeout is not the end
  char buf[4096];
  const ssize_t n = ::read(fd_, buf, sizeof buf);
  if (n > 0) {
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && errno == EINTR) return true;
  eof_ = true;  // EIO once the child closed its side
  return false;
}

bool PtyProcess::expect(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const size_t at = out_.find(needle, mark_);
    if (at != std::string::npos) {
      mark_ = at + needle.size();
      return true;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || !read_some(left)) return false;
  }
}

bool PtyProcess::expect_bytes(size_t n, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (out_.size() < mark_ + n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || !read_some(left)) return false;
  }
  return true;
}

bool PtyProcess::expect_child_asleep(std::chrono::milliseconds timeout) {
  const std::string stat = "/proc/" + std::to_string(pid_) + "/stat";
  const auto deadline = Clock::now() + timeout;
  int asleep = 0;
  while (Clock::now() < deadline) {
    std::ifstream in(stat);
    std::string line;
    if (!std::getline(in, line)) return false;  // gone
    // "pid (comm) state ...": the state follows the last ')', as comm may hold one.
    const size_t close = line.rfind(')');
    asleep = close != std::string::npos && line.compare(close + 1, 3, " S ") == 0 ? asleep + 1 : 0;
    if (asleep == 5) return true;
    poll(nullptr, 0, 10);  // a 10 ms pause between looks
  }
  return false;
}

int PtyProcess::wait(std::chrono::milliseconds timeout) {
  if (exit_code_ >= 0) return exit_code_;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      for (size_t before = out_.size() + 1; before != out_.size() && !eof_;) {
        before = out_.size();
        read_some(std::chrono::milliseconds(0));  // what is left in the terminal
      }
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (Clock::now() >= deadline) return -1;
    if (!read_some(std::chrono::milliseconds(20))) {
      // The terminal is closed; the child is about to be reaped.
      usleep(1000);
    }
  }
}

}  // namespace qrun::test
