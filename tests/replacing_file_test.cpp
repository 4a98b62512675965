// ReplacingFile: the old file survives every failure, and no temporary is left behind.
#include "core/gguf/replacing_file.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/support/test_data.h"

namespace qrun {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void put(const ReplacingFile& file, const std::string& text) {
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), file.get()), text.size());
}

TEST(ReplacingFile, CommitReplacesTheOldFile) {
  const fs::path dir = test::temp_dir(), path = dir / "model.gguf";
  write_text(path, "old");
  Result<ReplacingFile> file = ReplacingFile::create(path.string());
  ASSERT_TRUE(file) << file.error().message;
  put(*file, "new bytes");
  EXPECT_EQ(test::read_text(path), "old") << "readers see the old file until commit";
  ASSERT_TRUE(file->commit());
  EXPECT_EQ(test::read_text(path), "new bytes");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(ReplacingFile, DroppedWithoutCommitKeepsTheOldFile) {
  const fs::path dir = test::temp_dir(), path = dir / "cache.bin";
  write_text(path, "old");
  {
    Result<ReplacingFile> file = ReplacingFile::create(path.string());
    ASSERT_TRUE(file);
    put(*file, "half written");
  }
  EXPECT_EQ(test::read_text(path), "old");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(ReplacingFile, AFailedWriteKeepsTheOldFileAndNamesTheCause) {
  const fs::path dir = test::temp_dir(), path = dir / "cache.bin";
  write_text(path, "old");
  Result<ReplacingFile> file = ReplacingFile::create(path.string());
  ASSERT_TRUE(file);
  put(*file, "partial");
  const Result<void> r = file->commit(ENOSPC);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
  EXPECT_EQ(r.error().message,
            path.string() + ": cannot write " + path.string() + ".tmp: " + std::strerror(ENOSPC));
  EXPECT_EQ(test::read_text(path), "old");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(ReplacingFile, AFailedRenameRemovesTheTemporary) {
  const fs::path dir = test::temp_dir(), path = dir / "taken";
  fs::create_directories(path / "inside");  // rename() cannot replace a non-empty directory
  Result<ReplacingFile> file = ReplacingFile::create(path.string());
  ASSERT_TRUE(file);
  put(*file, "bytes");
  const Result<void> r = file->commit();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(path.string() + ": cannot rename " + path.string() +
                                   ".tmp into place: "),
            std::string::npos)
      << r.error().message;
  EXPECT_TRUE(fs::is_directory(path / "inside"));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(ReplacingFile, CreateNamesTheFileItCannotCreate) {
  const fs::path path = test::temp_dir() / "missing" / "out.gguf";
  const Result<ReplacingFile> file = ReplacingFile::create(path.string());
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code, ErrorCode::kIo);
  EXPECT_EQ(
      file.error().message.rfind(path.string() + ": cannot create " + path.string() + ".tmp: ", 0),
      0u)
      << file.error().message;
}

TEST(ReplacingFile, AMovedFromFileOwnsNothing) {
  const fs::path dir = test::temp_dir(), path = dir / "out";
  std::optional<ReplacingFile> moved;
  {
    Result<ReplacingFile> file = ReplacingFile::create(path.string());
    ASSERT_TRUE(file);
    moved.emplace(std::move(*file));
  }  // the moved-from object is destroyed here
  EXPECT_TRUE(fs::exists(path.string() + ".tmp")) << "the moved-from object removed the temporary";
  put(*moved, "kept");
  ASSERT_TRUE(moved->commit());
  EXPECT_EQ(test::read_text(path), "kept");
}

}  // namespace
}  // namespace qrun
