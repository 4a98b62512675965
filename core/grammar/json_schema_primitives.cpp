// The shared rules of schema grammars (as llama.cpp's json-schema-to-grammar), the string
// formats, and integer ranges written as digit rules. A range [lo, hi] splits into numbers
// of each digit count; a same-length range [a, b] is a shared prefix, then at most three
// branches: a's first digit followed by [a's rest, 9..9], the digits strictly between
// followed by any digits, b's first digit followed by [0..0, b's rest]. Number ranges split
// the same way on the integer part; the digits after the point compare as strings padded
// with zeros, one digit at a time.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "core/grammar/json_schema_internal.h"

namespace qrun::schema {
namespace {

// Hex digits of one \uXXXX escape that is not a surrogate, or a surrogate pair: JSON
// parsers reject lone surrogates, and a pair is one character for minLength/maxLength.
#define QRUN_HEX "[0-9a-fA-F]"
#define QRUN_HEX_CHAR                                                                      \
  "[0-9a-cA-CefEF] " QRUN_HEX "{3} | [dD] [0-7] " QRUN_HEX "{2} | [dD] [89abAB] " QRUN_HEX \
  "{2} [\\\\] \"u\" [dD] [c-fC-F] " QRUN_HEX "{2}"
#define QRUN_HOUR "([01] [0-9] | \"2\" [0-3])"
#define QRUN_MINUTE "[0-5] [0-9]"

const std::map<std::string, std::string> kPrimitives = {
    {"space", R"(| " " | "\n" [ \t]{0,20})"},
    {"boolean", R"(("true" | "false") space)"},
    {"null", R"("null" space)"},
    {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
    {"decimal-part", R"([0-9]{1,16})"},
    {"integer", R"(("-"? integral-part) space)"},
    {"number", R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)"},
    {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ()" QRUN_HEX_CHAR "))"},
    {"string", R"("\"" char* "\"" space)"},
    {"plain-char", R"([^"\\\x7F\x00-\x1F])"},  // a character of a key written without escapes
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object",
     R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"},
    {"array", R"("[" space ( value ("," space value)* )? "]" space)"},
    // Formats. Years 1000..9999; February has 28 days (a grammar does not know leap years).
    {"date",
     R"([1-9] [0-9]{3} "-" ( ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))"
     R"( | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30"))"
     R"( | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8]) ))"},
    {"time", QRUN_HOUR " \":\" " QRUN_MINUTE " \":\" " QRUN_MINUTE
                       R"( ("." [0-9]{1,6})? ("Z" | [+-] )" QRUN_HOUR " \":\" " QRUN_MINUTE ")"},
    {"date-string", R"("\"" date "\"" space)"},
    {"time-string", R"("\"" time "\"" space)"},
    {"date-time-string", R"("\"" date "T" time "\"" space)"},
    {"uuid-string", R"("\"" )" QRUN_HEX "{8} \"-\" " QRUN_HEX "{4} \"-\" " QRUN_HEX
                    "{4} \"-\" " QRUN_HEX "{4} \"-\" " QRUN_HEX R"({12} "\"" space)"},
};
#undef QRUN_HEX
#undef QRUN_HEX_CHAR
#undef QRUN_HOUR
#undef QRUN_MINUTE

const std::map<std::string, std::vector<std::string>> kPrimitiveDeps = {
    {"boolean", {"space"}},
    {"null", {"space"}},
    {"integer", {"integral-part", "space"}},
    {"number", {"integral-part", "decimal-part", "space"}},
    {"string", {"char", "space"}},
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"string", "value", "space"}},
    {"array", {"value", "space"}},
    {"date-string", {"date", "space"}},
    {"time-string", {"time", "space"}},
    {"date-time-string", {"date", "time", "space"}},
    {"uuid-string", {"space"}},
};

std::string digit_class(char lo, char hi) {
  return lo == hi ? std::string("\"") + lo + "\"" : std::string("[") + lo + "-" + hi + "]";
}

