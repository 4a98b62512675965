// Implementation of the test-data helpers (see test_data.h), except qrun_binary(), which
// lives in qrun_binary.cpp so that kernel-only builds (no qrun binary) can link the rest.
#include "tests/support/test_data.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace qrun::test {

std::filesystem::path data_dir() {
  if (const char* env = std::getenv("QRUN_TEST_DATA"); env && *env) return env;
  return QRUN_TEST_DATA_DEFAULT;
}

std::filesystem::path data_path(const std::string& relative) {
  std::filesystem::path p = data_dir() / relative;
  EXPECT_TRUE(std::filesystem::exists(p))
      << "shared test data missing: " << p << " (set QRUN_TEST_DATA to the shared folder)";
  return p;
}

std::filesystem::path real_model(const std::string& file) {
  std::filesystem::path dir;
  if (const char* env = std::getenv("QRUN_MODELS"); env && *env) {
    dir = env;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".cache/qrun/models";
  }
  const std::filesystem::path p = dir / file;
  return !dir.empty() && std::filesystem::is_regular_file(p) ? p : std::filesystem::path();
}

bool real_models_required() {
  const char* env = std::getenv("QRUN_REQUIRE_REAL_MODELS");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

namespace {

// The directories temp_dir() made, each removed at exit by the process that made it (a
// forked child that exits normally must not remove its parent's files).
class TempDirs {
 public:
  void add(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back({getpid(), dir});
  }
  ~TempDirs() {
    std::error_code ignored;
    for (const Made& made : dirs_) {
      if (made.by == getpid()) std::filesystem::remove_all(made.dir, ignored);
    }
  }

 private:
  struct Made {
    pid_t by;
    std::filesystem::path dir;
  };
  std::mutex mutex_;
  std::vector<Made> dirs_;
};

TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::filesystem::path temp_dir() {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TMPDIR");
  std::filesystem::path dir =
      std::filesystem::path(base && *base ? base : "/tmp") /
      ("qrun-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CommandResult run_command(const std::string& command, const std::string& stdin_text) {
  std::filesystem::path dir = temp_dir();
  const std::string in = (dir / "stdin").string(), out = (dir / "stdout").string(),
                    err = (dir / "stderr").string();
  std::ofstream(in, std::ios::binary) << stdin_text;
  const std::string full = "(" + command + ") <'" + in + "' >'" + out + "' 2>'" + err + "'";
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace qrun::test
