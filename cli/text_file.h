// Files named on the command line. Every flag that takes a file goes through here, so that
// each refuses the same things with the same one-line kIo message naming the flag and the
// path: a missing or unreadable file, a directory, a FIFO, device or socket (opened without
// blocking and refused, so a FIFO nobody writes never hangs qrun), an empty file, and more
// than kMaxTextBytes. "-" is standard input where a command allows it, read with the same
// bound, so `< /dev/zero` is an error rather than a hang or an out-of-memory kill.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/gguf/gguf.h"
#include "ggml-like/result.h"

namespace qrun::cli {

// The most bytes a text input (prompt, template, messages, perplexity text) may hold.
inline constexpr size_t kMaxTextBytes = size_t{256} << 20;

// Declares an option or positional argument that names a file: an empty value
// (`-m ''`, which would otherwise mean "not given") is a usage error naming the option.
CLI::Option* add_file_option(CLI::App* cmd, const std::string& name, std::string& path,
                             const std::string& help);

// The bytes of `path` ("-": all of stdin), never empty. Errors are kIo and name what the user
// typed: "<what>: cannot open 'PATH': No such file or directory", "<what>: 'PATH' is a
// directory, not a regular file", "<what>: 'PATH' is empty" (what: "-f", "/load", ...).
Result<std::string> read_text_file(std::string_view what, const std::string& path);

// All of standard input (perhaps nothing), at most kMaxTextBytes; errors are kIo
// ("<what>: standard input is larger than 256 MiB", "<what>: cannot read standard input: ...").
Result<std::string> read_text_stdin(std::string_view what);

// A GGUF file named by `what` (-m, --vocab, the input of quantize). Errors opening it
// (missing, a directory, not a regular file, empty) name the flag first:
// "-m: 'dir': is a directory, not a GGUF file"; format errors are gguf::File::open's.
Result<gguf::File> open_gguf(std::string_view what, const std::string& path);

// An output path for `what` (-o, the output of quantize): refuses a directory and anything
// else that is not a regular file or absent, before any work is done.
Result<void> check_output_path(std::string_view what, const std::string& path);

}  // namespace qrun::cli
