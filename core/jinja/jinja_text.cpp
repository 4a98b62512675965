// Python str semantics over UTF-8 bytes. Characters are well-formed UTF-8 sequences; a byte
// that starts no well-formed sequence is a character of its own and is copied unchanged, so
// slicing and case mapping never lose or invent bytes.
#include "core/jinja/jinja_text.h"

#include "core/unicode/unicode.h"

namespace qrun::jinja::text {
namespace {

size_t char_length(std::string_view s, size_t offset) {
  const unicode::Utf8Char c = unicode::check_utf8_char(s, offset);
  return c.status == unicode::Utf8Char::Status::kValid ? c.length : 1;
}

// Applies `map` to every valid character; invalid bytes are copied as they are.
template <class Map>
std::string map_chars(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t cpt = code_point_at(s, i, &len);
    if (cpt == unicode::kReplacementChar && len == 1 && static_cast<uint8_t>(s[i]) >= 0x80) {
      out.push_back(s[i]);
    } else {
      map(out, cpt);
    }
    i += len;
  }
  return out;
}

bool is_cased(uint32_t cpt) {
  return to_lower(cpt) != cpt || to_upper(cpt) != cpt;
}

bool is_line_break(uint32_t cpt) {
  switch (cpt) {
    case '\n':
    case '\r':
    case 0x0B:
    case 0x0C:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x85:
    case 0x2028:
    case 0x2029:
      return true;
    default:
      return false;
  }
}

bool in_set(uint32_t cpt, const std::optional<std::string>& chars) {
  if (!chars) return is_space(cpt);
  size_t i = 0;
  while (i < chars->size()) {
    size_t len = 0;
    if (code_point_at(*chars, i, &len) == cpt) return true;
    i += len;
  }
  return false;
}

}  // namespace

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offsets.push_back(i);
    i += char_length(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += char_length(s, i)) ++n;
  return n;
}

uint32_t code_point_at(std::string_view s, size_t offset, size_t* length) {
  const unicode::Utf8Char c = unicode::check_utf8_char(s, offset);
  if (c.status != unicode::Utf8Char::Status::kValid) {
    *length = 1;
    return static_cast<uint8_t>(s[offset]) < 0x80 ? static_cast<uint8_t>(s[offset])
                                                  : unicode::kReplacementChar;
  }
  *length = c.length;
  size_t pos = offset;
  return unicode::decode_utf8(s, pos);
}

bool is_space(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 0x09 && cpt <= 0x0D) || (cpt >= 0x1C && cpt <= 0x20);
  return unicode::is_whitespace(cpt);
}

bool is_alpha(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 'a' && cpt <= 'z') || (cpt >= 'A' && cpt <= 'Z');
  return unicode::category(cpt) == unicode::Category::kLetter;
}

bool is_digit(uint32_t cpt) {
  if (cpt < 0x80) return cpt >= '0' && cpt <= '9';
  return unicode::category(cpt) == unicode::Category::kNumber;
}

uint32_t to_lower(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt;
  return unicode::to_lower(cpt);
}

uint32_t to_upper(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 'a' && cpt <= 'z') ? cpt - 32 : cpt;
  // The inverse of the lowercase runs; the first (lowest) source wins, as in Unicode.
  for (size_t r = 0; r < unicode::tables::kLowerRunCount; ++r) {
    const unicode::tables::LowerRun& run = unicode::tables::kLowerRuns[r];
    const int64_t base = static_cast<int64_t>(run.first) + run.delta;
    const int64_t diff = static_cast<int64_t>(cpt) - base;
    if (diff < 0 || diff % run.stride != 0 || diff / run.stride >= run.count) continue;
    const uint32_t upper = static_cast<uint32_t>(run.first + diff);
    if (upper != cpt) return upper;
  }
  return cpt;
}

void append_code_point(std::string& out, uint32_t cpt) {
  unicode::append_utf8(out, cpt);
}

