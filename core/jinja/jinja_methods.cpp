// Methods of Python's str, list, tuple and dict that templates call (message.content.split(),
// tools.items(), ns.ids.append(x), ...), the globals (range, namespace, dict, cycler, joiner,
// raise_exception, strftime_now) and Python-style argument binding for all built-ins.
// list.append/pop and dict.update mutate in place, as in plain jinja2 (Hugging Face's
// sandbox would refuse them; templates that use them expect them to work).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_ops.h"
#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

constexpr std::string_view kStrMethods[] = {
    "capitalize", "casefold",   "center",       "count",        "endswith", "find",
    "format",     "index",      "isalnum",      "isalpha",      "isdigit",  "islower",
    "isnumeric",  "isspace",    "isupper",      "join",         "ljust",    "lower",
    "lstrip",     "partition",  "removeprefix", "removesuffix", "replace",  "rfind",
    "rindex",     "rjust",      "rpartition",   "rsplit",       "rstrip",   "split",
    "splitlines", "startswith", "strip",        "swapcase",     "title",    "upper",
    "zfill"};
constexpr std::string_view kListMethods[] = {"append", "clear",  "copy", "count",  "extend",
                                             "index",  "insert", "pop",  "remove", "reverse"};
constexpr std::string_view kTupleMethods[] = {"count", "index"};
constexpr std::string_view kDictMethods[] = {"clear", "copy",       "get",    "items", "keys",
                                             "pop",   "setdefault", "update", "values"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Result<std::string> str_arg(const Value& v, const char* what) {
  if (!v.is_string()) return raw_error(format("%s must be str, not %s", what, type_name(v)));
  return v.as_string();
}

Result<std::optional<std::string>> optional_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  QRUN_JINJA_ASSIGN(std::string s, str_arg(v, what));
  return std::optional<std::string>(std::move(s));
}

Result<int64_t> int_or(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    return raw_error(format("an integer is required, not %s", type_name(v)));
  return v.as_int();
}

Value string_list(std::vector<std::string> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// Python's str.center/ljust/rjust with a one-character fill.
Result<Value> pad(const std::string& s, const Value& width_v, const Value& fill_v, char how) {
  QRUN_JINJA_ASSIGN(const int64_t width, int_or(width_v, 0));
  std::string fill = " ";
  if (!fill_v.is_undefined()) {
    QRUN_JINJA_ASSIGN(fill, str_arg(fill_v, "fillchar"));
    if (text::char_count(fill) != 1)
      return raw_error("The fill character must be exactly one character long");
  }
  const int64_t len = static_cast<int64_t>(text::char_count(s));
  if (width <= len) return Value::string(s);
  const int64_t margin = width - len;
  QRUN_TRY(check_string_size(static_cast<size_t>(margin) * fill.size() + s.size()));
  int64_t left = 0;
  if (how == 'c') left = margin / 2 + (margin & width & 1);
  if (how == 'r') left = margin;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return Value::string(std::move(out));
}

Result<bool> affix_match(const std::string& s, const Value& affix, bool prefix) {
  const auto one = [&](const Value& a) -> Result<bool> {
    QRUN_JINJA_ASSIGN(const std::string x, str_arg(a, prefix ? "startswith arg" : "endswith arg"));
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (!affix.is_tuple()) return one(affix);
  for (const Value& a : affix.items()) {
    QRUN_JINJA_ASSIGN(const bool m, one(a));
    if (m) return true;
  }
  return false;
}

template <class Pred>
Value all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!pred(text::code_point_at(s, i, &len))) return Value::boolean(false);
    i += len;
  }
  return Value::boolean(true);
}

