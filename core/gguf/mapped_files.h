// The file mappings this process reads, in a table a signal handler can search. A GGUF file
// truncated (or rewritten in place) while it is mapped raises SIGBUS at the next access to
// a page past its new end; the CLI's handler asks mapped_file_at() whether the faulting
// address lies in one of these mappings, to report the file rather than die silently.
// gguf::File registers its mapping for as long as it lives.
#pragma once

#include <cstddef>

namespace qrun::gguf {

// Registers [begin, begin + length) as a mapping of `path`, which must stay valid until
// unregister_mapped_file. Returns the registration, or -1 when the table is full (the
// mapping then works as before, only a fault in it is not recognised).
int register_mapped_file(const void* begin, size_t length, const char* path);
void unregister_mapped_file(int registration);

// The path of the registered mapping that holds `address`, or nullptr.
// Async-signal-safe: only lock-free atomic loads.
const char* mapped_file_at(const void* address);

}  // namespace qrun::gguf