std::string any_digits(size_t n) {
  return n == 0 ? "" : n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

std::string join(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + " " + b;
}

// The digit strings of a's length from a to b (a <= b, same length).
std::string same_length(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a[0] == b[0]) return join(digit_class(a[0], a[0]), same_length(a.substr(1), b.substr(1)));
  const size_t n = a.size() - 1;
  const bool a_low = a.find_first_not_of('0', 1) == std::string::npos;   // a = d00..0
  const bool b_high = b.find_first_not_of('9', 1) == std::string::npos;  // b = d99..9
  std::vector<std::string> alts;
  if (!a_low)
    alts.push_back(join(digit_class(a[0], a[0]), same_length(a.substr(1), std::string(n, '9'))));
  const char mid_lo = a_low ? a[0] : static_cast<char>(a[0] + 1);
  const char mid_hi = b_high ? b[0] : static_cast<char>(b[0] - 1);
  if (mid_lo <= mid_hi) alts.push_back(join(digit_class(mid_lo, mid_hi), any_digits(n)));
  if (!b_high)
    alts.push_back(join(digit_class(b[0], b[0]), same_length(std::string(n, '0'), b.substr(1))));
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Non-negative integers in [lo, hi] (hi < 0: no bound, up to 16 digits or lo's length),
// as alternatives.
std::vector<std::string> non_negative(int64_t lo, int64_t hi) {
  const std::string lo_s = std::to_string(lo);
  const std::string hi_s = hi < 0 ? std::string() : std::to_string(hi);
  const size_t max_len = hi < 0 ? lo_s.size() : hi_s.size();
  std::vector<std::string> alts;
  for (size_t len = lo_s.size(); len <= max_len; ++len) {
    const std::string a = len == lo_s.size() ? lo_s : std::string("1").append(len - 1, '0');
    const std::string b = hi >= 0 && len == max_len ? hi_s : std::string(len, '9');
    alts.push_back(same_length(a, b));
  }
  if (hi < 0 && lo_s.size() < 16) {
    alts.push_back(format("[1-9] [0-9]{%zu,15}", lo_s.size()));
  }
  return alts;
}

std::string alternation(const std::vector<std::string>& alts) {
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
  return alts.size() == 1 ? out : "(" + out + ")";
}

// The digit strings after a decimal point (a tail of at most kMaxBoundDecimals digits past
// the bounds' own) whose value 0.d lies between 0.a and 0.b: `empty` whether no digit at all
// (the value 0) is one, `more` a GBNF expression for those of one digit or more ("" when
// none is).
struct Fraction {
  bool empty = false;
  std::string more;
};

// `head` followed by a digit string of `rest`.
std::string followed_by(const std::string& head, const Fraction& rest) {
  if (rest.more.empty()) return head;
  return head + " (" + rest.more + ")" + (rest.empty ? "?" : "");
}

// Any digit string of 1 to n digits, and of none too.
Fraction any_fraction(size_t n) {
  return {true, format("[0-9]{1,%zu}", n)};
}

// a and b are suffixes of bounds' digits (no trailing zeros: empty means zeros from here);
// b is absent for no upper bound.
Fraction fraction(const std::string& a, bool a_incl, const std::optional<std::string>& b,
                  bool b_incl) {
  if (a.empty() && !b) {  // from 0 (or above it) up
    if (a_incl) return any_fraction(kMaxBoundDecimals);
    return {false, format("\"0\"{0,%zu} [1-9] [0-9]{0,%zu}", kMaxBoundDecimals - 1,
                          kMaxBoundDecimals - 1)};
  }
  if (a.empty() && b->empty()) {  // exactly 0
    if (!(a_incl && b_incl)) return {};
    return {true, format("\"0\"{1,%zu}", kMaxBoundDecimals)};
  }
  // The first digit: a's, those strictly between (any digits after them), b's.
  const char a0 = a.empty() ? '0' : a[0];
  const std::string a_rest = a.empty() ? "" : a.substr(1);
  const char b0 = !b ? static_cast<char>('9' + 1) : b->empty() ? '0' : (*b)[0];
  const std::optional<std::string> b_rest =
      !b ? std::nullopt : std::optional<std::string>(b->empty() ? "" : b->substr(1));
  std::vector<std::string> alts;
  auto add = [&](char lo, char hi, const Fraction& rest) {
    if (lo > hi || (!rest.empty && rest.more.empty())) return;
    alts.push_back(followed_by(digit_class(lo, hi), rest));
  };
  if (a0 == b0) {
    add(a0, a0, fraction(a_rest, a_incl, b_rest, b_incl));
  } else {
    add(a0, a0, fraction(a_rest, a_incl, std::nullopt, false));
    add(static_cast<char>(a0 + 1), static_cast<char>(b0 - 1), any_fraction(kMaxBoundDecimals - 1));
    if (b) add(b0, b0, fraction("", true, b_rest, b_incl));
  }
  Fraction out;
  out.empty = a.empty() && a_incl && (!b || !b->empty() || b_incl);
  if (!alts.empty()) out.more = alternation(alts);
  return out;
}

// "." and the digits of `f`, or nothing where the value 0 is in it; nullopt when f is empty.
std::optional<std::string> point(const Fraction& f) {
  if (f.more.empty()) return f.empty ? std::optional<std::string>("") : std::nullopt;
  const std::string body = "\".\" (" + f.more + ")";
  return f.empty ? "(" + body + ")?" : body;
}

int64_t integer_of(const NumberBound& b) {
  return std::stoll(b.int_part);
}

// Non-negative numbers between a and b (a <= b; b absent: no upper bound).
std::vector<std::string> non_negative_numbers(const NumberBound& a,
                                              const std::optional<NumberBound>& b) {
  std::vector<std::string> alts;
  auto add = [&](const std::string& integer, const Fraction& f) {
    if (std::optional<std::string> p = point(f)) alts.push_back(join(integer, *p));
  };
  const int64_t ai = integer_of(a);
  const std::string literal_a = "\"" + a.int_part + "\"";
  const Fraction any = any_fraction(kMaxBoundDecimals);
  if (!b) {
    add(literal_a, fraction(a.frac, a.inclusive, std::nullopt, false));
    if (ai + 1 <= kMaxIntegerBound) add(alternation(non_negative(ai + 1, -1)), any);
    return alts;
  }
  const int64_t bi = integer_of(*b);
  if (ai == bi) {
    add(literal_a, fraction(a.frac, a.inclusive, b->frac, b->inclusive));
    return alts;
  }
  add(literal_a, fraction(a.frac, a.inclusive, std::nullopt, false));
  if (ai + 1 <= bi - 1) add(alternation(non_negative(ai + 1, bi - 1)), any);
  add("\"" + b->int_part + "\"", fraction("", true, b->frac, b->inclusive));
  return alts;
}

}  // namespace

const std::string* primitive_body(const std::string& name) {
  const auto it = kPrimitives.find(name);
  return it == kPrimitives.end() ? nullptr : &it->second;
}

const std::vector<std::string>& primitive_deps(const std::string& name) {
  static const std::vector<std::string> kNone;
  const auto it = kPrimitiveDeps.find(name);
  return it == kPrimitiveDeps.end() ? kNone : it->second;
}

const char* format_rule(std::string_view format) {
  if (format == "date") return "date-string";
  if (format == "time") return "time-string";
  if (format == "date-time") return "date-time-string";
  if (format == "uuid") return "uuid-string";
  return nullptr;
}

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives: "-" then |x| in [max(1, -hi), -lo]
    const int64_t abs_lo = hi && *hi < 0 ? -*hi : 1;
    alts.push_back(std::string("\"-\" ").append(alternation(non_negative(abs_lo, lo ? -*lo : -1))));
  }
  if (!hi || *hi >= 0) {
    for (std::string& a : non_negative(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1)) {
      alts.push_back(a);
    }
  }
  return alternation(alts);
}

