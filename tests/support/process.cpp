// Process: fork/exec with pipes; output is drained with poll() so a chatty child never
// blocks on a full pipe, and every wait has a deadline after which the child is killed.
#include "tests/support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace qrun::test {

const char* stdin_kind_name(StdinKind kind) {
  switch (kind) {
    case StdinKind::kText:
      return "text";
    case StdinKind::kOpenPipe:
      return "open pipe";
    case StdinKind::kClosed:
      return "<&-";
    case StdinKind::kDirectory:
      return "< /";
    case StdinKind::kDevZero:
      return "< /dev/zero";
    case StdinKind::kDevNull:
      return "< /dev/null";
  }
  return "?";
}

Process::Process(const std::vector<std::string>& argv, StdinKind stdin_kind,
                 const std::string& stdin_text) {
  std::signal(SIGPIPE, SIG_IGN);  // a child that exits early must not kill the test
  int in[2] = {-1, -1}, out[2], err[2];
  const bool piped = stdin_kind == StdinKind::kText || stdin_kind == StdinKind::kOpenPipe;
  if ((piped && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0 ||
      pipe2(err, O_CLOEXEC) != 0) {
    return;
  }
  pid_ = fork();
  if (pid_ == 0) {
    const rlimit no_core{0, 0};  // a child killed by a signal leaves no core file behind
    setrlimit(RLIMIT_CORE, &no_core);
    int fd = -1;
    switch (stdin_kind) {
      case StdinKind::kText:
      case StdinKind::kOpenPipe:
        fd = in[0];
        break;
      case StdinKind::kClosed:
        break;
      case StdinKind::kDirectory:
        fd = ::open("/", O_RDONLY | O_DIRECTORY);
        break;
      case StdinKind::kDevZero:
        fd = ::open("/dev/zero", O_RDONLY);
        break;
      case StdinKind::kDevNull:
        fd = ::open("/dev/null", O_RDONLY);
        break;
    }
    if (fd >= 0) {
      dup2(fd, 0);
      if (fd != 0) ::close(fd);
    } else {
      ::close(0);
    }
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_ = out[0];
  err_ = err[0];
  if (piped) {
    ::close(in[0]);
    in_ = in[1];
    if (stdin_kind == StdinKind::kText) {
      write_stdin(stdin_text);
      close_stdin();
    }
  }
}

Process::~Process() {
  if (pid_ > 0 && result_.exit_code < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (int fd : {in_, out_, err_}) {
    if (fd >= 0) ::close(fd);
  }
}

void Process::write_stdin(const std::string& text) {
  size_t done = 0;
  while (in_ >= 0 && done < text.size()) {
    const ssize_t n = ::write(in_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the child stopped reading
    done += static_cast<size_t>(n);
  }
}

void Process::signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

void Process::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

bool Process::pump(std::chrono::milliseconds timeout) {
  pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
  if (out_ < 0 && err_ < 0) return false;
  if (poll(fds, 2, static_cast<int>(timeout.count())) <= 0) return true;
  std::string* sinks[2] = {&result_.out, &result_.err};
  int* fdp[2] = {&out_, &err_};
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd < 0 || fds[i].revents == 0) continue;
    char buf[65536];
    const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
    if (n > 0) {
      sinks[i]->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(*fdp[i]);
      *fdp[i] = -1;
    }
  }
  return true;
}

bool Process::wait_for_stdout(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (result_.out.find(needle) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !pump(std::min(left, std::chrono::milliseconds(100)))) return false;
  }
  return true;
}

ProcessResult Process::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return result_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      result_.timed_out = true;
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    if (!pump(std::chrono::milliseconds(20))) usleep(20000);
  }
  // What the child wrote before it ended; the pipes close with it.
  const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((out_ >= 0 || err_ >= 0) && std::chrono::steady_clock::now() < drain_deadline) {
    pump(std::chrono::milliseconds(100));
  }
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result_;
}

ProcessResult run_process(const std::vector<std::string>& argv, StdinKind stdin_kind,
                          const std::string& stdin_text, std::chrono::milliseconds timeout) {
  Process p(argv, stdin_kind, stdin_text);
  return p.wait(timeout);
}

}  // namespace qrun::test
