// The test helpers themselves: temp_dir() must not leave its directories behind. Before
// this was checked, every test run left gigabytes of converted models under /tmp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

// Runs `body` in a child process that exits normally (static destructors run) and returns
// the path the child wrote to the pipe.
template <typename Body>
std::filesystem::path path_from_child(Body body) {
  std::array<int, 2> fds{};
  EXPECT_EQ(pipe(fds.data()), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string path = body().string();
    (void)!write(fds[1], path.data(), path.size());
    close(fds[1]);
    std::exit(0);
  }
  close(fds[1]);
  std::string path;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    path.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return path;
}

TEST(TempDir, IsRemovedWhenTheProcessExits) {
  const std::filesystem::path dir = path_from_child([] {
    const std::filesystem::path d = temp_dir();
    std::ofstream(d / "model.gguf") << "weights";
    std::filesystem::create_directories(d / "nested");
    return d;
  });
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(TempDir, AForkedChildLeavesItsParentsDirectories) {
  const std::filesystem::path mine = temp_dir();
  const std::filesystem::path seen = path_from_child([&] { return mine; });
  EXPECT_EQ(seen, mine);
  EXPECT_TRUE(std::filesystem::is_directory(mine)) << mine;
}

TEST(TempDir, IsFreshAndEmptyEachCall) {
  const std::filesystem::path a = temp_dir(), b = temp_dir();
  EXPECT_NE(a, b);
  EXPECT_TRUE(std::filesystem::is_empty(a));
  EXPECT_TRUE(std::filesystem::is_empty(b));
}

}  // namespace
}  // namespace qrun::test
