// setup_process: the descriptor guard and the SIGBUS handler. The handler only calls
// async-signal-safe functions (atomic loads, write, _exit, signal, raise).
#include "cli/process_setup.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

#include "core/gguf/mapped_files.h"
#include "ggml-like/result.h"

namespace qrun::cli {
namespace {

void write_all(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

std::atomic_flag g_reporting = ATOMIC_FLAG_INIT;  // one thread reports, the others wait

extern "C" void on_sigbus(int sig, siginfo_t* info, void*) {
  // si_code > 0: a fault the kernel raised, whose si_addr is meaningful (not kill -BUS).
  const char* path = info->si_code > 0 ? gguf::mapped_file_at(info->si_addr) : nullptr;
  if (path == nullptr) {  // not a mapped file: die of the signal, as without the handler
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  if (g_reporting.test_and_set()) {
    for (;;) pause();  // the first thread's _exit ends the process
  }
  write_all("qrun: ");
  write_all(path);
  write_all(": the file changed while in use (truncated?)\n");
  _exit(static_cast<int>(ErrorCode::kIo));
}

}  // namespace

void setup_process() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) continue;
    const int null_fd = ::open("/dev/null", O_RDONLY);  // the lowest free number: fd itself
    if (null_fd != fd && null_fd >= 0) ::close(null_fd);
  }
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace qrun::cli
