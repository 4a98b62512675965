// The Jinja lexer: template text to tokens, reproducing Python jinja2's lexer with Hugging
// Face's settings. Newlines are normalized to \n and one trailing newline is dropped;
// "-" strips whitespace next to a tag, "+" keeps it; trim_blocks removes the newline after
// a block or comment tag; lstrip_blocks removes spaces and tabs before a block or comment tag
// that starts its line. Comments vanish and {% raw %} bodies become text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-like/result.h"

namespace qrun::jinja {

enum class TokenType : uint8_t {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // value holds the decoded string
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // value holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEnd,
};

struct Token {
  TokenType type = TokenType::kEnd;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors are kFormat with "ORIGIN:LINE: message". The token list always ends with kEnd.
Result<std::vector<Token>> tokenize(std::string_view source, const std::string& origin,
                                    const LexOptions& options);

}  // namespace qrun::jinja
