// jinja2's built-in filters (and Hugging Face's tojson), each with jinja2's signature and
// Python semantics. Filters that jinja2 implements as generators (map, select, reverse, ...)
// return lists here, which print and iterate the same for every use a template makes.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_eval.h"
#include "core/jinja/jinja_ops.h"
#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

bool given(const Value& v) {
  return !v.is_undefined();
}

Result<std::string> str_or_empty(const Value& v) {
  return to_str(v);
}

Result<int64_t> int_arg(const Value& v, int64_t fallback, const char* what) {
  if (!given(v) || v.is_none()) return fallback;
  if (v.is_int() || v.is_bool()) return v.as_int();
  return raw_error(format("%s must be an integer, not %s", what, type_name(v)));
}

Result<Value> filter_default(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("default", args, {"default_value", "boolean"}));
  const Value fallback = given(a[0]) ? a[0] : Value::string("");
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return fallback;
  return v;
}

Result<Value> filter_length(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("length", args, {}));
  switch (v.kind()) {
    case Kind::kUndefined:
      return Value::integer(0);
    case Kind::kString:
      return Value::integer(static_cast<int64_t>(text::char_count(v.as_string())));
    case Kind::kList:
    case Kind::kTuple:
      return Value::integer(static_cast<int64_t>(v.items().size()));
    case Kind::kDict:
      return Value::integer(static_cast<int64_t>(v.dict_ref().size()));
    default:
      return raw_error(format("object of type '%s' has no len()", type_name(v)));
  }
}

Result<Value> filter_first_last(const Value& v, CallArgs& args, bool first) {
  QRUN_TRY(bind_args(first ? "first" : "last", args, {}));
  if (v.is_iterator()) {
    if (!first) return raw_error("'generator' object is not reversible");
    ValueList& rest = v.items();  // next(): takes one item from the iterator
    if (rest.empty()) return Value::undefined("No first item, sequence was empty.");
    Value item = std::move(rest.front());
    rest.erase(rest.begin());
    return item;
  }
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  if (items.empty())
    return Value::undefined(first ? "No first item, sequence was empty."
                                  : "No last item, sequence was empty.");
  return first ? items.front() : items.back();
}

Result<Value> filter_first(Interpreter&, const Value& v, CallArgs& args) {
  return filter_first_last(v, args, true);
}

Result<Value> filter_last(Interpreter&, const Value& v, CallArgs& args) {
  return filter_first_last(v, args, false);
}

Result<Value> filter_join(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("join", args, {"d", "attribute"}));
  QRUN_JINJA_ASSIGN(const std::string sep, str_or_empty(a[0]));
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    Value item = items[i];
    if (given(a[1])) {
      QRUN_JINJA_ASSIGN(const std::string path, to_str(a[1]));
      QRUN_JINJA_ASSIGN(item, get_path(item, path));
    }
    QRUN_TRY(append_str(out, item));
    QRUN_TRY(check_string_size(out.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> filter_trim(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("trim", args, {"chars"}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  std::optional<std::string> chars;
  if (given(a[0]) && !a[0].is_none()) {
    QRUN_JINJA_ASSIGN(chars, to_str(a[0]));
  }
  return Value::string(text::strip(s, chars, true, true), v.is_safe());
}

template <std::string (*Fn)(std::string_view)>
Result<Value> string_filter(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("filter", args, {}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  return Value::string(Fn(s), v.is_safe());
}

// jinja2's title: words start after -, whitespace, (, {, [ or <; each word's first character
// is upper-cased and the rest lower-cased.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
    if (c == 0xFFFD && len == 1) {
      out += s[i];
    } else if (sep) {
      text::append_code_point(out, c);
    } else {
      text::append_code_point(out, word_start ? text::to_upper(c) : text::to_lower(c));
    }
    word_start = sep;
    i += len;
  }
  return out;
}

Result<Value> filter_replace(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("replace", args, {"old", "new", "count"}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  QRUN_JINJA_ASSIGN(const std::string from, to_str(a[0]));
  QRUN_JINJA_ASSIGN(const std::string to, to_str(a[1]));
  QRUN_JINJA_ASSIGN(const int64_t count, int_arg(a[2], -1, "count"));
  std::string out = text::replace(s, from, to, count);
  QRUN_TRY(check_string_size(out.size()));
  return Value::string(std::move(out));
}

Result<Value> filter_list(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("list", args, {}));
  QRUN_JINJA_ASSIGN(ValueList items, iterate(v));
  return Value::list(std::move(items));
}

Result<Value> filter_string(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("string", args, {}));
  if (v.is_string()) return v;
  QRUN_JINJA_ASSIGN(std::string s, to_str(v));
  return Value::string(std::move(s));
}

// Python's int() of a str in `base` (0: from the prefix), underscores allowed between digits.
bool parse_int(std::string s, int base, int64_t* out) {
  s = text::strip(s, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() &&
        std::isalnum(static_cast<unsigned char>(s[i - 1])))
      continue;
    digits += s[i];
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

Result<Value> filter_int(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("int", args, {"default", "base"}));
  const Value fallback = given(a[0]) ? a[0] : Value::integer(0);
  QRUN_JINJA_ASSIGN(const int64_t base, int_arg(a[1], 10, "base"));
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!v.is_string() || base < 0 || base == 1 || base > 36) return fallback;
  int64_t i = 0;
  if (parse_int(v.as_string(), static_cast<int>(base), &i)) return Value::integer(i);
  const std::string s = text::strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
  return Value::integer(static_cast<int64_t>(d));
}

