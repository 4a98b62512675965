// capped_threads and the -t declaration: one range check and one cap for every command.
#include "cli/threads.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <thread>

namespace qrun::cli {

CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
  return cmd->add_option("-t,--threads", threads, help)->check(CLI::Range(0, INT_MAX));
}

CLI::Option* add_threads_option(CLI::App* cmd, std::vector<int>& threads, const std::string& help) {
  return cmd->add_option("-t,--threads", threads, help)
      ->delimiter(',')
      ->check(CLI::Range(1, INT_MAX));
}

int capped_threads(int requested, bool quiet) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (requested <= hardware) return requested;
  if (!quiet) {
    std::fprintf(stderr, "qrun: -t %d: this machine runs %d threads at once; using %d\n", requested,
                 hardware, hardware);
  }
  return hardware;
}

}  // namespace qrun::cli