Result<Value> str_method(const Value& self, std::string_view m, CallArgs& args) {
  const std::string& s = self.as_string();
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize" || m == "swapcase" ||
      m == "casefold") {
    QRUN_TRY(bind_args(std::string(m).c_str(), args, {}));
    if (m == "upper") return Value::string(text::upper(s));
    if (m == "title") return Value::string(text::title(s));
    if (m == "capitalize") return Value::string(text::capitalize(s));
    if (m == "swapcase") return Value::string(text::swapcase(s));
    return Value::string(text::lower(s));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("strip", args, {"chars"}));
    QRUN_JINJA_ASSIGN(const auto chars, optional_str(a[0], "strip arg"));
    return Value::string(text::strip(s, chars, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("split", args, {"sep", "maxsplit"}));
    QRUN_JINJA_ASSIGN(const auto sep, optional_str(a[0], "separator"));
    QRUN_JINJA_ASSIGN(const int64_t maxsplit, int_or(a[1], -1));
    if (sep && sep->empty()) return raw_error("empty separator");
    return string_list(m == "split" ? text::split(s, sep, maxsplit)
                                    : text::rsplit(s, sep, maxsplit));
  }
  if (m == "splitlines") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("splitlines", args, {"keepends"}));
    return string_list(text::splitlines(s, a[0].truthy()));
  }
  if (m == "startswith" || m == "endswith") {
    QRUN_JINJA_ASSIGN(ValueList a,
                      bind_args(m == "startswith" ? "startswith" : "endswith", args, {"affix"}));
    QRUN_JINJA_ASSIGN(const bool r, affix_match(s, a[0], m == "startswith"));
    return Value::boolean(r);
  }
  if (m == "replace") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("replace", args, {"old", "new", "count"}));
    QRUN_JINJA_ASSIGN(const std::string from, str_arg(a[0], "replace arg 1"));
    QRUN_JINJA_ASSIGN(const std::string to, str_arg(a[1], "replace arg 2"));
    QRUN_JINJA_ASSIGN(const int64_t count, int_or(a[2], -1));
    std::string out = text::replace(s, from, to, count);
    QRUN_TRY(check_string_size(out.size()));
    return Value::string(std::move(out));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"sub"}));
    QRUN_JINJA_ASSIGN(const std::string sub, str_arg(a[0], "substring"));
    if (m == "count") return Value::integer(text::count(s, sub));
    const int64_t at = text::find(s, sub, m[0] == 'r');
    if (at < 0 && (m == "index" || m == "rindex")) return raw_error("substring not found");
    return Value::integer(at);
  }
  if (m == "format") {
    QRUN_JINJA_ASSIGN(std::string out, str_format(s, args));
    return Value::string(std::move(out));
  }
  if (m == "join") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("join", args, {"iterable"}));
    QRUN_JINJA_ASSIGN(const ValueList items, iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return raw_error(
            format("sequence item %zu: expected str instance, %s found", i, type_name(items[i])));
      }
      if (i) out += s;
      out += items[i].as_string();
      QRUN_TRY(check_string_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (m == "center" || m == "ljust" || m == "rjust") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"width", "fillchar"}));
    return pad(s, a[0], a[1], m[0]);
  }
  if (m == "zfill") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("zfill", args, {"width"}));
    QRUN_JINJA_ASSIGN(const int64_t width, int_or(a[0], 0));
    const int64_t len = static_cast<int64_t>(text::char_count(s));
    if (width <= len) return Value::string(s);
    QRUN_TRY(check_string_size(static_cast<size_t>(width)));
    const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') +
                         s.substr(sign));
  }
  if (m == "partition" || m == "rpartition") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"sep"}));
    QRUN_JINJA_ASSIGN(const std::string sep, str_arg(a[0], "separator"));
    if (sep.empty()) return raw_error("empty separator");
    const size_t at = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      if (m == "partition") return Value::tuple({self, Value::string(""), Value::string("")});
      return Value::tuple({Value::string(""), Value::string(""), self});
    }
    return Value::tuple({Value::string(s.substr(0, at)), Value::string(sep),
                         Value::string(s.substr(at + sep.size()))});
  }
  if (m == "removeprefix" || m == "removesuffix") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"affix"}));
    QRUN_JINJA_ASSIGN(const std::string x, str_arg(a[0], "affix"));
    QRUN_JINJA_ASSIGN(const bool hit, affix_match(s, a[0], m == "removeprefix"));
    if (!hit) return Value::string(s);
    return Value::string(m == "removeprefix" ? s.substr(x.size())
                                             : s.substr(0, s.size() - x.size()));
  }
  QRUN_TRY(bind_args(std::string(m).c_str(), args, {}));
  if (m == "isdigit" || m == "isnumeric") return all_chars(s, text::is_digit);
  if (m == "isalpha") return all_chars(s, text::is_alpha);
  if (m == "isalnum")
    return all_chars(s, [](uint32_t c) { return text::is_alpha(c) || text::is_digit(c); });
  if (m == "isspace") return all_chars(s, text::is_space);
  // islower / isupper: some cased character and none of the other case.
  const bool want_lower = m == "islower";
  bool cased = false;
  bool other = false;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    const bool lower = text::to_upper(c) != c;
    const bool upper = text::to_lower(c) != c;
    cased = cased || lower || upper;
    other = other || (want_lower ? upper : lower);
    i += len;
  }
  return Value::boolean(cased && !other);
}