Result<Value> filter_float(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("float", args, {"default"}));
  const Value fallback = given(a[0]) ? a[0] : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_float());
  if (!v.is_string()) return fallback;
  const std::string s = text::strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return fallback;
  return Value::number(d);
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
Result<Value> filter_tojson(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("tojson", args,
                                           {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  o.ensure_ascii = a[0].truthy();
  o.sort_keys = a[3].truthy();
  if (given(a[1]) && !a[1].is_none()) {
    o.has_indent = true;
    if (a[1].is_string()) {
      o.indent = a[1].as_string();
    } else if (a[1].is_int() || a[1].is_bool()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1].as_int(), 0, 256)), ' ');
    } else {
      return raw_error("tojson: indent must be an integer or a string");
    }
    o.item_separator.assign(1, ',');  // json.dumps drops the space when indenting
  }
  if (given(a[2]) && !a[2].is_none()) {
    if (!a[2].is_list_or_tuple() || a[2].items().size() != 2 || !a[2].items()[0].is_string() ||
        !a[2].items()[1].is_string())
      return raw_error("tojson: separators must be a pair of strings");
    o.item_separator = a[2].items()[0].as_string();
    o.key_separator = a[2].items()[1].as_string();
  }
  QRUN_JINJA_ASSIGN(std::string s, to_json(v, o));
  QRUN_TRY(check_string_size(s.size()));
  return Value::string(std::move(s));
}

Result<Value> filter_items(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("items", args, {}));
  if (v.is_undefined()) return Value::iterator({});
  if (!v.is_dict()) return raw_error("Can only get item pairs from a mapping.");
  ValueList out;
  for (const Dict::Entry& e : v.dict_ref().entries())
    out.push_back(Value::tuple({e.first, e.second}));
  return Value::iterator(std::move(out));
}

// Applies a per-item function to every item of `v`.
// Like jinja2's generators, a false value (None, "", []) maps to nothing.
template <class Fn>
Result<Value> map_items(const Value& v, Fn fn) {
  if (!v.truthy()) return Value::list();
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  ValueList out;
  out.reserve(items.size());
  for (const Value& item : items) {
    QRUN_JINJA_ASSIGN(Value r, fn(item));
    out.push_back(std::move(r));
  }
  return Value::iterator(std::move(out));
}

// map(attribute='x', default=...) or map('filter', *args, **kwargs).
Result<Value> filter_map(Interpreter& in, const Value& v, CallArgs& args) {
  if (args.args.empty()) {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("map", args, {"attribute", "default"}));
    if (!given(a[0])) return raw_error("map: no filter or attribute given");
    QRUN_JINJA_ASSIGN(const std::string path, to_str(a[0]));
    const Value fallback = a[1];
    return map_items(v, [&](const Value& item) -> Result<Value> {
      QRUN_JINJA_ASSIGN(Value r, get_path(item, path));
      if (r.is_undefined() && given(fallback)) return fallback;
      return r;
    });
  }
  QRUN_JINJA_ASSIGN(const std::string name, to_str(args.args[0]));
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  return map_items(v, [&](const Value& item) -> Result<Value> {
    CallArgs call = rest;
    return in.apply_filter(name, item, call);
  });
}

