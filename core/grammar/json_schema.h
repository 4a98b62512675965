// A subset of JSON Schema converted to a GBNF grammar (as llama.cpp's
// json-schema-to-grammar): type (object, array, string, number, integer, boolean, null, or
// a list of them), properties, required, additionalProperties (false, true or a schema),
// enum, const, anyOf/oneOf/allOf, $ref to #/$defs/... or #/definitions/... (or any local
// JSON pointer; recursion allowed), items, prefixItems (or items as an array, with
// additionalItems, as the drafts before 2020-12), minItems/maxItems, uniqueItems false (true
// only where one item at most can be written), minLength/maxLength,
// minimum/maximum/exclusiveMinimum/exclusiveMaximum on integers and numbers (exact for any
// decimal bound; bounded numbers are written without an exponent), pattern (a regex
// subset, see json_schema_regex.cpp), format date, time, date-time and
// uuid. Annotations (title, description, $schema, $id, $comment, examples, default, ...)
// are ignored. Objects write the listed properties in the listed order (the required ones
// always), then further pairs only under additionalProperties. Anything else is refused,
// naming the keyword and its JSON path. What the grammar generates is valid under the
// schema; it may be a subset of the valid documents.
#pragma once

#include <string>
#include <string_view>

#include "ggml-like/result.h"

namespace qrun {

// The GBNF text for the schema in `schema_text` (JSON); it always parses with
// parse_grammar. kUsage errors: "not JSON: ...", "unsupported keyword 'not' at
// $.properties.name", "... at $.type: ...".
Result<std::string> json_schema_to_grammar(std::string_view schema_text);

}  // namespace qrun
