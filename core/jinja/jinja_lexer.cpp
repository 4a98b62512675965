// The Jinja lexer. It walks the normalized source once: text up to the next "{{", "{%" or
// "{#", then the tokens of that tag up to its end delimiter (which only counts outside
// brackets, as in jinja2). Whitespace control follows jinja2's lexer rule for rule:
// `line_starting` is whether the previous match ended with a newline.
#include "core/jinja/jinja_lexer.h"

#include <algorithm>

#include "core/jinja/jinja_text.h"
#include "core/jinja/jinja_value.h"

namespace qrun::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.isspace over the whole string (false for "").
bool all_space(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!text::is_space(text::code_point_at(s, i, &len))) return false;
    i += len;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin, const LexOptions& options)
      : src_(normalize_newlines(source)), origin_(origin), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = sign_at(tag + 2);
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, &raw_end);
      std::string text = src_.substr(pos_, tag - pos_);
      apply_left_strip(text, sign, kind != '{');
      emit_text(std::move(text), pos_);
      line_starting_ = false;
      if (raw) {
        QRUN_TRY(lex_raw(tag, raw_end));
      } else if (kind == '#') {
        QRUN_TRY(lex_comment(tag, tag + 2 + (sign ? 1 : 0)));
      } else {
        QRUN_TRY(lex_tag(kind, tag, tag + 2 + (sign ? 1 : 0)));
      }
    }
    Token end;
    end.type = TokenType::kEnd;
    end.line = line_at(src_.size());
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  int line_at(size_t offset) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) -
                            line_starts_.begin());
  }

  Error error_at(size_t offset, const std::string& message) const {
    return make_error(ErrorCode::kFormat,
                      format("%s:%d: %s", origin_.c_str(), line_at(std::min(offset, src_.size())),
                             message.c_str()));
  }

  bool starts_with(size_t at, std::string_view s) const {
    return src_.compare(at, s.size(), s) == 0;
  }

  char sign_at(size_t at) const {
    return at < src_.size() && (src_[at] == '-' || src_[at] == '+') ? src_[at] : 0;
  }

  size_t skip_space(size_t at) const {
    while (at < src_.size()) {
      size_t len = 0;
      if (!text::is_space(text::code_point_at(src_, at, &len))) break;
      at += len;
    }
    return at;
  }

  // The first "{{", "{%" or "{#" at or after `from`.
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // The end of a "{%(-|+)? raw (-%}\s*|%})" match at `at` (no trim_blocks after it, as jinja2).
  bool match_raw_begin(size_t at, size_t* end) const {
    size_t p = at + 2;
    if (sign_at(p)) ++p;
    p = skip_space(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      *end = skip_space(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  // The whitespace control applied to the text before a tag: "-" strips all whitespace;
  // otherwise lstrip_blocks removes the spaces between the line start and a block tag.
  void apply_left_strip(std::string& text, char sign, bool block_like) const {
    if (sign == '-') {
      text = text::strip(text, std::nullopt, false, true);
    } else if (sign != '+' && options_.lstrip_blocks && block_like) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
  }

  void emit_text(std::string text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::kText;
    t.value = std::move(text);
    t.line = line_at(at);
    tokens_.push_back(std::move(t));
  }

  void emit(TokenType type, std::string value, size_t at) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_at(at);
    tokens_.push_back(std::move(t));
  }

  // Consumes a tag's end delimiter variant at `p` ("+X", "-X" + whitespace, "X" + the
  // trim_blocks newline when `trim`); returns the position after it.
  size_t consume_end(size_t p, std::string_view delim, bool trim) {
    size_t end = 0;
    if (src_[p] == '+') {
      end = p + 1 + delim.size();
    } else if (src_[p] == '-') {
      end = skip_space(p + 1 + delim.size());
    } else {
      end = p + delim.size();
      if (trim && options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
    }
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    return end;
  }

  Result<void> lex_comment(size_t tag, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) return error_at(tag, "missing end of comment tag");
    const size_t p = close > body && sign_at(close - 1) ? close - 1 : close;
    pos_ = consume_end(p, "#}", true);
    return {};
  }

  Result<void> lex_raw(size_t tag, size_t body) {
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t at = src_.find("{%", body); at != std::string::npos; at = src_.find("{%", at + 1)) {
      const char sign = sign_at(at + 2);
      size_t p = skip_space(at + 2 + (sign ? 1 : 0));
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      if (!(starts_with(p, "%}") ||
            ((src_[p] == '-' || src_[p] == '+') && starts_with(p + 1, "%}"))))
        continue;
      std::string text = src_.substr(body, at - body);
      apply_left_strip(text, sign, true);
      emit_text(std::move(text), body);
      pos_ = consume_end(p, "%}", true);
      return {};
    }
    return error_at(tag, "missing end of raw directive");
  }

  // `(\d+_)*\d+` at p: the end of the match, or p when there is none.
  size_t match_digits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && is_digit(src_[q])) {
      while (q < src_.size() && is_digit(src_[q])) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
    }
    return q;
  }

  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return p;
    const size_t int_end = match_digits(p);
    if (int_end == p) return p;
    size_t q = int_end;
    bool fraction = false;
    if (q < src_.size() && src_[q] == '.') {
      const size_t frac_end = match_digits(q + 1);
      if (frac_end > q + 1) {
        q = frac_end;
        fraction = true;
      }
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      const size_t exp_end = match_digits(e);
      if (exp_end > e) return exp_end;
    }
    return fraction ? q : p;
  }

  // jinja2's integer literal: 0b/0o/0x with optional single underscores, [1-9](_?\d)*, or
  // 0(_?0)*. Returns the end and the value (false on overflow of int64).
  size_t match_integer(size_t p, int64_t* value, bool* overflow) const {
    int base = 10;
    size_t q = p;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
      if (base != 10) q = p + 2;
    }
    const auto digit = [&](size_t at) {
      if (at >= src_.size()) return -1;
      const int d = hex_value(src_[at]);
      return d >= 0 && d < base ? d : -1;
    };
    uint64_t v = 0;
    *overflow = false;
    const auto take = [&](int d) {
      if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / base)
        *overflow = true;
      v = v * base + static_cast<uint64_t>(d);
    };
    if (base != 10) {
      size_t groups = 0;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (digit(r) < 0) break;
        take(digit(r));
        q = r + 1;
        ++groups;
      }
      if (groups == 0) base = 10, q = p;  // "0x" alone: just the 0
      if (groups > 0) {
        *value = static_cast<int64_t>(v);
        return q;
      }
    }
    const bool zero = src_[p] == '0';
    take(src_[p] - '0');
    q = p + 1;
    while (true) {
      size_t r = q;
      if (r < src_.size() && src_[r] == '_') ++r;
      if (r >= src_.size() || !is_digit(src_[r]) || (zero && src_[r] != '0')) break;
      take(src_[r] - '0');
      q = r + 1;
    }
    *value = static_cast<int64_t>(v);
    return q;
  }

  // A quoted string at p, decoded as jinja2 does (Python's unicode-escape): the end position.
  Result<size_t> lex_string(size_t p, std::string* out) const {
    const char quote = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) return error_at(p, std::string("unterminated string literal"));
    for (size_t i = p + 1; i < e; ++i) {
      if (src_[i] != '\\') {
        *out += src_[i];
        continue;
      }
      const char n = src_[++i];
      if (static_cast<unsigned char>(n) >= 0x80) {
        // backslashreplace turned the character into an escape that the backslash now
        // protects: the result is a backslash and the escape's text.
        size_t len = 0;
        const uint32_t cpt = text::code_point_at(src_, i, &len);
        *out += cpt < 0x100     ? format("\\x%02x", cpt)
                : cpt < 0x10000 ? format("\\u%04x", cpt)
                                : format("\\U%08x", cpt);
        i += len - 1;
        continue;
      }
      uint32_t cpt = 0;
      int digits = 0;
      switch (n) {
        case '\n':
          continue;
        case '\\':
        case '\'':
        case '"':
          *out += n;
          continue;
        case 'a':
          *out += '\a';
          continue;
        case 'b':
          *out += '\b';
          continue;
        case 'f':
          *out += '\f';
          continue;
        case 'n':
          *out += '\n';
          continue;
        case 'r':
          *out += '\r';
          continue;
        case 't':
          *out += '\t';
          continue;
        case 'v':
          *out += '\v';
          continue;
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        default:
          if (n >= '0' && n <= '7') {
            cpt = static_cast<uint32_t>(n - '0');
            for (int k = 0; k < 2 && i + 1 < e && src_[i + 1] >= '0' && src_[i + 1] <= '7'; ++k)
              cpt = cpt * 8 + static_cast<uint32_t>(src_[++i] - '0');
            text::append_code_point(*out, cpt);
          } else {
            *out += '\\';
            *out += n;
          }
          continue;
      }
      for (int k = 0; k < digits; ++k) {
        const int h = i + 1 < e ? hex_value(src_[i + 1]) : -1;
        if (h < 0) return error_at(i, format("truncated \\%c escape in string literal", n));
        cpt = cpt * 16 + static_cast<uint32_t>(h);
        ++i;
      }
      if (cpt > 0x10FFFF) return error_at(i, "illegal Unicode character in string literal");
      text::append_code_point(*out, cpt);
    }
    return e + 1;
  }

  Result<void> lex_tag(char kind, size_t tag, size_t p) {
    const bool block = kind == '%';
    emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, block ? "{%" : "{{", tag);
    const std::string_view delim = block ? "%}" : "}}";
    std::vector<char> brackets;
    while (true) {
      p = skip_space(p);
      if (p >= src_.size()) {
        return error_at(src_.size(), block ? "unexpected end of template, expected '%}'"
                                           : "unexpected end of template, expected '}}'");
      }
      if (brackets.empty()) {
        const bool signed_end =
            (src_[p] == '-' || (block && src_[p] == '+')) && starts_with(p + 1, delim);
        if (signed_end || starts_with(p, delim)) {
          emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, std::string(delim), p);
          pos_ = consume_end(p, delim, block);
          return {};
        }
      }
      const char c = src_[p];
      if (size_t end = match_float(p); end > p) {
        std::string digits;
        for (size_t i = p; i < end; ++i) {
          if (src_[i] != '_') digits += src_[i];
        }
        Token t;
        t.type = TokenType::kFloat;
        t.value = digits;
        t.float_value = std::strtod(digits.c_str(), nullptr);
        t.line = line_at(p);
        tokens_.push_back(std::move(t));
        p = end;
      } else if (is_digit(c)) {
        int64_t value = 0;
        bool overflow = false;
        const size_t end_int = match_integer(p, &value, &overflow);
        if (overflow) return error_at(p, "integer literal too large");
        Token t;
        t.type = TokenType::kInteger;
        t.value = src_.substr(p, end_int - p);
        t.int_value = value;
        t.line = line_at(p);
        tokens_.push_back(std::move(t));
        p = end_int;
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
        emit(TokenType::kName, src_.substr(p, e - p), p);
        p = e;
      } else if (c == '\'' || c == '"') {
        std::string value;
        QRUN_JINJA_ASSIGN(const size_t end_string, lex_string(p, &value));
        emit(TokenType::kString, std::move(value), p);
        p = end_string;
      } else {
        QRUN_TRY(lex_operator(&p, &brackets));
      }
    }
  }

  Result<void> lex_operator(size_t* p, std::vector<char>* brackets) {
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
    const size_t at = *p;
    for (std::string_view op : kTwo) {
      if (starts_with(at, op)) {
        emit(TokenType::kOperator, std::string(op), at);
        *p = at + 2;
        return {};
      }
    }
    const char c = src_[at];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t len = 0;
      text::code_point_at(src_, at, &len);
      return error_at(at, "unexpected char " + std::string("'") + src_.substr(at, len) + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets->empty()) return error_at(at, format("unexpected '%c'", c));
      if (brackets->back() != c)
        return error_at(at, format("unexpected '%c', expected '%c'", c, brackets->back()));
      brackets->pop_back();
    }
    emit(TokenType::kOperator, std::string(1, c), at);
    *p = at + 1;
    return {};
  }

  std::string src_;
  const std::string& origin_;
  LexOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, const std::string& origin,
                                    const LexOptions& options) {
  return Lexer(source, origin, options).run();
}

}  // namespace qrun::jinja
