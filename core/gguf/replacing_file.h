// A file written so that readers find either the old file or the whole new one, never a
// part: bytes go to "<path>.tmp", and commit() closes it and renames it over `path`. On any
// failure, and when dropped without commit(), the temporary file is removed. Used by every
// writer of a file a user keeps (GGUF files, prompt caches), so a full disk or a failed write
// never costs them the old copy.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include "ggml-like/result.h"

namespace qrun {

class ReplacingFile {
 public:
  // Opens "<path>.tmp" for writing, replacing any earlier temporary. Errors: kIo naming both
  // paths.
  static Result<ReplacingFile> create(const std::string& path);

  ReplacingFile(ReplacingFile&& other) noexcept;
  ReplacingFile& operator=(ReplacingFile&& other) = delete;
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;
  ~ReplacingFile();

  std::FILE* get() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

  // Flushes and closes the temporary file and renames it over path(). write_errno is the
  // errno of a write the caller saw fail (0: none), which makes this fail with its cause.
  // Errors: kIo naming both paths. Call at most once.
  Result<void> commit(int write_errno = 0);

 private:
  ReplacingFile(std::string path, std::string temp, std::FILE* file)
      : path_(std::move(path)), temp_(std::move(temp)), file_(file) {}
  Error fail(const char* what, const char* tail, int error_number);

  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;  // open until commit()
  bool committed_ = false;
};

}  // namespace qrun
