// Error values and checks used by every layer.
// Data errors (files, flags, prompts) are values: functions return Result<T> and the
// CLI turns an Error into one line on stderr plus the exit code of its ErrorCode.
// Programming errors are QRUN_CHECK failures, which print the values and abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace qrun {

// Exit codes of the qrun binary. The numbers are part of the documented interface.
enum class ErrorCode : int {
  kRuntime = 1,          // anything else that went wrong at run time
  kUsage = 2,            // bad flags or arguments
  kIo = 3,               // a file could not be opened, read or written
  kFormat = 4,           // a file is malformed (corrupt or truncated GGUF, bad JSON)
  kUnsupported = 5,      // a valid file that qrun cannot run (type, architecture)
  kContextOverflow = 6,  // the prompt does not fit in the context
  kInterrupted = 130,    // Ctrl-C
};

struct Error {
  ErrorCode code = ErrorCode::kRuntime;
  std::string message;
};

inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

// A value or an Error. Small on purpose: ok(), value(), error(), and moving out.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace qrun

// Propagates an Error from an expression that yields a Result.
#define QRUN_TRY(expr)                                           \
  do {                                                           \
    auto&& qrun_try_result_ = (expr);                            \
    if (!qrun_try_result_.ok()) return qrun_try_result_.error(); \
  } while (0)

// Always-on invariant check: prints the condition and a formatted message, then aborts.
#define QRUN_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) ::qrun::check_failed(__FILE__, __LINE__, #cond, ::qrun::format(__VA_ARGS__)); \
  } while (0)
