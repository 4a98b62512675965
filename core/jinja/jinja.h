// qrun's Jinja2 interpreter for chat templates: parse once, render many times. The language
// is the subset of jinja2 (with the loop-controls extension) that Hugging Face chat templates
// use, rendered as Python's jinja2 renders it with HF's settings (trim_blocks, lstrip_blocks,
// default Undefined, tojson as json.dumps with ensure_ascii=False). Rendering is bounded:
// recursion depth, statements executed, string and output sizes all have limits, so any
// template either renders or fails with an Error "ORIGIN:LINE: message" (kFormat).
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/jinja/jinja_ast.h"
#include "core/jinja/jinja_lexer.h"
#include "core/jinja/jinja_value.h"

namespace qrun::jinja {

struct RenderLimits {
  int64_t max_steps = 5'000'000;         // statements executed plus loop iterations
  size_t max_output = size_t{64} << 20;  // bytes of rendered text
  int max_depth = 600;                   // nested expressions, statements and macro calls
};

struct RenderOptions {
  std::tm now{};  // what strftime_now() formats
  RenderLimits limits;
};

using Variables = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  // `origin` names the template in errors ("model.gguf: tokenizer.chat_template").
  static Result<Template> parse(std::string_view source, std::string origin,
                                const LexOptions& lex = LexOptions{});

  // Renders with `variables` visible as top-level names (messages, bos_token, ...).
  Result<std::string> render(const Variables& variables, const RenderOptions& options) const;

  const Body& body() const { return *body_; }
  const std::string& origin() const { return origin_; }

 private:
  Template(std::string origin, std::shared_ptr<const Body> body)
      : origin_(std::move(origin)), body_(std::move(body)) {}
  std::string origin_;
  std::shared_ptr<const Body> body_;
};

}  // namespace qrun::jinja
