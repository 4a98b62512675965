// Python's two string formatting languages: printf-style `fmt % args` (also the |format
// filter) and str.format with the format-spec mini-language ([[fill]align][sign][#][0][width]
// [,|_][.precision][type]). Floats go through C's printf, which formats e/f/g exactly as
// CPython does; widths and precisions are capped so no format can allocate without bound.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_ops.h"
#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

constexpr int64_t kMaxWidth = 1 << 20;

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > = ^ or 0 for the type's default
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

// Pads `body` to spec.width; '=' puts the padding after the sign/prefix of length `head`.
std::string align_to(const std::string& body, const Spec& s, char default_align, size_t head) {
  const int64_t len = static_cast<int64_t>(text::char_count(body));
  if (s.width <= len) return body;
  const int64_t pad = s.width - len;
  std::string fill;
  const auto fills = [&](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s.fill;
    return out;
  };
  switch (s.align ? s.align : default_align) {
    case '<':
      return body + fills(pad);
    case '^':
      return fills(pad / 2) + body + fills(pad - pad / 2);
    case '=':
      return body.substr(0, head) + fills(pad) + body.substr(head);
    default:
      return fills(pad) + body;
  }
}

std::string group_digits(const std::string& digits, char sep, int every) {
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

std::string to_base(uint64_t v, int base, bool upper) {
  if (v == 0) return "0";
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  while (v) {
    out.insert(out.begin(), digits[v % static_cast<uint64_t>(base)]);
    v /= static_cast<uint64_t>(base);
  }
  return out;
}

// An integer per spec (types b d o x X n c, or none).
Result<std::string> format_int(int64_t v, const Spec& s) {
  const char t = s.type ? s.type : 'd';
  if (t == 'c') {
    if (v < 0 || v > 0x10FFFF) return raw_error("%c arg not in range(0x110000)");
    std::string ch;
    text::append_code_point(ch, static_cast<uint32_t>(v));
    return align_to(ch, s, '<', 0);
  }
  const int base = t == 'b' ? 2 : t == 'o' ? 8 : (t == 'x' || t == 'X') ? 16 : 10;
  const uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits = to_base(mag, base, t == 'X');
  if (s.precision > 0 && static_cast<int64_t>(digits.size()) < s.precision)
    digits.insert(0, static_cast<size_t>(s.precision) - digits.size(), '0');
  if (s.grouping) digits = group_digits(digits, s.grouping, base == 10 ? 3 : 4);
  std::string head = v < 0 ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
  if (s.alt && base != 10) head += t == 'b' ? "0b" : t == 'o' ? "0o" : t == 'X' ? "0X" : "0x";
  Spec z = s;
  if (s.zero && !s.align) {
    z.fill = "0";
    z.align = '=';
  }
  return align_to(head + digits, z, '>', head.size());
}

// A float per spec (types e E f F g G %, or none: repr, or 'g' keeping a decimal point).
std::string format_float(double v, const Spec& s) {
  std::string body;
  const int64_t p = std::min<int64_t>(s.precision, 400);
  char t = s.type;
  if (!t && p < 0) {
    body = repr_float(std::fabs(v));
  } else {
    bool keep_point = false;
    int prec = static_cast<int>(p < 0 ? 6 : p);
    double x = std::fabs(v);
    if (t == '%') x *= 100.0;
    if (!t) {
      t = 'g';
      keep_point = true;
      if (prec == 0) prec = 1;
      // Python switches to exponent notation at exp >= precision - 1 for the empty type.
      char probe[64];
      std::snprintf(probe, sizeof(probe), "%.*e", prec - 1, x);
      const int exp = std::atoi(std::strchr(probe, 'e') + 1);
      if (std::isfinite(x) && exp >= prec - 1 && exp >= 0) t = 'e', --prec;
    }
    char fmt[16];
    std::snprintf(fmt, sizeof(fmt), "%%%s.%d%c", s.alt ? "#" : "", prec, t == '%' ? 'f' : t);
    std::vector<char> buf(static_cast<size_t>(prec) + 400);
    std::snprintf(buf.data(), buf.size(), fmt, x);
    body = buf.data();
    if (keep_point && t == 'e' && !s.alt) {
      // Like 'g', the empty type drops the mantissa's trailing zeros.
      const size_t e = body.find('e');
      size_t m = e;
      while (m > 0 && body[m - 1] == '0') --m;
      if (m > 0 && body[m - 1] == '.') --m;
      body.erase(m, e - m);
    }
    if (keep_point && std::isfinite(x) && body.find_first_of(".e") == std::string::npos)
      body += ".0";
    if (t == '%') body += '%';
  }
  if (s.grouping) {
    const size_t int_end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, int_end), s.grouping, 3) +
           (int_end == std::string::npos ? "" : body.substr(int_end));
  }
  const std::string head = std::signbit(v) && !std::isnan(v) ? "-"
                           : s.sign == '+'                   ? "+"
                           : s.sign == ' '                   ? " "
                                                             : "";
  Spec z = s;
  if (s.zero && !s.align) {
    z.fill = "0";
    z.align = '=';
  }
  return align_to(head + body, z, '>', head.size());
}

