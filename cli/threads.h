// -t/--threads, shared by every command that takes it (run, chat, perplexity, bench,
// quantize): 0 (the default) is one thread per physical core; a count above what the
// hardware runs at once (std::thread::hardware_concurrency()) is capped there with a note
// on stderr, so `-t 1000` on a 2-core machine starts 2 threads, not 1000.
#pragma once

#include <CLI/CLI.hpp>
#include <vector>

namespace qrun::cli {

// Declares -t,--threads on `cmd`: one count, or (bench) a comma list. Negative counts are
// usage errors.
CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& help);
CLI::Option* add_threads_option(CLI::App* cmd, std::vector<int>& threads, const std::string& help);

// `requested` capped at the hardware's thread count, with "qrun: -t N: ..." on stderr when
// it was (unless `quiet`). 0 stays 0 (the thread pool's default: physical cores).
int capped_threads(int requested, bool quiet);

}  // namespace qrun::cli