std::string upper(std::string_view s) {
  return map_chars(s, [](std::string& out, uint32_t c) {
    if (c == 0xDF) {
      out += "SS";  // the one full mapping chat templates are likely to meet
    } else {
      append_code_point(out, to_upper(c));
    }
  });
}

std::string lower(std::string_view s) {
  return map_chars(s, [](std::string& out, uint32_t c) { append_code_point(out, to_lower(c)); });
}

std::string swapcase(std::string_view s) {
  return map_chars(s, [](std::string& out, uint32_t c) {
    const uint32_t l = to_lower(c);
    append_code_point(out, l != c ? l : to_upper(c));
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](std::string& out, uint32_t c) {
    append_code_point(out, first ? to_upper(c) : to_lower(c));
    first = false;
  });
}

std::string title(std::string_view s) {
  bool previous_cased = false;
  return map_chars(s, [&](std::string& out, uint32_t c) {
    if (is_cased(c)) {
      append_code_point(out, previous_cased ? to_lower(c) : to_upper(c));
      previous_cased = true;
    } else {
      append_code_point(out, c);
      previous_cased = false;
    }
  });
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::vector<size_t> off = char_offsets(s);
  size_t b = 0;
  size_t e = off.size() - 1;  // character indices [b, e)
  size_t len = 0;
  while (left && b < e && in_set(code_point_at(s, off[b], &len), chars)) ++b;
  while (right && e > b && in_set(code_point_at(s, off[e - 1], &len), chars)) --e;
  return std::string(s.substr(off[b], off[e] - off[b]));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t pos = s.find(*sep, start);
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, pos - start));
      start = pos + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  size_t i = 0;
  size_t len = 0;
  while (true) {
    while (i < s.size() && is_space(code_point_at(s, i, &len))) i += len;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(s.substr(i));
      break;
    }
    const size_t start = i;
    while (i < s.size() && !is_space(code_point_at(s, i, &len))) i += len;
    parts.emplace_back(s.substr(start, i - start));
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> parts;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit && end >= sep->size()) {
      const size_t pos = s.rfind(*sep, end - sep->size());
      if (pos == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos + sep->size(), end - pos - sep->size()));
      end = pos;
    }
    parts.emplace_back(s.substr(0, end));
  } else {
    const std::vector<size_t> off = char_offsets(s);
    size_t e = off.size() - 1;
    size_t len = 0;
    while (true) {
      while (e > 0 && is_space(code_point_at(s, off[e - 1], &len))) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.emplace_back(s.substr(0, off[e]));
        break;
      }
      const size_t end = e;
      while (e > 0 && !is_space(code_point_at(s, off[e - 1], &len))) --e;
      parts.emplace_back(s.substr(off[e], off[end] - off[e]));
    }
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = code_point_at(s, i, &len);
    if (!is_line_break(c)) {
      i += len;
      continue;
    }
    size_t eol = i + len;
    if (c == '\r' && eol < s.size() && s[eol] == '\n') ++eol;
    lines.emplace_back(s.substr(start, (keepends ? eol : i) - start));
    start = i = eol;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(char_count(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to,
                    int64_t max_count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {
    const std::vector<size_t> off = char_offsets(s);
    for (size_t c = 0; c + 1 < off.size(); ++c) {
      if (max_count < 0 || done < max_count) {
        out += to;
        ++done;
      }
      out += s.substr(off[c], off[c + 1] - off[c]);
    }
    if (max_count < 0 || done < max_count) out += to;
    return out;
  }
  size_t start = 0;
  while (max_count < 0 || done < max_count) {
    const size_t pos = s.find(from, start);
    if (pos == std::string_view::npos) break;
    out += s.substr(start, pos - start);
    out += to;
    start = pos + from.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool rfind) {
  const size_t pos = rfind ? s.rfind(sub) : s.find(sub);
  if (pos == std::string_view::npos) return -1;
  return static_cast<int64_t>(char_count(s.substr(0, pos)));
}

}  // namespace qrun::jinja::text
