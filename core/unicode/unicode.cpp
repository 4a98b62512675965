// Unicode helpers: table lookups (binary searches over the generated runs), lenient and
// strict UTF-8 handling, and the GPT-2 byte-level alphabet.
#include "core/unicode/unicode.h"

#include <algorithm>
#include <array>

namespace qrun::unicode {
namespace {

// Printable bytes keep their own code point in the GPT-2 alphabet.
constexpr bool is_self_mapped_byte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<uint16_t, 256> make_byte_alphabet() {
  std::array<uint16_t, 256> alphabet{};
  uint16_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    alphabet[b] = is_self_mapped_byte(b) ? static_cast<uint16_t>(b) : next++;
  }
  return alphabet;
}

constexpr std::array<uint16_t, 256> kByteAlphabet = make_byte_alphabet();

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

}  // namespace

Category category(uint32_t cpt) {
  using tables::CategoryRun;
  if (cpt > kMaxCodePoint) return Category::kUndefined;
  const CategoryRun* begin = tables::kCategoryRuns;
  const CategoryRun* end = begin + tables::kCategoryRunCount;
  // The last run whose first code point is <= cpt.
  const CategoryRun* it = std::upper_bound(
      begin, end, cpt, [](uint32_t c, const CategoryRun& run) { return c < run.first; });
  return it == begin ? Category::kUndefined : (it - 1)->category;
}

bool is_whitespace(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20;
  switch (cpt) {
    case 0x0085:
    case 0x00A0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cpt >= 0x2000 && cpt <= 0x200A;
  }
}

uint32_t to_lower(uint32_t cpt) {
  using tables::LowerRun;
  const LowerRun* begin = tables::kLowerRuns;
  const LowerRun* end = begin + tables::kLowerRunCount;
  const LowerRun* it = std::upper_bound(
      begin, end, cpt, [](uint32_t c, const LowerRun& run) { return c < run.first; });
  if (it == begin) return cpt;
  const LowerRun& run = *(it - 1);
  const uint32_t k = (cpt - run.first) / run.stride;
  if (k >= run.count || run.first + k * run.stride != cpt) return cpt;
  return static_cast<uint32_t>(static_cast<int64_t>(cpt) + run.delta);
}

uint32_t nfd_first(uint32_t cpt) {
  using tables::NfdRange;
  const NfdRange* begin = tables::kNfdRanges;
  const NfdRange* end = begin + tables::kNfdRangeCount;
  const NfdRange* it = std::upper_bound(
      begin, end, cpt, [](uint32_t c, const NfdRange& range) { return c < range.first; });
  if (it == begin) return cpt;
  const NfdRange& range = *(it - 1);
  return cpt <= range.last ? range.nfd : cpt;
}

size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

uint32_t decode_utf8(std::string_view text, size_t& offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) {
    offset += 1;
    return b0;
  }
  size_t n = 0;
  uint32_t cpt = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2;
    cpt = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3;
    cpt = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4;
    cpt = b0 & 0x07;
  }
  bool ok = n != 0 && offset + n <= text.size();
  for (size_t i = 1; ok && i < n; ++i) {
    ok = is_continuation(byte(i));
    cpt = (cpt << 6) | (byte(i) & 0x3F);
  }
  if (!ok || cpt > kMaxCodePoint) {
    offset += 1;
    return kReplacementChar;
  }
  offset += n;
  return cpt;
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) cpts.push_back(decode_utf8(text, offset));
  return cpts;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    cpt = std::min(cpt, kMaxCodePoint);
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string to_utf8(uint32_t cpt) {
  std::string out;
  append_utf8(out, cpt);
  return out;
}

Utf8Char check_utf8_char(std::string_view text, size_t offset) {
  using Status = Utf8Char::Status;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return {Status::kValid, 1};
  size_t n = 0;
  // The allowed range of the second byte narrows for E0, ED, F0 and F4 (overlongs,
  // surrogates and code points beyond U+10FFFF are rejected there).
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Status::kInvalid, 1};
  }
  for (size_t i = 1; i < n; ++i) {
    if (offset + i >= text.size()) return {Status::kIncomplete, i};
    const uint8_t b = byte(i);
    if (i == 1 ? (b < lo || b > hi) : !is_continuation(b)) return {Status::kInvalid, i};
  }
  return {Status::kValid, n};
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    const Utf8Char c = check_utf8_char(text, offset);
    if (c.status == Utf8Char::Status::kValid) {
      out.append(text.substr(offset, c.length));
    } else {
      append_utf8(out, kReplacementChar);
    }
    offset += c.length;
  }
  return out;
}

uint32_t byte_to_bpe_char(uint8_t byte) {
  return kByteAlphabet[byte];
}

int bpe_char_to_byte(uint32_t cpt) {
  if (cpt < 0x100) return is_self_mapped_byte(static_cast<int>(cpt)) ? static_cast<int>(cpt) : -1;
  // U+0100 + k is the k-th byte (in increasing order) that is not self-mapped.
  uint32_t k = cpt - 0x100;
  for (int b = 0; b < 256; ++b) {
    if (is_self_mapped_byte(b)) continue;
    if (k == 0) return b;
    --k;
  }
  return -1;
}

}  // namespace qrun::unicode
