// The Jinja parser: tokens to a syntax tree, following jinja2's grammar and operator
// precedence (filters and tests bind tighter than arithmetic, unary minus tighter than **,
// ** left-associative). Nesting is bounded so that no template can overflow the stack.
#pragma once

#include <string>
#include <vector>

#include "core/jinja/jinja_ast.h"
#include "core/jinja/jinja_lexer.h"

namespace qrun::jinja {

// Blocks, parentheses and operators nested deeper than this are a syntax error.
inline constexpr int kMaxParseDepth = 200;

// Errors are kFormat with "ORIGIN:LINE: message".
Result<Body> parse(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace qrun::jinja