Result<NumberBound> parse_bound(std::string_view text, bool inclusive) {
  NumberBound b;
  b.inclusive = inclusive;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    b.negative = true;
    ++i;
  }
  std::string digits;
  int64_t point = -1;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    if (text[i] == '.') {
      point = static_cast<int64_t>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    const std::string exponent(text.substr(i + 1));
    point += std::clamp<int64_t>(std::strtoll(exponent.c_str(), nullptr, 10), -400, 400);
  }
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<int64_t>(digits.size()))
    digits.append(static_cast<size_t>(point) - digits.size(), '0');
  b.int_part = digits.substr(0, static_cast<size_t>(point));
  b.frac = digits.substr(static_cast<size_t>(point));
  b.int_part.erase(0, std::min(b.int_part.find_first_not_of('0'), b.int_part.size()));
  if (b.int_part.empty()) b.int_part = "0";
  b.frac.erase(b.frac.find_last_not_of('0') + 1);
  if (b.int_part == "0" && b.frac.empty()) b.negative = false;
  if (b.frac.size() > kMaxBoundDecimals) {
    return make_error(ErrorCode::kUsage, format("at most %zu digits after the point are supported",
                                                kMaxBoundDecimals));
  }
  if (b.int_part.size() > 19 || std::stoull(b.int_part) > static_cast<uint64_t>(kMaxIntegerBound)) {
    return make_error(ErrorCode::kUsage, "out of the supported range (at most 10^18 in magnitude)");
  }
  return b;
}

int compare_bounds(const NumberBound& a, const NumberBound& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = 0;
  if (a.int_part.size() != b.int_part.size()) {
    magnitude = a.int_part.size() < b.int_part.size() ? -1 : 1;
  } else if (a.int_part != b.int_part) {
    magnitude = a.int_part < b.int_part ? -1 : 1;
  } else if (a.frac != b.frac) {
    magnitude = a.frac < b.frac ? -1 : 1;  // no trailing zeros: a prefix is the smaller
  }
  return a.negative ? -magnitude : magnitude;
}

std::string number_range(const std::optional<NumberBound>& lo,
                         const std::optional<NumberBound>& hi) {
  const NumberBound zero{false, "0", "", true};
  std::vector<std::string> alts;
  if (!lo || lo->negative) {  // negatives: "-" then |x|, above 0 (no "-0")
    NumberBound from = hi && hi->negative ? *hi : zero;
    from.negative = false;
    from.inclusive = hi && hi->negative && hi->inclusive;
    std::optional<NumberBound> to = lo;
    if (to) to->negative = false;
    alts.push_back("\"-\" " + alternation(non_negative_numbers(from, to)));
  }
  if (!hi || !hi->negative) {
    if (hi && hi->int_part == "0" && hi->frac.empty() && !hi->inclusive) return alternation(alts);
    NumberBound from = lo && !lo->negative ? *lo : zero;
    for (std::string& a : non_negative_numbers(from, hi)) alts.push_back(std::move(a));
  }
  return alternation(alts);
}

}  // namespace qrun::schema