Result<Spec> parse_spec(const std::string& spec) {
  Spec s;
  size_t i = 0;
  size_t first_len = 0;
  if (!spec.empty()) text::code_point_at(spec, 0, &first_len);
  const auto is_align = [](char c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (first_len < spec.size() && is_align(spec[first_len])) {
    s.fill = spec.substr(0, first_len);
    s.align = spec[first_len];
    i = first_len + 1;
  } else if (!spec.empty() && is_align(spec[0])) {
    s.align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == 'z') ++i;
  if (i < spec.size() && spec[i] == '#') s.alt = true, ++i;
  if (i < spec.size() && spec[i] == '0') s.zero = true, ++i;
  const auto number = [&]() {
    int64_t n = -1;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      n = std::min<int64_t>((n < 0 ? 0 : n) * 10 + (spec[i] - '0'), kMaxWidth + 1);
      ++i;
    }
    return n;
  };
  s.width = number();
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    s.precision = number();
    if (s.precision < 0) return raw_error("Format specifier missing precision");
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i != spec.size()) return raw_error("Invalid format specifier '" + spec + "'");
  if (s.width > kMaxWidth || s.precision > kMaxWidth) return raw_error("format width too large");
  return s;
}

// format(value, spec) for str.format.
Result<std::string> format_value(const Value& v, const std::string& spec_text) {
  QRUN_JINJA_ASSIGN(const Spec s, parse_spec(spec_text));
  if (v.is_float() || (v.is_number() && s.type &&
                       std::string_view("eEfFgG%").find(s.type) != std::string_view::npos)) {
    if (s.type && std::string_view("eEfFgGn%").find(s.type) == std::string_view::npos)
      return raw_error(format("Unknown format code '%c' for object of type 'float'", s.type));
    return format_float(v.as_float(), s);
  }
  if (v.is_int() || (v.is_bool() && !spec_text.empty())) {
    if (s.precision >= 0) return raw_error("Precision not allowed in integer format specifier");
    return format_int(v.as_int(), s);
  }
  if (!v.is_string() && !spec_text.empty())
    return raw_error(format("unsupported format string passed to %s.__format__", type_name(v)));
  if (s.type && s.type != 's')
    return raw_error(format("Unknown format code '%c' for object of type 'str'", s.type));
  QRUN_JINJA_ASSIGN(std::string str, to_str(v));
  if (s.precision >= 0) {
    const std::vector<size_t> off = text::char_offsets(str);
    if (static_cast<size_t>(s.precision) + 1 < off.size())
      str.resize(off[static_cast<size_t>(s.precision)]);
  }
  return align_to(str, s, '<', 0);
}

// One printf conversion of `v`.
Result<std::string> percent_one(const Value& v, char conv, Spec s) {
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      QRUN_JINJA_ASSIGN(std::string str, conv == 's' ? to_str(v) : to_repr(v));
      if (s.precision >= 0) {
        const std::vector<size_t> off = text::char_offsets(str);
        if (static_cast<size_t>(s.precision) + 1 < off.size())
          str.resize(off[static_cast<size_t>(s.precision)]);
      }
      s.precision = -1;
      return align_to(str, s, '>', 0);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      const bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
      if (!v.is_number() || (!decimal && v.is_float())) {
        return raw_error(format("%%%c format: %s is required, not %s", conv,
                                decimal ? "a real number" : "an integer", type_name(v)));
      }
      int64_t i = 0;
      if (v.is_float()) {
        const double d = v.as_float();
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
          return raw_error("cannot convert float to integer");
        i = static_cast<int64_t>(d);
      } else {
        i = v.as_int();
      }
      s.type = decimal ? 'd' : conv;
      return format_int(i, s);
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (!v.is_number()) return raw_error(format("must be real number, not %s", type_name(v)));
      s.type = conv;
      if (s.precision < 0) s.precision = 6;
      return format_float(v.as_float(), s);
    case 'c':
      if (v.is_string() && text::char_count(v.as_string()) == 1)
        return align_to(v.as_string(), s, '>', 0);
      if (!v.is_int()) return raw_error("%c requires int or char");
      s.type = 'c';
      return format_int(v.as_int(), s);
    default:
      return raw_error(format("unsupported format character '%c'", conv));
  }
}

}  // namespace

