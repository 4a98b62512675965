// A subset of JSON Schema converted to a GBNF grammar (as llama.cpp's
// json-schema-to-grammar, smaller): type (object, array, string, number, integer, boolean,
// null, or a list of them), properties, required, additionalProperties: false, enum,
// const, items; title, description, $schema and $id are ignored as annotations. Objects are
// closed (only the listed properties, in the listed order; the required ones always
// present). Anything else is refused, naming the keyword and its JSON path.
#pragma once

#include <string>
#include <string_view>

#include "ggml-like/result.h"

namespace qrun {

// The GBNF text for the schema in `schema_text` (JSON). kUsage errors: "not JSON: ...",
// "unsupported keyword 'minLength' at $.properties.name", "... at $.type: ...".
Result<std::string> json_schema_to_grammar(std::string_view schema_text);

}  // namespace qrun