// select/reject (attribute empty) and selectattr/rejectattr.
Result<Value> select_items(Interpreter& in, const Value& v, CallArgs& args, bool by_attribute,
                           bool keep_when) {
  size_t next = 0;
  std::string path;
  if (by_attribute) {
    if (args.args.empty()) return raw_error("selectattr: no attribute given");
    QRUN_JINJA_ASSIGN(path, to_str(args.args[0]));
    next = 1;
  }
  std::string test;
  if (args.args.size() > next) {
    QRUN_JINJA_ASSIGN(test, to_str(args.args[next]));
  }
  CallArgs test_args;
  if (args.args.size() > next + 1)
    test_args.args.assign(args.args.begin() + next + 1, args.args.end());
  test_args.kwargs = args.kwargs;
  if (!v.truthy()) return Value::iterator({});
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  ValueList out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      QRUN_JINJA_ASSIGN(subject, get_path(item, path));
    }
    bool pass = subject.truthy();
    if (!test.empty()) {
      CallArgs call = test_args;
      QRUN_JINJA_ASSIGN(pass, in.apply_test(test, subject, call));
    }
    if (pass == keep_when) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Result<Value> filter_select(Interpreter& in, const Value& v, CallArgs& args) {
  return select_items(in, v, args, false, true);
}
Result<Value> filter_reject(Interpreter& in, const Value& v, CallArgs& args) {
  return select_items(in, v, args, false, false);
}
Result<Value> filter_selectattr(Interpreter& in, const Value& v, CallArgs& args) {
  return select_items(in, v, args, true, true);
}
Result<Value> filter_rejectattr(Interpreter& in, const Value& v, CallArgs& args) {
  return select_items(in, v, args, true, false);
}

// The key jinja2 sorts and compares by: an attribute path, strings lower-cased unless
// case-sensitive.
Result<Value> sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = item;
  if (given(attribute) && !attribute.is_none()) {
    QRUN_JINJA_ASSIGN(const std::string path, to_str(attribute));
    QRUN_JINJA_ASSIGN(key, get_path(item, path));
  }
  if (!case_sensitive && key.is_string()) return Value::string(text::lower(key.as_string()));
  return key;
}

// Stable sort of `items` by precomputed keys; the first comparison error is returned.
Result<void> sort_by_keys(ValueList& items, ValueList keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Error error;
  bool failed = false;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (failed) return false;
    Result<int> c = compare(keys[x], keys[y]);
    if (!c.ok()) {
      failed = true;
      error = c.error();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (failed) return error;
  ValueList sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  return {};
}

Result<Value> filter_sort(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a,
                    bind_args("sort", args, {"reverse", "case_sensitive", "attribute"}));
  QRUN_JINJA_ASSIGN(ValueList items, iterate(v));
  ValueList keys;
  for (const Value& item : items) {
    QRUN_JINJA_ASSIGN(Value k, sort_key(item, a[2], a[1].truthy()));
    keys.push_back(std::move(k));
  }
  QRUN_TRY(sort_by_keys(items, std::move(keys), a[0].truthy()));
  return Value::list(std::move(items));
}

Result<Value> filter_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return raw_error("dictsort: the value is not a mapping");
  std::string by = "key";
  if (given(a[1])) {
    QRUN_JINJA_ASSIGN(by, to_str(a[1]));
  }
  if (by != "key" && by != "value")
    return raw_error("You can only sort by either 'key' or 'value'");
  ValueList items;
  ValueList keys;
  for (const Dict::Entry& e : v.dict_ref().entries()) {
    items.push_back(Value::tuple({e.first, e.second}));
    QRUN_JINJA_ASSIGN(Value k, sort_key(by == "key" ? e.first : e.second, Value(), a[0].truthy()));
    keys.push_back(std::move(k));
  }
  QRUN_TRY(sort_by_keys(items, std::move(keys), a[2].truthy()));
  return Value::list(std::move(items));
}