Result<size_t> list_index(const ValueList& items, const Value& x) {
  for (size_t i = 0; i < items.size(); ++i) {
    QRUN_JINJA_ASSIGN(const bool eq, equals(items[i], x));
    if (eq) return i;
  }
  return raw_error("x is not in list");
}

Result<Value> list_method(const Value& self, std::string_view m, CallArgs& args) {
  ValueList& items = self.items();
  if (m == "count" || m == "index" || m == "remove") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"x"}));
    if (m == "count") {
      int64_t n = 0;
      for (const Value& v : items) {
        QRUN_JINJA_ASSIGN(const bool eq, equals(v, a[0]));
        n += eq;
      }
      return Value::integer(n);
    }
    QRUN_JINJA_ASSIGN(const size_t at, list_index(items, a[0]));
    if (m == "index") return Value::integer(static_cast<int64_t>(at));
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
    return Value::none();
  }
  if (m == "append") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("append", args, {"object"}));
    if (static_cast<int64_t>(items.size()) >= kMaxListItems) return raw_error("list too long");
    items.push_back(a[0]);
    return Value::none();
  }
  if (m == "extend") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("extend", args, {"iterable"}));
    QRUN_JINJA_ASSIGN(const ValueList more, iterate(a[0]));
    if (static_cast<int64_t>(items.size() + more.size()) > kMaxListItems)
      return raw_error("list too long");
    items.insert(items.end(), more.begin(), more.end());
    return Value::none();
  }
  if (m == "insert") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("insert", args, {"index", "object"}));
    QRUN_JINJA_ASSIGN(int64_t i, int_or(a[0], 0));
    const int64_t n = static_cast<int64_t>(items.size());
    if (n >= kMaxListItems) return raw_error("list too long");
    if (i < 0) i = std::max<int64_t>(0, i + n);
    i = std::min(i, n);
    items.insert(items.begin() + static_cast<std::ptrdiff_t>(i), a[1]);
    return Value::none();
  }
  if (m == "pop") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("pop", args, {"index"}));
    if (items.empty()) return raw_error("pop from empty list");
    const int64_t n = static_cast<int64_t>(items.size());
    QRUN_JINJA_ASSIGN(int64_t i, int_or(a[0], -1));
    if (i < 0) i += n;
    if (i < 0 || i >= n) return raw_error("pop index out of range");
    Value v = items[static_cast<size_t>(i)];
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
    return v;
  }
  QRUN_TRY(bind_args(std::string(m).c_str(), args, {}));
  if (m == "reverse") std::reverse(items.begin(), items.end());
  if (m == "clear") items.clear();
  if (m == "copy") return Value::list(items);
  return Value::none();
}

