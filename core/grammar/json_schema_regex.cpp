// The regex subset of `pattern`, converted to GBNF for the JSON-encoded text of a string:
// literals, `.`, classes ([a-z], [^"], with \d \w \s inside), the escapes \d \D \w \W \s
// \S \n \r \t \f \v \xHH \uHHHH and escaped punctuation, groups (...) and (?:...),
// alternation, the quantifiers ? * + {m} {m,} {m,n} (m, n <= 1000; a lazy `?` after one
// is accepted, it matches the same strings), `^` first and `$` last. The whole string
// must match, as if the pattern were anchored at both ends. Characters that JSON escapes
// (", \, control characters) become their escapes; a negated class or `.` produces only
// characters that need no escape besides \" and \\.
#include <algorithm>
#include <cctype>

#include "core/grammar/json_schema_internal.h"

namespace qrun::schema {
namespace {

constexpr int64_t kMaxRegexRepetition = 1000;
constexpr int kMaxRegexDepth = 64;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Failure {
  size_t column;
  std::string what;
};

// A code point inside a GBNF class or literal, escaped unless plain ASCII.
std::string gbnf_cp(uint32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
    return std::string(1, static_cast<char>(cp));
  }
  if (cp <= 0xFF) return format("\\x%02X", cp);
  if (cp <= 0xFFFF) return format("\\u%04X", cp);
  return format("\\U%08X", cp);
}

// Whether the JSON text of a string writes `cp` as an escape.
bool needs_escape(uint32_t cp) {
  return cp == '"' || cp == '\\' || cp < 0x20 || cp == 0x7F;
}

// The GBNF literal of the JSON encoding of `cp`.
std::string json_literal(uint32_t cp) {
  switch (cp) {
    case '"':
      return R"("\\\"")";
    case '\\':
      return R"("\\\\")";
    case '\n':
      return R"("\\n")";
    case '\r':
      return R"("\\r")";
    case '\t':
      return R"("\\t")";
    case '\b':
      return R"("\\b")";
    case '\f':
      return R"("\\f")";
    default:
      break;
  }
  if (needs_escape(cp)) return format("\"\\\\u%04X\"", cp);
  return std::string("\"").append(gbnf_cp(cp)).append("\"");
}

// GBNF for one character of a set: plain characters in one class, escaped ones as their
// escape literals. A negated set allows plain characters outside it, and \" and \\ unless
// the set excludes them.
std::string class_to_gbnf(Ranges ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::string> alts;
  if (!negated) {
    std::string plain;
    for (auto [lo, hi] : ranges) {
      for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x7F); ++cp) {
        if (needs_escape(cp)) alts.push_back(json_literal(cp));
      }
      // The plain part of [lo, hi]: split around the characters that need escapes.
      uint32_t start = lo;
      for (uint32_t cp = lo; cp <= hi + 1 && cp <= 0x80; ++cp) {
        if (cp == hi + 1 || cp == 0x80 || needs_escape(cp)) {
          if (start < cp && !needs_escape(start)) plain += gbnf_cp(start);
          if (cp - 1 > start) plain.append("-").append(gbnf_cp(cp - 1));
          start = cp + 1;
        }
      }
      if (hi >= 0x80) {
        const uint32_t from = std::max<uint32_t>(lo, 0x80);
        plain += gbnf_cp(from) + (hi > from ? "-" + gbnf_cp(hi) : "");
      }
    }
    std::sort(alts.begin(), alts.end());
    alts.erase(std::unique(alts.begin(), alts.end()), alts.end());
    if (!plain.empty()) alts.insert(alts.begin(), "[" + plain + "]");
  } else {
    std::string excluded = R"(\x22\x5C\x00-\x1F\x7F)";
    bool quote = true, backslash = true;
    for (auto [lo, hi] : ranges) {
      excluded += gbnf_cp(lo) + (hi > lo ? "-" + gbnf_cp(hi) : "");
      if (lo <= '"' && '"' <= hi) quote = false;
      if (lo <= '\\' && '\\' <= hi) backslash = false;
    }
    alts.push_back("[^" + excluded + "]");
    if (quote) alts.push_back(json_literal('"'));
    if (backslash) alts.push_back(json_literal('\\'));
  }
  if (alts.empty()) return "";
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return alts.size() == 1 ? out : "(" + out + ")";
}

