// Python's operators on interpreter values. Integer arithmetic is int64 and reports
// overflow instead of wrapping; floats follow CPython's floor division and modulo; Markup
// (|safe, |escape) escapes a plain str that it is added to, as markupsafe does.
#include "core/jinja/jinja_ops.h"

#include <cmath>
#include <utility>

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

Error unsupported(const char* op, const Value& a, const Value& b) {
  return raw_error(
      format("unsupported operand type(s) for %s: '%s' and '%s'", op, type_name(a), type_name(b)));
}

Error overflow() {
  return raw_error("integer overflow (qrun's integers are 64-bit)");
}

bool is_int_like(const Value& v) {
  return v.is_int() || v.is_bool();
}

Result<Value> repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size())
      return raw_error("string too long");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out), seq.is_safe());
  }
  const ValueList& items = seq.items();
  if (!items.empty() && n > kMaxListItems / static_cast<int64_t>(items.size()))
    return raw_error("list too long");
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// CPython's float divmod: the floor quotient and a remainder with the divisor's sign.
void float_divmod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0.0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd = 0.0;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

Result<Value> int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  int64_t b = base;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, b, &result)) return overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(b, b, &b)) return overflow();
  }
  return Value::integer(result);
}

Result<Value> arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = is_int_like(a) && is_int_like(b);
  const int64_t x = ints ? a.as_int() : 0;
  const int64_t y = ints ? b.as_int() : 0;
  const double fx = a.as_float();
  const double fy = b.as_float();
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (!ints) return Value::number(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) return overflow();
      return Value::integer(r);
    case BinaryOp::kSub:
      if (!ints) return Value::number(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) return overflow();
      return Value::integer(r);
    case BinaryOp::kMul:
      if (!ints) return Value::number(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) return overflow();
      return Value::integer(r);
    case BinaryOp::kDiv:
      if (fy == 0.0) return raw_error("division by zero");
      return Value::number(fx / fy);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (ints) {
        if (y == 0) return raw_error("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinaryOp::kMod) return Value::integer(0);
          return overflow();
        }
        int64_t q = x / y;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          q -= 1;
        }
        return Value::integer(op == BinaryOp::kFloorDiv ? q : m);
      }
      if (fy == 0.0) return raw_error("float division by zero");
      double q = 0.0;
      double m = 0.0;
      float_divmod(fx, fy, &q, &m);
      return Value::number(op == BinaryOp::kFloorDiv ? q : m);
    }
    case BinaryOp::kPow:
      if (ints && y >= 0) return int_pow(x, y);
      if (fx == 0.0 && fy < 0.0) return raw_error("0.0 cannot be raised to a negative power");
      if (fx < 0.0 && fy != std::floor(fy))
        return raw_error("negative number cannot be raised to a fractional power");
      return Value::number(std::pow(fx, fy));
    case BinaryOp::kConcat:
      break;
  }
  return raw_error("bad arithmetic operator");
}

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
    case BinaryOp::kConcat:
      return "~";
  }
  return "?";
}

std::string describe_obj(const Value& v) {
  return v.is_none() ? "None" : std::string(type_name(v)) + " object";
}

Value no_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(
      format("'%s' has no attribute '%s'", describe_obj(obj).c_str(), std::string(name).c_str()));
}

Result<Value> no_element(const Value& obj, const Value& key) {
  QRUN_JINJA_ASSIGN(std::string k, to_repr(key));
  return Value::undefined(describe_obj(obj) + " has no element " + k);
}

// Python's slice.indices: the adjusted start, step and number of items.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

Result<SliceRange> slice_range(int64_t n, const Value& start_v, const Value& stop_v,
                               const Value& step_v) {
  const auto as_index = [](const Value& v, int64_t fallback) -> Result<int64_t> {
    if (v.is_undefined() || v.is_none()) return fallback;
    if (!is_int_like(v))
      return raw_error("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  SliceRange r;
  QRUN_JINJA_ASSIGN(r.step, as_index(step_v, 1));
  if (r.step == 0) return raw_error("slice step cannot be zero");
  if (r.step == INT64_MIN) r.step = -INT64_MAX;
  QRUN_JINJA_ASSIGN(int64_t start, as_index(start_v, r.step < 0 ? INT64_MAX : 0));
  QRUN_JINJA_ASSIGN(int64_t stop, as_index(stop_v, r.step < 0 ? INT64_MIN : INT64_MAX));
  const auto adjust = [&](int64_t i) {
    if (i < 0) {
      i = i < -n ? -1 : i + n;
      if (i < 0) i = r.step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = r.step < 0 ? n - 1 : n;
    }
    return i;
  };
  start = adjust(start);
  stop = adjust(stop);
  r.start = start;
  if (r.step < 0) {
    r.count = stop < start ? (start - stop - 1) / (-r.step) + 1 : 0;
  } else {
    r.count = start < stop ? (stop - start - 1) / r.step + 1 : 0;
  }
  return r;
}

}  // namespace

Result<void> check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes)
    return raw_error(format("string longer than %zu MiB", kMaxStringBytes >> 20));
  return {};
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string as_markup(const Value& s) {
  return s.is_safe() ? s.as_string() : html_escape(s.as_string());
}

Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kConcat) {
    std::string out;
    QRUN_TRY(append_str(out, a));
    QRUN_TRY(append_str(out, b));
    QRUN_TRY(check_string_size(out.size()));
    return Value::string(std::move(out));
  }
  if (a.is_undefined()) return raw_error(a.undefined_hint());
  if (b.is_undefined()) return raw_error(b.undefined_hint());
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      QRUN_TRY(check_string_size(a.as_string().size() + b.as_string().size()));
      if (a.is_safe() || b.is_safe()) return Value::string(as_markup(a) + as_markup(b), true);
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.kind() == b.kind() && a.is_list_or_tuple()) {
      if (static_cast<int64_t>(a.items().size() + b.items().size()) > kMaxListItems)
        return raw_error("list too long");
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string()) {
      return raw_error(format("can only concatenate str (not \"%s\") to str", type_name(b)));
    }
  }
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_list_or_tuple()) && is_int_like(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list_or_tuple()) && is_int_like(a)) return repeat(b, a.as_int());
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    QRUN_JINJA_ASSIGN(std::string s, percent_format(a.as_string(), b));
    return Value::string(std::move(s), a.is_safe());
  }
  return unsupported(op_symbol(op), a, b);
}

