// Out-of-line pieces of result.h: the check-failure path and printf-style formatting.
#include "ggml-like/result.h"

#include <cstdarg>
#include <vector>

namespace qrun {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "qrun: internal error at %s:%d: check '%s' failed: %s\n", file, line, cond,
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, args);
    out.resize(static_cast<size_t>(n));
  }
  va_end(args);
  return out;
}

}  // namespace qrun
