// ReplacingFile: see replacing_file.h.
#include "core/gguf/replacing_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace qrun {

Result<ReplacingFile> ReplacingFile::create(const std::string& path) {
  std::string temp = path + ".tmp";
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) {
    return make_error(ErrorCode::kIo, format("%s: cannot create %s: %s", path.c_str(), temp.c_str(),
                                             std::strerror(errno)));
  }
  return ReplacingFile(path, std::move(temp), file);
}

ReplacingFile::ReplacingFile(ReplacingFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      file_(std::exchange(other.file_, nullptr)),
      committed_(std::exchange(other.committed_, true)) {}

ReplacingFile::~ReplacingFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temp_.c_str());
}

Error ReplacingFile::fail(const char* what, const char* tail, int error_number) {
  committed_ = true;  // nothing is left to remove after this
  std::remove(temp_.c_str());
  return make_error(ErrorCode::kIo,
                    format("%s: cannot %s %s%s: %s", path_.c_str(), what, temp_.c_str(), tail,
                           std::strerror(error_number != 0 ? error_number : EIO)));
}

Result<void> ReplacingFile::commit(int write_errno) {
  QRUN_CHECK(file_ != nullptr && !committed_, "%s: committed twice", temp_.c_str());
  if (write_errno == 0 && std::fflush(file_) != 0) write_errno = errno;
  const int close_result = std::fclose(std::exchange(file_, nullptr));
  if (write_errno == 0 && close_result != 0) write_errno = errno;
  if (write_errno != 0) return fail("write", "", write_errno);
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) return fail("rename", " into place", errno);
  committed_ = true;
  return {};
}

}  // namespace qrun