Result<Value> filter_unique(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("unique", args, {"case_sensitive", "attribute"}));
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  ValueList out;
  ValueList seen;
  for (const Value& item : items) {
    QRUN_JINJA_ASSIGN(Value key, sort_key(item, a[1], a[0].truthy()));
    bool found = false;
    for (const Value& s : seen) {
      QRUN_JINJA_ASSIGN(found, equals(s, key));
      if (found) break;
    }
    if (found) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Result<Value> min_max(const Value& v, CallArgs& args, bool want_max) {
  QRUN_JINJA_ASSIGN(ValueList a,
                    bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  QRUN_JINJA_ASSIGN(Value best_key, sort_key(items[0], a[1], a[0].truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    QRUN_JINJA_ASSIGN(Value key, sort_key(items[i], a[1], a[0].truthy()));
    QRUN_JINJA_ASSIGN(const int c, compare(key, best_key));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Result<Value> filter_min(Interpreter&, const Value& v, CallArgs& args) {
  return min_max(v, args, false);
}
Result<Value> filter_max(Interpreter&, const Value& v, CallArgs& args) {
  return min_max(v, args, true);
}

Result<Value> filter_sum(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("sum", args, {"attribute", "start"}));
  Value total = given(a[1]) ? a[1] : Value::integer(0);
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  for (const Value& item : items) {
    Value x = item;
    if (given(a[0])) {
      QRUN_JINJA_ASSIGN(const std::string path, to_str(a[0]));
      QRUN_JINJA_ASSIGN(x, get_path(item, path));
    }
    QRUN_JINJA_ASSIGN(total, binary_op(BinaryOp::kAdd, total, x));
  }
  return total;
}

Result<Value> filter_reverse(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("reverse", args, {}));
  if (v.is_string()) return slice(v, Value(), Value(), Value::integer(-1));
  // reversed() where Python has it (an iterator), else a reversed list.
  const bool reversible = !v.is_iterator();
  QRUN_JINJA_ASSIGN(ValueList items, iterate(v));
  std::reverse(items.begin(), items.end());
  return reversible ? Value::iterator(std::move(items)) : Value::list(std::move(items));
}

Result<Value> filter_safe(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("safe", args, {}));
  QRUN_JINJA_ASSIGN(std::string s, to_str(v));
  return Value::string(std::move(s), true);
}

Result<Value> filter_escape(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("escape", args, {}));
  if (v.is_string() && v.is_safe()) return v;
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  return Value::string(html_escape(s), true);
}

Result<Value> filter_forceescape(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("forceescape", args, {}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  return Value::string(html_escape(s), true);
}

Result<Value> filter_indent(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("indent", args, {"width", "first", "blank"}));
  std::string pad = "    ";
  if (a[0].is_string()) {
    pad = a[0].as_string();
  } else if (given(a[0])) {
    QRUN_JINJA_ASSIGN(const int64_t w, int_arg(a[0], 4, "width"));
    pad = std::string(static_cast<size_t>(std::clamp<int64_t>(w, 0, 4096)), ' ');
  }
  QRUN_JINJA_ASSIGN(std::string s, to_str(v));
  s += "\n";  // jinja2 appends a newline so that splitlines keeps a trailing empty line
  const std::vector<std::string> lines = text::splitlines(s, false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    const bool indent_line = i == 0 ? a[1].truthy() : (a[2].truthy() || !lines[i].empty());
    if (indent_line) out += pad;
    out += lines[i];
    QRUN_TRY(check_string_size(out.size()));
  }
  return Value::string(std::move(out), v.is_safe());
}

Result<Value> filter_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("wordcount", args, {}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  int64_t words = 0;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    const bool word_char = c == '_' || text::is_alpha(c) || text::is_digit(c);
    if (word_char && !in_word) ++words;
    in_word = word_char;
    i += len;
  }
  return Value::integer(words);
}

Result<Value> filter_abs(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("abs", args, {}));
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) return raw_error("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  return raw_error(format("bad operand type for abs(): '%s'", type_name(v)));
}

Result<Value> filter_round(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("round", args, {"precision", "method"}));
  QRUN_JINJA_ASSIGN(const int64_t precision, int_arg(a[0], 0, "precision"));
  std::string method = "common";
  if (given(a[1])) {
    QRUN_JINJA_ASSIGN(method, to_str(a[1]));
  }
  if (method != "common" && method != "ceil" && method != "floor")
    return raw_error("method must be 'common', 'ceil' or 'floor'");
  if (!v.is_number())
    return raw_error(format("type %s doesn't define __round__ method", type_name(v)));
  if (method == "common" && !v.is_float() && precision >= 0) return Value::integer(v.as_int());
  const int p = static_cast<int>(std::clamp<int64_t>(precision, -300, 300));
  const double x = v.as_float();
  if (method == "common") {
    if (p < 0 || !std::isfinite(x)) {
      const double scale = std::pow(10.0, -p);
      return Value::number(std::nearbyint(x / scale) * scale);
    }
    // Correctly rounded to p decimals with ties to even, as Python's round().
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", std::min(p, 340), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, p);
  const double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
  return Value::number(r / scale);
}

Result<Value> filter_center(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("center", args, {"width"}));
  QRUN_JINJA_ASSIGN(const int64_t width, int_arg(a[0], 80, "width"));
  CallArgs call;
  call.args.push_back(Value::integer(width));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  return call_method(Value::string(s), "center", call);
}

