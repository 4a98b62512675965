// Values: construction, Python's truthiness, str/repr, ==, ordering and dict keys. Every
// recursive walker carries its depth and fails past kMaxValueDepth.
#include "core/jinja/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

Error too_deep() {
  return raw_error(format("value nested more than %d levels deep", kMaxValueDepth));
}

// A number as a (possibly exact) comparison key: ints stay exact, floats that hold an
// integer within int64 range compare as that integer.
bool numbers_equal(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
  return a.as_float() == b.as_float();
}

int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.as_float();
  const double y = b.as_float();
  return x < y ? -1 : (x > y ? 1 : 0);  // NaN compares as "equal", never less
}

Result<void> append_repr(std::string& out, const Value& v, int depth);

Result<void> append_str_at(std::string& out, const Value& v, int depth) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kString:
      out += v.as_string();
      return {};
    default:
      return append_repr(out, v, depth);
  }
}

Result<void> append_repr(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) return too_deep();
  switch (v.kind()) {
    case Kind::kUndefined:
      out += "Undefined";
      return {};
    case Kind::kNone:
      out += "None";
      return {};
    case Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return {};
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return {};
    case Kind::kFloat:
      out += repr_float(v.as_float());
      return {};
    case Kind::kString:
      if (v.is_safe()) {
        out += "Markup(" + repr_string(v.as_string()) + ")";
      } else {
        out += repr_string(v.as_string());
      }
      return {};
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList& items = v.items();
      out += v.is_list() ? '[' : '(';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        QRUN_TRY(append_repr(out, items[i], depth + 1));
      }
      if (v.is_tuple() && items.size() == 1) out += ',';
      out += v.is_list() ? ']' : ')';
      return {};
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (v.kind() == Kind::kNamespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const Dict::Entry& e : v.dict_ref().entries()) {
        if (!first) out += ", ";
        first = false;
        QRUN_TRY(append_repr(out, e.first, depth + 1));
        out += ": ";
        QRUN_TRY(append_repr(out, e.second, depth + 1));
      }
      out += '}';
      if (v.kind() == Kind::kNamespace) out += '>';
      return {};
    }
    case Kind::kLoop: {
      const Value* index = v.dict_ref().find("index");
      const Value* length = v.dict_ref().find("length");
      out += "<LoopContext ";
      if (index && index->is_int()) out += std::to_string(index->as_int());
      out += '/';
      if (length && length->is_int()) out += std::to_string(length->as_int());
      out += '>';
      return {};
    }
    case Kind::kFunction:
      out += "<function " + v.function_ref().name + ">";
      return {};
    case Kind::kIterator:
      out += "<generator object>";
      return {};
  }
  return {};
}

