// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...), with Python's type
// checks: bool counts as a number but not as an integer, dicts and strings are sequences,
// Undefined is iterable (it iterates as empty) and a sequence.
#include <cmath>

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_ops.h"
#include "core/jinja/jinja_text.h"

namespace qrun::jinja {
namespace {

Result<bool> no_args(const char* name, CallArgs& args) {
  QRUN_TRY(bind_args(name, args, {}));
  return true;
}

#define QRUN_JINJA_TYPE_TEST(fn_name, test_name, expr)                 \
  Result<bool> fn_name(Interpreter&, const Value& v, CallArgs& args) { \
    QRUN_TRY(no_args(test_name, args));                                \
    return (expr);                                                     \
  }

QRUN_JINJA_TYPE_TEST(test_defined, "defined", !v.is_undefined())
QRUN_JINJA_TYPE_TEST(test_undefined, "undefined", v.is_undefined())
QRUN_JINJA_TYPE_TEST(test_none, "none", v.is_none())
QRUN_JINJA_TYPE_TEST(test_boolean, "boolean", v.is_bool())
QRUN_JINJA_TYPE_TEST(test_true, "true", v.is_bool() && v.as_bool())
QRUN_JINJA_TYPE_TEST(test_false, "false", v.is_bool() && !v.as_bool())
QRUN_JINJA_TYPE_TEST(test_integer, "integer", v.is_int())
QRUN_JINJA_TYPE_TEST(test_float, "float", v.is_float())
QRUN_JINJA_TYPE_TEST(test_number, "number", v.is_number())
QRUN_JINJA_TYPE_TEST(test_string, "string", v.is_string())
QRUN_JINJA_TYPE_TEST(test_mapping, "mapping", v.is_dict())
QRUN_JINJA_TYPE_TEST(test_iterable, "iterable",
                     v.is_undefined() || v.is_string() || v.is_list_or_tuple() || v.is_dict() ||
                         v.is_iterator())
QRUN_JINJA_TYPE_TEST(test_sequence, "sequence",
                     v.is_undefined() || v.is_string() || v.is_list_or_tuple() || v.is_dict())
QRUN_JINJA_TYPE_TEST(test_callable, "callable", v.is_function() || v.is_undefined())
QRUN_JINJA_TYPE_TEST(test_escaped, "escaped", v.is_string() && v.is_safe())

#undef QRUN_JINJA_TYPE_TEST

// Python's x % n == 0 for numbers (floats included).
Result<bool> divisible(const Value& v, const Value& n) {
  if (!v.is_number() || !n.is_number())
    return raw_error(
        format("unsupported operand type(s) for %%: '%s' and '%s'", type_name(v), type_name(n)));
  QRUN_JINJA_ASSIGN(const Value r, binary_op(BinaryOp::kMod, v, n));
  return r.as_float() == 0.0;
}

Result<bool> test_odd(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(no_args("odd", args));
  QRUN_JINJA_ASSIGN(const bool even, divisible(v, Value::integer(2)));
  if (v.is_float() && std::fmod(v.as_float(), 1.0) != 0.0) return false;
  return !even;
}

Result<bool> test_even(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(no_args("even", args));
  return divisible(v, Value::integer(2));
}

Result<bool> test_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("divisibleby", args, {"num"}));
  return divisible(v, a[0]);
}

// Python's str.islower / str.isupper: some cased character, and none of the other case.
Result<bool> case_test(const Value& v, CallArgs& args, bool lower) {
  QRUN_TRY(no_args(lower ? "lower" : "upper", args));
  QRUN_JINJA_ASSIGN(const std::string s, to_str(v));
  bool cased = false;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    const bool is_lower = text::to_upper(c) != c;
    const bool is_upper = text::to_lower(c) != c;
    if ((lower && is_upper) || (!lower && is_lower)) return false;
    cased = cased || is_lower || is_upper;
    i += len;
  }
  return cased;
}

Result<bool> test_lower(Interpreter&, const Value& v, CallArgs& args) {
  return case_test(v, args, true);
}

Result<bool> test_upper(Interpreter&, const Value& v, CallArgs& args) {
  return case_test(v, args, false);
}

Result<bool> test_sameas(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("sameas", args, {"other"}));
  const Value& o = a[0];
  if (v.identity() || o.identity()) return v.identity() == o.identity();
  if (v.kind() != o.kind()) return false;
  return equals(v, o);
}

Result<bool> test_in(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("in", args, {"seq"}));
  return contains(a[0], v);
}

// eq, ne, lt, le, gt, ge (and their aliases): `op` indexes "== != < <= > >=".
template <int Op>
Result<bool> test_compare(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_JINJA_ASSIGN(ValueList a, bind_args("comparison", args, {"other"}));
  if (Op < 2) {
    QRUN_JINJA_ASSIGN(const bool eq, equals(v, a[0]));
    return eq == (Op == 0);
  }
  static constexpr const char* kSymbols[] = {"==", "!=", "<", "<=", ">", ">="};
  QRUN_JINJA_ASSIGN(const int c, compare(v, a[0], kSymbols[Op]));
  return Op == 2 ? c < 0 : Op == 3 ? c <= 0 : Op == 4 ? c > 0 : c >= 0;
}

Result<bool> test_filter(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(no_args("filter", args));
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

Result<bool> test_test(Interpreter&, const Value& v, CallArgs& args) {
  QRUN_TRY(no_args("test", args));
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", test_compare<1>},
    {"<", test_compare<2>},
    {"<=", test_compare<3>},
    {"==", test_compare<0>},
    {">", test_compare<4>},
    {">=", test_compare<5>},
    {"boolean", test_boolean},
    {"callable", test_callable},
    {"defined", test_defined},
    {"divisibleby", test_divisibleby},
    {"eq", test_compare<0>},
    {"equalto", test_compare<0>},
    {"escaped", test_escaped},
    {"even", test_even},
    {"false", test_false},
    {"filter", test_filter},
    {"float", test_float},
    {"ge", test_compare<5>},
    {"greaterthan", test_compare<4>},
    {"gt", test_compare<4>},
    {"in", test_in},
    {"integer", test_integer},
    {"iterable", test_iterable},
    {"le", test_compare<3>},
    {"lessthan", test_compare<2>},
    {"lower", test_lower},
    {"lt", test_compare<2>},
    {"mapping", test_mapping},
    {"ne", test_compare<1>},
    {"none", test_none},
    {"number", test_number},
    {"odd", test_odd},
    {"sameas", test_sameas},
    {"sequence", test_sequence},
    {"string", test_string},
    {"test", test_test},
    {"true", test_true},
    {"undefined", test_undefined},
    {"upper", test_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestEntry& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace qrun::jinja
