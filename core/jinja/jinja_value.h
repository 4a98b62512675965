// Values of qrun's Jinja interpreter: Python's object model cut down to what chat templates
// use. Lists, dicts and namespaces are shared references, as in Python; strings are UTF-8 and
// index by character. Dicts keep insertion order. The recursive walkers (str, repr, ==, <,
// tojson) stop at kMaxValueDepth and report an Error, so no value can overflow the stack.
// Errors from this layer are "raw" (kRuntime, no line); the interpreter adds origin and line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ggml-like/result.h"

// Evaluates a Result-returning expression; on error returns the error from the enclosing
// function, otherwise moves the value into `lhs` (a declaration or an lvalue).
#define QRUN_JINJA_CONCAT_INNER(a, b) a##b
#define QRUN_JINJA_CONCAT(a, b) QRUN_JINJA_CONCAT_INNER(a, b)
#define QRUN_JINJA_ASSIGN(lhs, expr) \
  QRUN_JINJA_ASSIGN_IMPL(QRUN_JINJA_CONCAT(qrun_jinja_result_, __LINE__), lhs, expr)
#define QRUN_JINJA_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.error();           \
  lhs = std::move(tmp).value()

namespace qrun::jinja {

class Value;
class Dict;
class Interpreter;
using ValueList = std::vector<Value>;

// Nesting deeper than this in a value is an error wherever a walker meets it.
inline constexpr int kMaxValueDepth = 256;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kNamespace,  // namespace(): attributes in a Dict, assignable with {% set ns.x = ... %}
  kLoop,       // the `loop` variable of a for loop: read-only attributes in a Dict
  kFunction,   // macros, globals, bound methods
  kIterator,   // a one-shot iterator (what map, select, reverse, ... return in Python)
};

// Positional and keyword arguments of a call.
struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFunction = std::function<Result<Value>(Interpreter&, CallArgs&)>;

struct Function {
  std::string name;  // for messages and repr
  NativeFunction call;
};

// A raw error (no origin or line yet): the interpreter locates it at the node it reached.
inline Error raw_error(std::string message) {
  return Error{ErrorCode::kRuntime, std::move(message)};
}

class Value {
 public:
  Value() = default;  // undefined without a name
  static Value undefined(
      std::string hint);  // hint: what str() of an error says, e.g. "'x' is undefined"
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s, bool safe = false);
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict(std::shared_ptr<Dict> d);
  static Value dict();
  static Value namespace_object(std::shared_ptr<Dict> attributes);
  static Value loop_object(std::shared_ptr<Dict> attributes);
  static Value function(std::string name, NativeFunction fn);
  // Iterating consumes it; it is always true, has no len() and is not a sequence.
  static Value iterator(ValueList items);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_list_or_tuple() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kNamespace || kind_ == Kind::kLoop; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_iterator() const { return kind_ == Kind::kIterator; }
  bool is_safe() const { return safe_; }  // a Markup string

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;   // int or bool
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const std::string& undefined_hint() const;
  ValueList& items() const {
    return *std::get<std::shared_ptr<ValueList>>(data_);
  }  // also kIterator
  Dict& dict_ref() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& function_ref() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  // Identity of a shared container (lists, dicts, objects, functions); null otherwise.
  const void* identity() const;

  bool truthy() const;  // Python's bool()

 private:
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<ValueList>,
               std::shared_ptr<Dict>, std::shared_ptr<const Function>>
      data_;
};

// An insertion-ordered dict. Keys are hashable values: None, bool, int, float, str or a flat
// tuple of those; 1, 1.0 and True are the same key, as in Python.
class Dict {
 public:
  using Entry = std::pair<Value, Value>;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces (keeping the position). Unhashable keys are an error.
  Result<void> set(Value key, Value value);
  void set(std::string_view key, Value value);
  bool erase(const Value& key);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  void clear() { entries_.clear(); }

 private:
  std::vector<Entry> entries_;
};

// Python's type name of a value ("str", "int", "dict", "NoneType", ...).
const char* type_name(const Value& v);
// Whether `v` may be a dict key, and key equality (no recursion beyond one tuple level).
bool is_hashable(const Value& v);
bool keys_equal(const Value& a, const Value& b);

// str(v) and repr(v) as Python prints them; Undefined prints as "".
Result<std::string> to_str(const Value& v);
Result<void> append_str(std::string& out, const Value& v);
Result<std::string> to_repr(const Value& v);
// Python's repr() of a str and of a float (shortest round trip: 1.0, 1e-05, 1e+16, inf).
std::string repr_string(std::string_view s);
std::string repr_float(double d);

// Python's == (lists elementwise, dicts order-insensitive, 1 == 1.0 == True).
Result<bool> equals(const Value& a, const Value& b);
// Python's ordering: -1, 0 or 1; a TypeError-like error for unordered types ("'<' not
// supported between instances of 'str' and 'int'"). `op` names the operator in errors.
Result<int> compare(const Value& a, const Value& b, const char* op = "<");

// JSON in and out. from_json keeps key order (ordered_json). to_json is Python's json.dumps
// (HF's tojson): ensure_ascii, indent (None: one line with ", " and ": "), separators,
// sort_keys; NaN and infinities as NaN/Infinity.
Result<Value> from_json(const nlohmann::ordered_json& j);
struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
Result<std::string> to_json(const Value& v, const JsonOptions& options);

}  // namespace qrun::jinja