Result<Value> dict_method(const Value& self, std::string_view m, CallArgs& args) {
  Dict& d = self.dict_ref();
  if (m == "get" || m == "setdefault") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args(std::string(m).c_str(), args, {"key", "default"}));
    const Value fallback = a[1].is_undefined() ? Value::none() : a[1];
    if (!is_hashable(a[0])) return raw_error(format("unhashable type: '%s'", type_name(a[0])));
    if (const Value* v = d.find(a[0])) return *v;
    if (m == "setdefault") QRUN_TRY(d.set(a[0], fallback));
    return fallback;
  }
  if (m == "pop") {
    QRUN_JINJA_ASSIGN(ValueList a, bind_args("pop", args, {"key", "default"}));
    if (!is_hashable(a[0])) return raw_error(format("unhashable type: '%s'", type_name(a[0])));
    if (const Value* v = d.find(a[0])) {
      Value out = *v;
      d.erase(a[0]);
      return out;
    }
    if (!a[1].is_undefined()) return a[1];
    QRUN_JINJA_ASSIGN(const std::string key, to_repr(a[0]));
    return raw_error("KeyError: " + key);
  }
  if (m == "update") {
    if (args.args.size() > 1) return raw_error("update expected at most 1 argument");
    if (!args.args.empty()) {
      const Value& other = args.args[0];
      if (!other.is_dict()) return raw_error("dict.update() needs a mapping");
      const auto entries = other.dict_ref().entries();  // a copy: other may be d itself
      for (const Dict::Entry& e : entries) QRUN_TRY(d.set(e.first, e.second));
    }
    for (auto& [k, v] : args.kwargs) d.set(k, v);
    return Value::none();
  }
  QRUN_TRY(bind_args(std::string(m).c_str(), args, {}));
  if (m == "clear") {
    d.clear();
    return Value::none();
  }
  if (m == "copy") {
    auto copy = std::make_shared<Dict>(d);
    return Value::dict(std::move(copy));
  }
  ValueList out;
  out.reserve(d.size());
  for (const Dict::Entry& e : d.entries()) {
    if (m == "keys") out.push_back(e.first);
    if (m == "values") out.push_back(e.second);
    if (m == "items") out.push_back(Value::tuple({e.first, e.second}));
  }
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python builds it: a mapping or an iterable of pairs, then keywords.
Result<std::shared_ptr<Dict>> build_dict(CallArgs& args, const char* fn) {
  auto d = std::make_shared<Dict>();
  if (args.args.size() > 1) return raw_error(format("%s expected at most 1 argument", fn));
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict() || src.kind() == Kind::kNamespace) {
      for (const Dict::Entry& e : src.dict_ref().entries()) QRUN_TRY(d->set(e.first, e.second));
    } else {
      QRUN_JINJA_ASSIGN(const ValueList pairs, iterate(src));
      for (const Value& p : pairs) {
        QRUN_JINJA_ASSIGN(const ValueList kv, iterate(p));
        if (kv.size() != 2) return raw_error(format("%s: each item must be a pair", fn));
        QRUN_TRY(d->set(kv[0], kv[1]));
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d->set(k, v);
  return d;
}

Result<Value> global_range(Interpreter&, CallArgs& args) {
  if (!args.kwargs.empty()) return raw_error("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    return raw_error("range expected 1 to 3 arguments");
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.args.size(); ++i) {
    const Value& a = args.args[i];
    if (!a.is_int() && !a.is_bool())
      return raw_error(format("'%s' object cannot be interpreted as an integer", type_name(a)));
    v[args.args.size() == 1 ? 1 : i] = a.as_int();
  }
  const int64_t start = v[0];
  const int64_t stop = v[1];
  const int64_t step = v[2];
  if (step == 0) return raw_error("range() arg 3 must not be zero");
  const long double span =
      step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count =
      span <= 0 ? 0 : (span - 1) / std::abs(static_cast<long double>(step)) + 1;
  if (count > kMaxListItems) return raw_error("range() too large");
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i)
    out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

Result<Value> global_cycler(Interpreter&, CallArgs& args) {
  if (args.args.empty()) return raw_error("cycler requires at least one item");
  auto state = std::make_shared<Dict>();
  auto items = std::make_shared<const ValueList>(args.args);
  auto pos = std::make_shared<size_t>(0);
  std::weak_ptr<Dict> weak = state;
  state->set("current", (*items)[0]);
  state->set("next", Value::function("cycler.next",
                                     [items, pos, weak](Interpreter&, CallArgs&) -> Result<Value> {
                                       Value v = (*items)[*pos];
                                       *pos = (*pos + 1) % items->size();
                                       if (auto s = weak.lock()) s->set("current", (*items)[*pos]);
                                       return v;
                                     }));
  state->set("reset", Value::function("cycler.reset",
                                      [items, pos, weak](Interpreter&, CallArgs&) -> Result<Value> {
                                        *pos = 0;
                                        if (auto s = weak.lock()) s->set("current", (*items)[0]);
                                        return Value::none();
                                      }));
  return Value::loop_object(std::move(state));
}

std::string strftime_text(const std::string& fmt, const std::tm& now) {
  if (fmt.empty() || fmt.size() > 4096) return "";
  std::vector<char> buf(fmt.size() * 64 + 256);
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &now);
  return std::string(buf.data(), n);
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Kind::kString:
      return listed(kStrMethods, name);
    case Kind::kList:
      return listed(kListMethods, name);
    case Kind::kTuple:
      return listed(kTupleMethods, name);
    case Kind::kDict:
      return listed(kDictMethods, name);
    default:
      return false;
  }
}

