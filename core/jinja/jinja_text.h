// Python str semantics over UTF-8 bytes for the Jinja interpreter: characters (a valid UTF-8
// sequence, or one byte of an invalid one, so every byte survives slicing), str.isspace,
// case mapping, strip/split/splitlines and title-casing as Python's str methods do them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qrun::jinja::text {

// Byte offsets where each character starts, plus s.size() at the end (size = chars + 1).
std::vector<size_t> char_offsets(std::string_view s);
size_t char_count(std::string_view s);
// The code point at `offset` (U+FFFD for an invalid byte) and its length in bytes.
uint32_t code_point_at(std::string_view s, size_t offset, size_t* length);

bool is_space(uint32_t cpt);  // str.isspace for one character
bool is_alpha(uint32_t cpt);
bool is_digit(uint32_t cpt);
uint32_t to_upper(uint32_t cpt);
uint32_t to_lower(uint32_t cpt);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title
std::string swapcase(std::string_view s);

// str.strip/lstrip/rstrip: `chars` is a set of characters; nullopt means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / str.rsplit: nullopt separator splits on runs of whitespace. `maxsplit` < 0 means
// no limit. An empty separator is the caller's error to report.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// Non-overlapping occurrences (str.count) and str.replace with an optional count (< 0: all).
int64_t count(std::string_view s, std::string_view sub);
std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    int64_t max_count);
// Python's str.find in characters, -1 when absent; `rfind` searches from the right.
int64_t find(std::string_view s, std::string_view sub, bool rfind);

// Appends the UTF-8 encoding of `cpt`.
void append_code_point(std::string& out, uint32_t cpt);

}  // namespace qrun::jinja::text
