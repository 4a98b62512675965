// read_text_file and friends: open without blocking, fstat, refuse what is not a regular
// file, then read with read(2) up to kMaxTextBytes; every error names the flag and the path.
#include "cli/text_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace qrun::cli {
namespace {

Error io_error(std::string_view what, const std::string& message) {
  return make_error(ErrorCode::kIo, format("%.*s: %s", static_cast<int>(what.size()), what.data(),
                                           message.c_str()));
}

// What a file of this mode is, for "is a FIFO, not a regular file".
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// Reads `fd` to its end, at most kMaxTextBytes; `name` is "'PATH'" or "standard input".
Result<std::string> read_bounded(std::string_view what, int fd, const std::string& name) {
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a non-blocking stdin with nothing yet: wait for it
        pollfd p{fd, POLLIN, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return io_error(what, format("cannot read %s: %s", name.c_str(), std::strerror(errno)));
    }
    if (text.size() + static_cast<size_t>(n) > kMaxTextBytes) {
      return io_error(what, format("%s is larger than %zu MiB", name.c_str(), kMaxTextBytes >> 20));
    }
    text.append(chunk, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

CLI::Option* add_file_option(CLI::App* cmd, const std::string& name, std::string& path,
                             const std::string& help) {
  return cmd->add_option(name, path, help)
      ->check(CLI::Validator(
          [](const std::string& value) { return value.empty() ? "empty file name" : ""; }, "FILE"));
}

Result<std::string> read_text_stdin(std::string_view what) {
  return read_bounded(what, STDIN_FILENO, "standard input");
}

Result<std::string> read_text_file(std::string_view what, const std::string& path) {
  if (path == "-") {
    Result<std::string> text = read_text_stdin(what);
    if (text.ok() && text->empty()) return io_error(what, "standard input is empty");
    return text;
  }
  const std::string name = "'" + path + "'";
  if (path.empty()) return make_error(ErrorCode::kUsage, std::string(what) + ": empty file name");
  // O_NONBLOCK: opening a FIFO that no one writes returns at once; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return io_error(what, "cannot open " + name + ": " + std::strerror(errno));
  struct stat st {};
  Result<std::string> text = [&]() -> Result<std::string> {
    if (fstat(fd, &st) != 0) return io_error(what, name + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) {
      return io_error(what,
                      format("%s is %s, not a regular file", name.c_str(), kind_of(st.st_mode)));
    }
    if (static_cast<uint64_t>(st.st_size) > kMaxTextBytes) {
      return io_error(what, format("%s is larger than %zu MiB", name.c_str(), kMaxTextBytes >> 20));
    }
    Result<std::string> bytes = read_bounded(what, fd, name);
    if (bytes.ok() && bytes->empty()) return io_error(what, name + " is empty");
    return bytes;
  }();
  ::close(fd);
  return text;
}

Result<gguf::File> open_gguf(std::string_view what, const std::string& path) {
  if (path.empty()) return make_error(ErrorCode::kUsage, std::string(what) + ": empty file name");
  Result<gguf::File> file = gguf::File::open(path);
  // The reader names the file; an error opening it names the flag too.
  if (!file.ok() && file.error().code == ErrorCode::kIo)
    return io_error(what, file.error().message);
  return file;
}

Result<void> check_output_path(std::string_view what, const std::string& path) {
  if (path.empty()) return make_error(ErrorCode::kUsage, std::string(what) + ": empty file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};  // a new file; a missing folder fails when it is created
    return io_error(what, "'" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return io_error(what,
                    format("'%s' is %s, not a regular file", path.c_str(), kind_of(st.st_mode)));
  }
  return {};
}

}  // namespace qrun::cli
