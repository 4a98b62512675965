// read_text_file: a stream copy with the error named after the flag or command.
#include "cli/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace qrun::cli {

Result<std::string> read_text_file(std::string_view what, const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::kIo,
                      format("%.*s: cannot open '%s': %s", static_cast<int>(what.size()),
                             what.data(), path.c_str(), std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return make_error(
        ErrorCode::kIo,
        format("%.*s: cannot read '%s'", static_cast<int>(what.size()), what.data(), path.c_str()));
  }
  return buffer.str();
}

}  // namespace qrun::cli