Result<Value> filter_batch(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("batch", args, {"linecount", "fill_with"}));
  QRUN_JINJA_ASSIGN(const int64_t n, int_arg(a[0], 0, "linecount"));
  if (n <= 0) return raw_error("batch: linecount must be positive");
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  ValueList out;
  ValueList row;
  for (const Value& item : items) {
    row.push_back(item);
    if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::list(std::exchange(row, {})));
  }
  if (!row.empty()) {
    if (given(a[1]) && !a[1].is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a[1]);
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::iterator(std::move(out));
}

Result<Value> filter_slice(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("slice", args, {"slices", "fill_with"}));
  QRUN_JINJA_ASSIGN(const int64_t slices, int_arg(a[0], 0, "slices"));
  if (slices <= 0 || slices > kMaxListItems) return raw_error("slice: slices must be positive");
  QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t per = n / slices;
  const int64_t with_extra = n % slices;
  int64_t offset = 0;
  ValueList out;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t start = offset + s * per;
    if (s < with_extra) ++offset;
    const int64_t end = offset + (s + 1) * per;
    ValueList column(items.begin() + start, items.begin() + end);
    if (given(a[1]) && !a[1].is_none() && s >= with_extra) column.push_back(a[1]);
    out.push_back(Value::list(std::move(column)));
  }
  return Value::iterator(std::move(out));
}

Result<Value> filter_format(Interpreter&, const Value& v, CallArgs& args) {
  if (!args.args.empty() && !args.kwargs.empty())
    return raw_error("can't handle positional and keyword arguments at the same time");
  QRUN_JINJA_ASSIGN(const std::string fmt, to_str(v));
  Value operands = Value::tuple(args.args);
  if (!args.kwargs.empty()) {
    operands = Value::dict();
    for (auto& [k, x] : args.kwargs) operands.dict_ref().set(k, x);
  }
  QRUN_JINJA_ASSIGN(std::string s, percent_format(fmt, operands));
  return Value::string(std::move(s));
}

Result<Value> filter_attr(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("attr", args, {"name"}));
  QRUN_JINJA_ASSIGN(const std::string name, to_str(a[0]));
  // Python's getattr only: dict keys are not attributes.
  if (v.is_dict() && !has_method(v, name))
    return Value::undefined(format("'dict object' has no attribute '%s'", name.c_str()));
  return get_attr(v, name);
}

Result<Value> filter_pprint(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(bind_args("pprint", args, {}));
  QRUN_JINJA_ASSIGN(std::string s, to_repr(v));
  return Value::string(std::move(s));
}

Result<Value> filter_truncate(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a,
                    bind_args("truncate", args, {"length", "killwords", "end", "leeway"}));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  QRUN_JINJA_ASSIGN(const int64_t length, int_arg(a[0], 255, "length"));
  std::string end = "...";
  if (given(a[2])) {
    QRUN_JINJA_ASSIGN(end, to_str(a[2]));
  }
  QRUN_JINJA_ASSIGN(const int64_t leeway, int_arg(a[3], 5, "leeway"));
  const int64_t end_len = static_cast<int64_t>(text::char_count(end));
  if (length < end_len || leeway < 0) return raw_error("truncate: bad length or leeway");
  const std::vector<size_t> off = text::char_offsets(s);
  const int64_t n = static_cast<int64_t>(off.size()) - 1;
  if (n <= length + leeway) return Value::string(s);
  std::string head = s.substr(0, off[static_cast<size_t>(length - end_len)]);
  if (!a[1].truthy()) {
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value::string(head + end);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", filter_abs},
    {"attr", filter_attr},
    {"batch", filter_batch},
    {"capitalize", string_filter<text::capitalize>},
    {"center", filter_center},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"first", filter_first},
    {"float", filter_float},
    {"forceescape", filter_forceescape},
    {"format", filter_format},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_last},
    {"length", filter_length},
    {"list", filter_list},
    {"lower", string_filter<text::lower>},
    {"map", filter_map},
    {"max", filter_max},
    {"min", filter_min},
    {"pprint", filter_pprint},
    {"reject", filter_reject},
    {"rejectattr", filter_rejectattr},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"round", filter_round},
    {"safe", filter_safe},
    {"select", filter_select},
    {"selectattr", filter_selectattr},
    {"slice", filter_slice},
    {"sort", filter_sort},
    {"string", filter_string},
    {"sum", filter_sum},
    {"title", string_filter<jinja_title>},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"truncate", filter_truncate},
    {"unique", filter_unique},
    {"upper", string_filter<text::upper>},
    {"wordcount", filter_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace qrun::jinja