Result<std::string> percent_format(const std::string& fmt, const Value& args) {
  ValueList positional;
  const bool mapping = args.is_dict();
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  const auto take = [&]() -> Result<Value> {
    if (next >= positional.size()) return raw_error("not enough arguments for format string");
    return positional[next++];
  };
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    if (fmt[i] != '%') {
      out += fmt[i++];
      continue;
    }
    if (++i >= fmt.size()) return raw_error("incomplete format");
    Value value;
    bool have_value = false;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) return raw_error("incomplete format key");
      if (!mapping) return raw_error("format requires a mapping");
      const Value* v = args.dict_ref().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!v) return raw_error("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      value = *v;
      have_value = used_mapping = true;
      i = close + 1;
    }
    Spec s;
    for (; i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos;
         ++i) {
      if (fmt[i] == '-') s.align = '<';
      if (fmt[i] == '+') s.sign = '+';
      if (fmt[i] == ' ' && s.sign != '+') s.sign = ' ';
      if (fmt[i] == '#') s.alt = true;
      if (fmt[i] == '0') s.zero = true;
    }
    const auto number = [&](int64_t* n) -> Result<void> {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        QRUN_JINJA_ASSIGN(const Value w, take());
        if (!w.is_int()) return raw_error("* wants int");
        *n = w.as_int();
      } else {
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9')
          *n = std::min<int64_t>((*n < 0 ? 0 : *n) * 10 + (fmt[i++] - '0'), kMaxWidth + 1);
      }
      if (*n > kMaxWidth) return raw_error("format width too large");
      return {};
    };
    QRUN_TRY(number(&s.width));
    if (s.width < -1) s.align = '<', s.width = -s.width;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      s.precision = 0;
      QRUN_TRY(number(&s.precision));
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) return raw_error("incomplete format");
    const char conv = fmt[i++];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (s.align == '<') s.zero = false;
    if (!have_value) {
      QRUN_JINJA_ASSIGN(value, take());
    }
    QRUN_JINJA_ASSIGN(const std::string piece, percent_one(value, conv, s));
    out += piece;
    QRUN_TRY(check_string_size(out.size()));
  }
  if (next < positional.size() && !(mapping && next == 0) && !used_mapping)
    return raw_error("not all arguments converted during string formatting");
  return out;
}

Result<std::string> str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  int64_t auto_index = 0;
  bool manual = false;
  size_t i = 0;
  while (i < fmt.size()) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      return raw_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return raw_error("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos)
      return raw_error("nested replacement fields are not supported");
    i = close + 1;
    size_t name_end = 0;
    int brackets = 0;
    while (name_end < field.size()) {
      const char f = field[name_end];
      if (f == '[') ++brackets;
      if (f == ']') --brackets;
      if (brackets == 0 && (f == '!' || f == ':')) break;
      ++name_end;
    }
    const std::string name = field.substr(0, name_end);
    char conversion = 0;
    std::string spec;
    size_t rest = name_end;
    if (rest < field.size() && field[rest] == '!') {
      if (rest + 1 >= field.size())
        return raw_error("end of string while looking for conversion specifier");
      conversion = field[rest + 1];
      rest += 2;
      if (rest < field.size() && field[rest] != ':')
        return raw_error("expected ':' after conversion specifier");
    }
    if (rest < field.size()) spec = field.substr(rest + 1);
    // The argument: auto-numbered, by index, or by keyword; then .attr and [key] accessors.
    const size_t head_end = std::min(name.find_first_of(".["), name.size());
    const std::string head = name.substr(0, head_end);
    Value value;
    if (head.empty() ||
        std::all_of(head.begin(), head.end(), [](char x) { return x >= '0' && x <= '9'; })) {
      int64_t index = 0;
      if (head.empty()) {
        if (manual)
          return raw_error(
              "cannot switch from manual field specification to automatic field numbering");
        index = auto_index++;
      } else {
        if (auto_index > 0)
          return raw_error(
              "cannot switch from automatic field numbering to manual field specification");
        manual = true;
        index = head.size() > 9 ? INT64_MAX : std::stoll(head);
      }
      if (index >= static_cast<int64_t>(args.args.size()))
        return raw_error(format("Replacement index %lld out of range for positional args tuple",
                                static_cast<long long>(index)));
      value = args.args[static_cast<size_t>(index)];
    } else {
      bool found = false;
      for (auto& [k, v] : args.kwargs) {
        if (k == head) {
          value = v;
          found = true;
        }
      }
      if (!found) return raw_error("KeyError: '" + head + "'");
    }
    size_t p = head_end;
    while (p < name.size()) {
      if (name[p] == '.') {
        const size_t end = std::min(name.find_first_of(".[", p + 1), name.size());
        QRUN_JINJA_ASSIGN(value, get_attr(value, name.substr(p + 1, end - p - 1)));
        p = end;
      } else {
        const size_t end = name.find(']', p);
        if (end == std::string::npos) return raw_error("Missing ']' in format string");
        const std::string key = name.substr(p + 1, end - p - 1);
        const bool numeric =
            !key.empty() && key.size() < 18 &&
            std::all_of(key.begin(), key.end(), [](char x) { return x >= '0' && x <= '9'; });
        QRUN_JINJA_ASSIGN(
            value, get_item(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key)));
        p = end + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      QRUN_JINJA_ASSIGN(std::string r, to_repr(value));
      value = Value::string(std::move(r));
    } else if (conversion == 's') {
      QRUN_JINJA_ASSIGN(std::string r, to_str(value));
      value = Value::string(std::move(r));
    } else if (conversion) {
      return raw_error(format("Unknown conversion specifier %c", conversion));
    }
    QRUN_JINJA_ASSIGN(const std::string piece, format_value(value, spec));
    out += piece;
    QRUN_TRY(check_string_size(out.size()));
  }
  return out;
}

}  // namespace qrun::jinja
