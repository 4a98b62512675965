// Python's operators on interpreter values: arithmetic (int64 with overflow errors, true
// division, floor division and modulo with Python's signs), Markup-aware +, membership,
// attribute and item access with jinja2's fallbacks and Undefined results, slicing, and
// iteration. Errors are raw (the interpreter adds origin and line).
#pragma once

#include <string>
#include <string_view>

#include "core/jinja/jinja_ast.h"
#include "core/jinja/jinja_value.h"

namespace qrun::jinja {

// Strings (and joined or repeated results) longer than this are an error, not an allocation.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
// Lists built by range(), * and similar are limited to this many items.
inline constexpr int64_t kMaxListItems = int64_t{1} << 22;

Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b);
Result<Value> negate(const Value& v, bool minus);
// `item in container`.
Result<bool> contains(const Value& container, const Value& item);

// obj.name: a dict key, a namespace attribute, a bound method of a str/list/dict, or an
// Undefined naming what was missing. Attribute access on Undefined is an error.
Result<Value> get_attr(const Value& obj, std::string_view name);
// obj[key], falling back to get_attr for string keys as jinja2 does.
Result<Value> get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on str, list and tuple (None/absent bounds as in Python).
Result<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The items a for loop (or list()) visits: list and tuple items, dict keys, the characters
// of a str, nothing for Undefined.
Result<ValueList> iterate(const Value& v);

// HTML escaping as markupsafe.escape (& < > " ' to entities).
std::string html_escape(std::string_view s);
// Markup semantics of a str operand meeting a Markup one: escaped unless already safe.
std::string as_markup(const Value& s);

Result<void> check_string_size(size_t bytes);

}  // namespace qrun::jinja