const Ranges kDigits = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexParser {
 public:
  explicit RegexParser(std::string_view text) {
    for (size_t i = 0; i < text.size();) {  // decode UTF-8 (the schema was valid JSON)
      const auto b = static_cast<unsigned char>(text[i]);
      const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
      uint32_t cp = n == 1 ? b : (b & (0x7Fu >> n));
      for (int k = 1; k < n && i + static_cast<size_t>(k) < text.size(); ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(text[i + static_cast<size_t>(k)]) & 0x3Fu);
      }
      cps_.push_back(cp);
      i += static_cast<size_t>(n);
    }
  }

  Result<std::string> run() {
    if (!cps_.empty() && cps_[0] == '^') ++pos_;
    end_ = cps_.size();
    if (end_ > pos_ && cps_[end_ - 1] == '$' && !escaped_at(end_ - 1)) --end_;
    std::string out;
    if (!alternation(out, 0)) return fail();
    if (pos_ < end_) {
      return fail_at(pos_, cps_[pos_] == ')' ? "an unmatched ')'" : "an unexpected character");
    }
    return out.empty() ? "\"\"" : out;
  }

 private:
  bool escaped_at(size_t i) const {
    size_t n = 0;
    while (i > n && cps_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }
  bool set_error(size_t at, std::string what) {
    if (!err_) err_ = Failure{at + 1, std::move(what)};
    return false;
  }
  Error fail() const {
    return make_error(ErrorCode::kUsage,
                      format("column %zu: %s", err_->column, err_->what.c_str()));
  }
  Error fail_at(size_t at, const std::string& what) {
    set_error(at, what);
    return fail();
  }
  bool at_end() const { return pos_ >= end_; }
  uint32_t peek() const { return at_end() ? 0 : cps_[pos_]; }

  bool alternation(std::string& out, int depth) {
    if (depth > kMaxRegexDepth) return set_error(pos_, "groups nested too deeply");
    std::vector<std::string> alts(1);
    if (!sequence(alts.back(), depth)) return false;
    while (!at_end() && peek() == '|') {
      ++pos_;
      alts.emplace_back();
      if (!sequence(alts.back(), depth)) return false;
    }
    if (alts.size() == 1) {
      out = alts[0];
      return true;
    }
    out = "(";
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i > 0) out += " | ";
      out += alts[i].empty() ? std::string("\"\"") : alts[i];
    }
    out += ")";
    return true;
  }

  bool sequence(std::string& out, int depth) {
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::string item;
      if (!atom(item, depth)) return false;
      if (!quantifier(item)) return false;
      if (!item.empty()) out += (out.empty() ? "" : " ") + item;
    }
    return true;
  }

  bool quantifier(std::string& item) {
    if (at_end()) return true;
    const uint32_t c = peek();
    int64_t lo = 0, hi = -1;
    const size_t at = pos_;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      lo = c == '+' ? 1 : 0;
      hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
      ++pos_;
      if (!number(lo)) return set_error(at, "'{' that is not a repetition {m}, {m,} or {m,n}");
      hi = lo;
      if (peek() == ',') {
        ++pos_;
        hi = -1;
        if (peek() >= '0' && peek() <= '9' && !number(hi)) return false;
      }
      if (peek() != '}') return set_error(pos_, "'}' closing the repetition");
      ++pos_;
      if (hi >= 0 && hi < lo) return set_error(at, "a repetition {m,n} with n below m");
      if (lo > kMaxRegexRepetition || hi > kMaxRegexRepetition) {
        return set_error(at, format("a repetition of at most %lld",
                                    static_cast<long long>(kMaxRegexRepetition)));
      }
    } else {
      return true;
    }
    if (peek() == '?') ++pos_;  // lazy: the same strings
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      return set_error(pos_, "a quantifier after a quantifier (possessive or nested)");
    }
    if (item.empty()) return true;
    const std::string x = std::string("(").append(item).append(")");
    if (hi == 0) {
      item.clear();
    } else if (lo == 0 && hi == 1) {
      item = x + "?";
    } else if (hi < 0) {
      item = x + (lo == 0 ? "*" : lo == 1 ? "+" : format("{%lld,}", static_cast<long long>(lo)));
    } else {
      item = x + (lo == hi ? format("{%lld}", static_cast<long long>(lo))
                           : format("{%lld,%lld}", static_cast<long long>(lo),
                                    static_cast<long long>(hi)));
    }
    return true;
  }

  bool number(int64_t& v) {
    const size_t start = pos_;
    v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), kMaxRegexRepetition + 1);
      ++pos_;
    }
    return pos_ > start;
  }

  bool atom(std::string& out, int depth) {
    const size_t at = pos_;
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (peek() == '?') {
          if (pos_ + 1 < end_ && cps_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return set_error(at, "'(?' (lookaround and named groups are not in the subset)");
          }
        }
        std::string inner;
        if (!alternation(inner, depth + 1)) return false;
        if (at_end() || peek() != ')') return set_error(pos_, "')' closing the group");
        ++pos_;
        out = inner.empty() ? "" : "(" + inner + ")";
        return true;
      }
      case '[':
        return char_class(out, at);
      case '.':
        out = class_to_gbnf({{'\n', '\n'}}, /*negated=*/true);
        return true;
      case '\\':
        return escape(out, at);
      case '^':
      case '$':
        return set_error(at, std::string("an anchor '") + static_cast<char>(c) +
                                 "' other than at the start or end of the pattern");
      case '*':
      case '+':
      case '?':
      case '{':
        return set_error(at, "something to repeat before the quantifier");
      default:
        out = json_literal(c);
        return true;
    }
  }

  // After a backslash: a class escape into `ranges` (negated ones set `negated`), or a
  // single character.
  bool escape_ranges(Ranges& ranges, bool& negated, size_t at) {
    if (at_end()) return set_error(at, "a character after '\\'");
    const uint32_t e = peek();
    ++pos_;
    negated = false;
    switch (e) {
      case 'd':
      case 'D':
        ranges = kDigits;
        negated = e == 'D';
        return true;
      case 'w':
      case 'W':
        ranges = kWord;
        negated = e == 'W';
        return true;
      case 's':
      case 'S':
        ranges = kSpace;
        negated = e == 'S';
        return true;
      case 'n':
        ranges = {{'\n', '\n'}};
        return true;
      case 'r':
        ranges = {{'\r', '\r'}};
        return true;
      case 't':
        ranges = {{'\t', '\t'}};
        return true;
      case 'f':
        ranges = {{'\f', '\f'}};
        return true;
      case 'v':
        ranges = {{'\v', '\v'}};
        return true;
      case 'x':
      case 'u': {
        const int n = e == 'x' ? 2 : 4;
        uint32_t cp = 0;
        for (int i = 0; i < n; ++i) {
          const uint32_t h = peek();
          const int d = h >= '0' && h <= '9'   ? static_cast<int>(h - '0')
                        : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
                        : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                               : -1;
          if (at_end() || d < 0)
            return set_error(pos_,
                             format("%d hexadecimal digits after \\%c", n, static_cast<char>(e)));
          cp = cp * 16 + static_cast<uint32_t>(d);
          ++pos_;
        }
        ranges = {{cp, cp}};
        return true;
      }
      default:
        if (e < 0x80 && !std::isalnum(static_cast<int>(e))) {  // escaped punctuation
          ranges = {{e, e}};
          return true;
        }
        return set_error(at, format("the escape '\\%s' (backreferences, \\b, \\p{...} and the like "
                                    "are not in the subset)",
                                    gbnf_cp(e).c_str()));
    }
  }

  bool escape(std::string& out, size_t at) {
    Ranges ranges;
    bool negated = false;
    if (!escape_ranges(ranges, negated, at)) return false;
    out = ranges.size() == 1 && ranges[0].first == ranges[0].second && !negated
              ? json_literal(ranges[0].first)
              : class_to_gbnf(ranges, negated);
    return true;
  }

  bool char_class(std::string& out, size_t at) {
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (at_end()) return set_error(at, "']' closing the class");
      uint32_t c = peek();
      if (c == ']' && !first) break;
      first = false;
      const size_t item_at = pos_;
      ++pos_;
      uint32_t lo = c;
      if (c == '\\') {
        Ranges esc;
        bool esc_negated = false;
        if (!escape_ranges(esc, esc_negated, item_at)) return false;
        if (esc_negated)
          return set_error(item_at, "a negated escape (\\D, \\W, \\S) inside a class");
        if (esc.size() != 1 || esc[0].first != esc[0].second) {
          ranges.insert(ranges.end(), esc.begin(), esc.end());
          continue;
        }
        lo = esc[0].first;
      } else if (c == '[' && peek() == ':') {
        return set_error(item_at, "a POSIX class [:...:]");
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < end_ && cps_[pos_ + 1] != ']') {
        ++pos_;
        const size_t hi_at = pos_;
        hi = peek();
        ++pos_;
        if (hi == '\\') {
          Ranges esc;
          bool esc_negated = false;
          if (!escape_ranges(esc, esc_negated, hi_at)) return false;
          if (esc_negated || esc.size() != 1 || esc[0].first != esc[0].second) {
            return set_error(hi_at, "a single character at the end of a range");
          }
          hi = esc[0].first;
        }
        if (hi < lo) return set_error(item_at, "a range whose end is not below its start");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;  // ']'
    out = class_to_gbnf(ranges, negated);
    if (out.empty()) return set_error(at, "a class that matches some character");
    return true;
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  size_t end_ = 0;
  std::optional<Failure> err_;
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern) {
  return RegexParser(pattern).run();
}

}  // namespace qrun::schema
