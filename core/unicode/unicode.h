// Unicode helpers for the tokenizers: lenient UTF-8 decoding that never fails (an invalid
// byte becomes U+FFFD and decoding resumes at the next byte, as llama.cpp does), code point
// properties from generated tables, and the GPT-2 byte-level alphabet (each byte 0..255 maps
// to one printable code point, so any byte string can be spelled with vocabulary characters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/unicode/unicode_tables.h"

namespace qrun::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// The coarse category of a code point (kUndefined beyond U+10FFFF).
Category category(uint32_t cpt);
// The Unicode White_Space property (ASCII \t..\r and space, U+0085, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_whitespace(uint32_t cpt);
// The simple (one code point) lowercase mapping; the code point itself when it has none.
uint32_t to_lower(uint32_t cpt);
// The first code point of the canonical decomposition (NFD); the code point itself when it
// does not decompose. WordPiece uses this to strip accents.
uint32_t nfd_first(uint32_t cpt);

// The length of the UTF-8 sequence announced by a lead byte, from its high four bits:
// 1 for 0x00..0xBF (continuation bytes count as one), 2 for 0xC0..0xDF, 3 for 0xE0..0xEF,
// 4 for 0xF0..0xFF. Tokenizers use it to split text into characters without validating.
size_t utf8_sequence_length(uint8_t lead);

// Decodes the code point at `offset` and advances past it. Accepts what llama.cpp accepts
// (any lead byte with the right number of continuation bytes, overlong forms included);
// anything else, and sequences beyond U+10FFFF, yields U+FFFD and advances one byte.
uint32_t decode_utf8(std::string_view text, size_t& offset);
std::vector<uint32_t> decode_utf8(std::string_view text);
// Appends the UTF-8 encoding of a code point (<= U+10FFFF; surrogates are encoded as is).
void append_utf8(std::string& out, uint32_t cpt);
std::string to_utf8(uint32_t cpt);

// Strict validation for output: classifies the bytes at `offset` as one well-formed UTF-8
// character (no overlongs, surrogates or code points beyond U+10FFFF), as an invalid
// sequence (length = its maximal valid prefix, at least 1 byte, to be replaced by one U+FFFD),
// or as a valid but truncated prefix of a character (length = the bytes present).
struct Utf8Char {
  enum class Status { kValid, kInvalid, kIncomplete };
  Status status;
  size_t length;
};
Utf8Char check_utf8_char(std::string_view text, size_t offset);
// `text` with every invalid byte sequence (and a truncated tail) replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);

// GPT-2 byte-level alphabet: printable bytes map to themselves, the other 68 bytes map, in
// increasing order, to U+0100, U+0101, ...
uint32_t byte_to_bpe_char(uint8_t byte);
// The byte whose alphabet character is `cpt`, or -1 if `cpt` is not in the alphabet.
int bpe_char_to_byte(uint32_t cpt);

}  // namespace qrun::unicode
