// Locating shared test data and the built qrun binary from tests.
// QRUN_TEST_DATA overrides the default <project>/../shared. Tests that need shared data
// fail (not skip) when it is missing, because CI always has it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace qrun::test {

// The shared data root (QRUN_TEST_DATA or the build-time default).
std::filesystem::path data_dir();
// data_dir()/relative, asserting with a clear message that it exists.
std::filesystem::path data_path(const std::string& relative);
// The qrun binary built alongside the tests.
std::filesystem::path qrun_binary();
// A fresh, empty temporary directory for one test (removed at process exit is not
// guaranteed; names are unique per call).
std::filesystem::path temp_dir();
// Reads a whole file into bytes / text.
std::vector<uint8_t> read_bytes(const std::filesystem::path& path);
std::string read_text(const std::filesystem::path& path);

// Runs a command through /bin/sh, with optional stdin text. Captures stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& command, const std::string& stdin_text = "");

}  // namespace qrun::test