Result<bool> equals_at(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return too_deep();
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList& x = a.items();
      const ValueList& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        QRUN_JINJA_ASSIGN(const bool eq, equals_at(x[i], y[i], depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& x = a.dict_ref();
      const Dict& y = b.dict_ref();
      if (x.size() != y.size()) return false;
      for (const Dict::Entry& e : x.entries()) {
        const Value* other = y.find(e.first);
        if (!other) return false;
        QRUN_JINJA_ASSIGN(const bool eq, equals_at(e.second, *other, depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

Result<int> compare_at(const Value& a, const Value& b, const char* op, int depth) {
  if (depth > kMaxValueDepth) return too_deep();
  if (a.is_undefined()) return raw_error(a.undefined_hint());
  if (b.is_undefined()) return raw_error(b.undefined_hint());
  if (a.is_number() && b.is_number()) return compare_numbers(a, b);
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_list_or_tuple()) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      QRUN_JINJA_ASSIGN(const bool eq, equals_at(x[i], y[i], depth + 1));
      if (!eq) return compare_at(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return raw_error(format("'%s' not supported between instances of '%s' and '%s'", op, type_name(a),
                          type_name(b)));
}

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = d;
  return v;
}

Value Value::string(std::string s, bool safe) {
  Value v;
  v.kind_ = Kind::kString;
  v.safe_ = safe;
  v.data_ = std::move(s);
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::move(d);
  return v;
}

Value Value::dict() {
  return dict(std::make_shared<Dict>());
}

Value Value::namespace_object(std::shared_ptr<Dict> attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::loop_object(std::shared_ptr<Dict> attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::kLoop;
  return v;
}

Value Value::iterator(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kIterator;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

int64_t Value::as_int() const {
  return is_bool() ? int64_t{as_bool()} : std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_hint() const {
  static const std::string kNoHint = "undefined value";
  const std::string* hint = std::get_if<std::string>(&data_);
  return hint && !hint->empty() ? *hint : kNoHint;
}

const void* Value::identity() const {
  if (auto* l = std::get_if<std::shared_ptr<ValueList>>(&data_)) return l->get();
  if (auto* d = std::get_if<std::shared_ptr<Dict>>(&data_)) return d->get();
  if (auto* f = std::get_if<std::shared_ptr<const Function>>(&data_)) return f->get();
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !items().empty();
    case Kind::kDict:
      return !dict_ref().empty();
    default:
      return true;
  }
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const Entry& e : entries_) {
    if (keys_equal(e.first, key)) return &e.second;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.first.is_string() && e.first.as_string() == key) return &e.second;
  }
  return nullptr;
}

Result<void> Dict::set(Value key, Value value) {
  if (!is_hashable(key)) return raw_error(format("unhashable type: '%s'", type_name(key)));
  for (Entry& e : entries_) {
    if (keys_equal(e.first, key)) {
      e.second = std::move(value);
      return {};
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return {};
}

void Dict::set(std::string_view key, Value value) {
  for (Entry& e : entries_) {
    if (e.first.is_string() && e.first.as_string() == key) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(Value::string(std::string(key)), std::move(value));
}

bool Dict::erase(const Value& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (keys_equal(it->first, key)) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return v.is_safe() ? "Markup" : "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kLoop:
      return "LoopContext";
    case Kind::kFunction:
      return "function";
    case Kind::kIterator:
      return "generator";
  }
  return "object";
}

bool is_hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kString:
      return true;
    case Kind::kTuple:
      for (const Value& item : v.items()) {
        if (item.is_tuple() || !is_hashable(item)) return false;
      }
      return true;
    default:
      return false;
  }
}

bool keys_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_none()) return true;
  if (a.is_tuple()) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].is_tuple() || y[i].is_tuple() || !keys_equal(x[i], y[i])) return false;
    }
    return true;
  }
  return false;
}

Result<std::string> to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  QRUN_TRY(append_str_at(out, v, 0));
  return out;
}

Result<void> append_str(std::string& out, const Value& v) {
  return append_str_at(out, v, 0);
}

Result<std::string> to_repr(const Value& v) {
  std::string out;
  QRUN_TRY(append_repr(out, v, 0));
  return out;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    const bool invalid = c == 0xFFFD && len == 1 && static_cast<uint8_t>(s[i]) >= 0x80;
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (invalid || c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      // Control characters (and bytes that are not UTF-8) as \xNN, as Python escapes them.
      out += format("\\x%02x", invalid ? static_cast<uint8_t>(s[i]) : c);
    } else if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
               (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || c == 0x1680) {
      out += format("\\u%04x", c);  // separators and format characters are not printable
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  out += quote;
  return out;
}

std::string repr_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: positional for exponents in
  // [-4, 16), scientific otherwise, always with a fractional part or an exponent.
  char buf[64];
  const auto res =
      std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string digits(sci.substr(0, 1));
  if (e_pos > 2) digits.append(sci.substr(2, e_pos - 2));
  int exponent = 0;
  const char* exp_begin = buf + e_pos + 1;
  std::from_chars(exp_begin + (*exp_begin == '+' ? 1 : 0), res.ptr, exponent);
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (std::signbit(d)) out.push_back('-');
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out += format("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt >= n) {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt));
  }
  return out;
}

Result<bool> equals(const Value& a, const Value& b) {
  return equals_at(a, b, 0);
}

Result<int> compare(const Value& a, const Value& b, const char* op) {
  return compare_at(a, b, op, 0);
}

}  // namespace qrun::jinja