Value bound_method(const Value& self, std::string_view name) {
  std::string method(name);
  return Value::function(method, [self, method](Interpreter&, CallArgs& args) {
    return call_method(self, method, args);
  });
}

Result<Value> call_method(const Value& self, std::string_view name, CallArgs& args) {
  switch (self.kind()) {
    case Kind::kString:
      return str_method(self, name, args);
    case Kind::kList:
    case Kind::kTuple:
      return list_method(self, name, args);
    case Kind::kDict:
      return dict_method(self, name, args);
    default:
      return raw_error(
          format("'%s' object has no attribute '%s'", type_name(self), std::string(name).c_str()));
  }
}

Result<ValueList> bind_args(const char* fn, CallArgs& args,
                            std::initializer_list<const char*> params) {
  ValueList out(params.size());
  if (args.args.size() > params.size()) {
    return raw_error(format("%s() takes at most %zu argument(s) (%zu given)", fn, params.size(),
                            args.args.size()));
  }
  for (size_t i = 0; i < args.args.size(); ++i) out[i] = args.args[i];
  for (auto& [key, value] : args.kwargs) {
    size_t i = 0;
    for (const char* p : params) {
      if (key == p) break;
      ++i;
    }
    if (i == params.size())
      return raw_error(format("%s() got an unexpected keyword argument '%s'", fn, key.c_str()));
    if (i < args.args.size())
      return raw_error(format("%s() got multiple values for argument '%s'", fn, key.c_str()));
    out[i] = value;
  }
  return out;
}

Result<Value> get_path(const Value& obj, std::string_view path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string_view part =
        path.substr(start, dot == std::string_view::npos ? path.npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    const Value key = numeric && part.size() < 18 ? Value::integer(std::stoll(std::string(part)))
                                                  : Value::string(std::string(part));
    QRUN_JINJA_ASSIGN(cur, get_item(cur, key));
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

void add_globals(Dict& g, const std::tm& now) {
  g.set("range", Value::function("range", global_range));
  g.set("namespace",
        Value::function("namespace", [](Interpreter&, CallArgs& args) -> Result<Value> {
          QRUN_JINJA_ASSIGN(auto d, build_dict(args, "namespace"));
          return Value::namespace_object(std::move(d));
        }));
  g.set("dict", Value::function("dict", [](Interpreter&, CallArgs& args) -> Result<Value> {
          QRUN_JINJA_ASSIGN(auto d, build_dict(args, "dict"));
          return Value::dict(std::move(d));
        }));
  g.set("cycler", Value::function("cycler", global_cycler));
  g.set("joiner", Value::function("joiner", [](Interpreter&, CallArgs& args) -> Result<Value> {
          QRUN_JINJA_ASSIGN(ValueList a, bind_args("joiner", args, {"sep"}));
          std::string sep = ", ";
          if (!a[0].is_undefined()) {
            QRUN_JINJA_ASSIGN(sep, to_str(a[0]));
          }
          auto used = std::make_shared<bool>(false);
          return Value::function("joiner", [sep, used](Interpreter&, CallArgs&) -> Result<Value> {
            const bool first = !*used;
            *used = true;
            return Value::string(first ? "" : sep);
          });
        }));
  g.set("raise_exception",
        Value::function("raise_exception", [](Interpreter&, CallArgs& args) -> Result<Value> {
          QRUN_JINJA_ASSIGN(ValueList a, bind_args("raise_exception", args, {"message"}));
          QRUN_JINJA_ASSIGN(const std::string message, to_str(a[0]));
          return raw_error(message);
        }));
  g.set("strftime_now",
        Value::function("strftime_now", [now](Interpreter&, CallArgs& args) -> Result<Value> {
          QRUN_JINJA_ASSIGN(ValueList a, bind_args("strftime_now", args, {"format"}));
          QRUN_JINJA_ASSIGN(const std::string fmt, str_arg(a[0], "format"));
          return Value::string(strftime_text(fmt, now));
        }));
}

}  // namespace qrun::jinja