Result<Value> negate(const Value& v, bool minus) {
  if (v.is_undefined()) return raw_error(v.undefined_hint());
  if (is_int_like(v)) {
    if (!minus) return Value::integer(v.as_int());
    if (v.as_int() == INT64_MIN) return overflow();
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::number(minus ? -v.as_float() : v.as_float());
  return raw_error(format("bad operand type for unary %c: '%s'", minus ? '-' : '+', type_name(v)));
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string()) {
        return raw_error(
            format("'in <string>' requires string as left operand, not %s", type_name(item)));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& v : container.items()) {
        QRUN_JINJA_ASSIGN(const bool eq, equals(v, item));
        if (eq) return true;
      }
      return false;
    case Kind::kDict:
      if (!is_hashable(item)) return raw_error(format("unhashable type: '%s'", type_name(item)));
      return container.dict_ref().find(item) != nullptr;
    case Kind::kIterator: {
      // Like Python, consumes the iterator up to and including the first match.
      ValueList& items = container.items();
      for (size_t i = 0; i < items.size(); ++i) {
        QRUN_JINJA_ASSIGN(const bool eq, equals(items[i], item));
        if (eq) {
          items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(i) + 1);
          return true;
        }
      }
      items.clear();
      return false;
    }
    case Kind::kUndefined:
      return false;
    default:
      return raw_error(format("argument of type '%s' is not iterable", type_name(container)));
  }
}

Result<Value> get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return raw_error(obj.undefined_hint());
    case Kind::kDict:
      if (has_method(obj, name)) return bound_method(obj, name);
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return no_attribute(obj, name);
    case Kind::kNamespace:
    case Kind::kLoop:
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return no_attribute(obj, name);
    case Kind::kString:
    case Kind::kList:
    case Kind::kTuple:
      if (has_method(obj, name)) return bound_method(obj, name);
      return no_attribute(obj, name);
    default:
      return no_attribute(obj, name);
  }
}

Result<Value> get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return raw_error(obj.undefined_hint());
    case Kind::kDict:
      if (is_hashable(key)) {
        if (const Value* v = obj.dict_ref().find(key)) return *v;
      }
      break;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString:
      if (is_int_like(key)) {
        const bool str = obj.is_string();
        std::vector<size_t> offsets;
        if (str) offsets = text::char_offsets(obj.as_string());
        const int64_t n = str ? static_cast<int64_t>(offsets.size()) - 1
                              : static_cast<int64_t>(obj.items().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return no_element(obj, key);
        if (!str) return obj.items()[static_cast<size_t>(i)];
        const size_t b = offsets[static_cast<size_t>(i)];
        return Value::string(obj.as_string().substr(b, offsets[static_cast<size_t>(i) + 1] - b));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return no_element(obj, key);
}

Result<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return raw_error(obj.undefined_hint());
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const std::vector<size_t> off = text::char_offsets(s);
    QRUN_JINJA_ASSIGN(const SliceRange r,
                      slice_range(static_cast<int64_t>(off.size()) - 1, start, stop, step));
    std::string out;
    for (int64_t k = 0, i = r.start; k < r.count; ++k, i += r.step) {
      const size_t c = static_cast<size_t>(i);
      out.append(s, off[c], off[c + 1] - off[c]);
    }
    return Value::string(std::move(out));
  }
  if (obj.is_list_or_tuple()) {
    const ValueList& items = obj.items();
    QRUN_JINJA_ASSIGN(const SliceRange r,
                      slice_range(static_cast<int64_t>(items.size()), start, stop, step));
    ValueList out;
    out.reserve(static_cast<size_t>(r.count));
    for (int64_t k = 0, i = r.start; k < r.count; ++k, i += r.step)
      out.push_back(items[static_cast<size_t>(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined(describe_obj(obj) + " has no element slice");  // as jinja2's getitem
}

Result<ValueList> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return ValueList{};
    case Kind::kList:
    case Kind::kTuple:
      return v.items();
    case Kind::kIterator:
      return std::exchange(v.items(), {});
    case Kind::kDict: {
      ValueList keys;
      keys.reserve(v.dict_ref().size());
      for (const Dict::Entry& e : v.dict_ref().entries()) keys.push_back(e.first);
      return keys;
    }
    case Kind::kString: {
      const std::string& s = v.as_string();
      const std::vector<size_t> off = text::char_offsets(s);
      ValueList chars;
      chars.reserve(off.size() - 1);
      for (size_t i = 0; i + 1 < off.size(); ++i)
        chars.push_back(Value::string(s.substr(off[i], off[i + 1] - off[i])));
      return chars;
    }
    default:
      return raw_error(format("'%s' object is not iterable", type_name(v)));
  }
}

}  // namespace qrun::jinja
