// The interpreter's built-ins: jinja2's filters and tests (jinja_filters.cpp,
// jinja_tests.cpp), methods of str, list and dict (jinja_methods.cpp), the globals Hugging Face
// templates call (range, namespace, dict, raise_exception, strftime_now, ...) and Python's
// two string formatting languages (jinja_format.cpp). All errors are raw (no line).
#pragma once

#include <ctime>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/jinja/jinja_value.h"

namespace qrun::jinja {

using FilterFn = Result<Value> (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = Result<bool> (*)(Interpreter& in, const Value& input, CallArgs& args);

// nullptr when there is no such filter or test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// Methods of str, list, tuple and dict (Python's names: split, startswith, get, items, ...).
bool has_method(const Value& self, std::string_view name);
Value bound_method(const Value& self, std::string_view name);
Result<Value> call_method(const Value& self, std::string_view name, CallArgs& args);

// The globals every render sees; `now` is what strftime_now formats.
void add_globals(Dict& globals, const std::tm& now);

// Binds Python-style arguments to `params` in order: positional first, then keywords by name.
// Parameters not given are Undefined (Value()). Too many or unknown arguments are errors
// naming `fn`.
Result<ValueList> bind_args(const char* fn, CallArgs& args,
                            std::initializer_list<const char*> params);

// `fmt % args` (printf-style) and `fmt.format(*args, **kwargs)`.
Result<std::string> percent_format(const std::string& fmt, const Value& args);
Result<std::string> str_format(const std::string& fmt, CallArgs& args);

// The value at a dotted attribute path ("a.b.0"), as jinja2's attrgetter resolves it.
Result<Value> get_path(const Value& obj, std::string_view path);

}  // namespace qrun::jinja
