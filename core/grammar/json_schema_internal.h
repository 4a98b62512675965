// Pieces of the JSON Schema converter (json_schema.cpp), each in its own file: the shared
// primitive rules and the string formats, integer ranges as digit rules, the regex subset
// of `pattern`, and the merge of allOf branches. Internal to core/grammar.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-like/result.h"

namespace qrun::schema {

using json = nlohmann::ordered_json;

// The body of a shared primitive rule ("space", "integer", "string", "date", ...), or null
// when `name` is not one; `deps` gets the primitives it refers to.
const std::string* primitive_body(const std::string& name);
const std::vector<std::string>& primitive_deps(const std::string& name);

// The primitive rule of a string `format` ("date-string" for "date"), or null when the
// format is not supported.
const char* format_rule(std::string_view format);

// A GBNF expression (no trailing space) for the decimal integers in [lo, hi], either side
// open when absent; JSON's form: no leading zeros, no "-0". Requires lo <= hi when both are
// given and |bounds| <= kMaxIntegerBound.
inline constexpr int64_t kMaxIntegerBound = 1'000'000'000'000'000'000;
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// A bound of a number range, exactly as the schema writes it: |value| = int_part.frac.
struct NumberBound {
  bool negative = false;  // never for zero
  std::string int_part;   // digits without leading zeros ("0" below 1)
  std::string frac;       // digits after the point without trailing zeros
  bool inclusive = true;  // minimum/maximum, not exclusiveMinimum/exclusiveMaximum
};
inline constexpr size_t kMaxBoundDecimals = 15;
// The bound a JSON number's text gives ("12.5", "-3", "1e-05"; a float's shortest round
// trip, as nlohmann's dump writes it). Errors (kUsage) for more than kMaxBoundDecimals
// digits after the point or a magnitude above kMaxIntegerBound.
Result<NumberBound> parse_bound(std::string_view text, bool inclusive);
// -1, 0, 1 as a's value is below, equal to or above b's (inclusive is not compared).
int compare_bounds(const NumberBound& a, const NumberBound& b);
// A GBNF expression (no trailing space) for the JSON numbers x with lo <= x (lo < x when
// exclusive) and x <= hi (x < hi), either side open when absent, written without an
// exponent and without "-0"; requires some number to lie between them.
std::string number_range(const std::optional<NumberBound>& lo,
                         const std::optional<NumberBound>& hi);

// A regex of the documented subset, matched against the whole string as if anchored at
// both ends, as a GBNF expression for the JSON-encoded characters between the quotes.
// The error names the column (1-based, in code points) and the construct.
Result<std::string> regex_to_gbnf(std::string_view pattern);

// The schema that allOf [a, b] amounts to, where it can be written as one schema: object
// schemas merge their properties (a property in both becomes allOf of the two), required
// lists unite, bounds tighten, types intersect; errors name what cannot be merged.
Result<json> merge_schemas(const json& a, const json& b);

}  // namespace qrun::schema
