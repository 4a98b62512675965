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
// A real model fetched by scripts/fetch-models.sh into $QRUN_MODELS (default
// ~/.cache/qrun/models), or an empty path when it is not there.
std::filesystem::path real_model(const std::string& file);
// Whether a missing real model fails the test instead of skipping it: QRUN_REQUIRE_REAL_MODELS
// is set (scripts/test.sh, and so CI, set it after fetching the models).
bool real_models_required();
// In a test body: binds `var` to the real model `file`, or fails (when required) or skips
// with a message that names the script that fetches it.
#define QRUN_REAL_MODEL_OR_SKIP(var, file)                                                \
  const std::filesystem::path var = ::qrun::test::real_model(file);                       \
  if (var.empty()) {                                                                      \
    const std::string qrun_missing_ = std::string(file) +                                 \
                                      " is not fetched: run scripts/fetch-models.sh (or " \
                                      "set QRUN_MODELS to where it is)";                  \
    if (::qrun::test::real_models_required()) FAIL() << qrun_missing_;                    \
    GTEST_SKIP() << qrun_missing_;                                                        \
  }
// The qrun binary built alongside the tests.
std::filesystem::path qrun_binary();
// A fresh, empty temporary directory, unique per call, under $TMPDIR or /tmp. Every
// directory made this way is removed when the test process exits normally (a crash leaves
// it behind).
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
