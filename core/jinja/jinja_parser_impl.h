// The Jinja parser's class, shared by its two files: jinja_parser.cpp (the template and its
// statements) and jinja_parser_expr.cpp (expressions). Recursive descent over the token
// list, one function per grammar rule of jinja2's parser (parse_tuple, parse_condexpr,
// parse_or, ... parse_primary). Every recursive rule goes through DepthGuard, which fails
// past kMaxParseDepth. Private to those two files; everyone else calls jinja::parse().
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/jinja/jinja_parser.h"

namespace qrun::jinja::detail {

// How a token is named in error messages ("end of statement block", "'foo'").
std::string describe(const Token& t);

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin)
      : tokens_(tokens), origin_(origin) {}

  Result<Body> parse_template() {
    QRUN_JINJA_ASSIGN(Body body, parse_statements({}));
    if (cur().type != TokenType::kEnd) return fail("unexpected " + describe(cur()));
    return body;
  }

 private:
  // Counts nesting on the way down; fails past kMaxParseDepth.
  class DepthGuard {
   public:
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    bool exceeded() const { return depth_ > kMaxParseDepth; }

   private:
    int& depth_;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }

  bool is_op(std::string_view op, const Token* t = nullptr) const {
    const Token& tok = t ? *t : cur();
    return tok.type == TokenType::kOperator && tok.value == op;
  }
  bool is_name(std::string_view name, const Token* t = nullptr) const {
    const Token& tok = t ? *t : cur();
    return tok.type == TokenType::kName && tok.value == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  Error fail(const std::string& message, int line = 0) const {
    return make_error(ErrorCode::kFormat, format("%s:%d: %s", origin_.c_str(),
                                                 line ? line : cur().line, message.c_str()));
  }
  Error too_deep() const { return fail("template nested too deeply"); }

  Result<void> expect_op(std::string_view op) {
    if (!skip_op(op)) {
      return fail("expected token '" + std::string(op) + "', got " + describe(cur()));
    }
    return {};
  }
  Result<std::string> expect_name() {
    if (cur().type != TokenType::kName) return fail("expected name, got " + describe(cur()));
    std::string name = cur().value;
    advance();
    return name;
  }
  Result<void> expect_block_end() {
    if (cur().type != TokenType::kBlockEnd)
      return fail("expected end of statement block, got " + describe(cur()));
    advance();
    return {};
  }

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Computes e's height from its children; trees taller than kMaxParseDepth are an error
  // (chains such as a|f|f|f... grow in loops, not by recursion).
  Result<ExprPtr> sealed(ExprPtr e) {
    int h = 0;
    for (const ExprPtr& c : e->children) {
      if (c) h = std::max(h, c->height);
    }
    for (const auto& kw : e->kwargs) h = std::max(h, kw.second->height);
    if (e->dyn_args) h = std::max(h, e->dyn_args->height);
    if (e->dyn_kwargs) h = std::max(h, e->dyn_kwargs->height);
    e->height = h + 1;
    if (e->height > kMaxParseDepth) return fail("expression nested too deeply", e->line);
    return e;
  }

  // ---- statements (jinja_parser.cpp) ----

  // Statements up to a block whose tag is one of `end_tags` (left at that tag's name), or up
  // to the end of the template when `end_tags` is empty.
  Result<Body> parse_statements(std::initializer_list<std::string_view> end_tags);
  // Parses `{% tag` ... up to the end of the statement's last block.
  Result<StmtPtr> parse_statement();
  // Consumes the end tag's name (already matched) and its "%}".
  Result<StmtPtr> finish_end_tag(StmtPtr s);
  Result<StmtPtr> parse_if(StmtPtr s);
  Result<StmtPtr> parse_for(StmtPtr s);
  Result<StmtPtr> parse_set(StmtPtr s);
  Result<void> parse_signature(Stmt& s);
  // Parses a macro-like body (macro or call block): loops outside do not reach into it.
  Result<Body> parse_scoped_body(Stmt* s, std::string_view end_tag);
  Result<StmtPtr> parse_macro(StmtPtr s);
  Result<StmtPtr> parse_call_block(StmtPtr s);
  Result<StmtPtr> parse_filter_block(StmtPtr s);
  Result<StmtPtr> parse_with(StmtPtr s);
  // A name or a (possibly parenthesized) tuple of names, for `for` and `set`.
  Result<Target> parse_assign_target(bool with_tuple,
                                     std::initializer_list<std::string_view> end_rules);
  Result<Target> to_target(const Expr& e);

  // ---- expressions (jinja_parser_expr.cpp) ----

  bool is_tuple_end(std::initializer_list<std::string_view> end_rules) const;
  // jinja2's parse_tuple: comma-separated expressions; a single one without a trailing
  // comma is returned as is. `simplified` parses primaries only (assignment targets).
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr,
                              std::initializer_list<std::string_view> end_rules,
                              bool explicit_parentheses);
  Result<ExprPtr> parse_expression(bool with_condexpr);
  Result<ExprPtr> binary(ExprKind kind, int line, ExprPtr a, ExprPtr b, BinaryOp op = {});
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_binary_level(int level);
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  // Marks the macros being parsed as taking varargs/kwargs when their bodies mention them.
  void note_name(const std::string& name);
  Result<ExprPtr> parse_postfix(ExprPtr e);
  Result<ExprPtr> parse_filter_expr(ExprPtr e);
  Result<ExprPtr> parse_subscript(ExprPtr obj);
  Result<ExprPtr> parse_subscribed();
  // Parses "(args)" into e's children (after any already there) and kwargs.
  Result<void> parse_call_args(Expr& e);
  Result<ExprPtr> parse_call(ExprPtr callee);
  Result<std::string> parse_dotted_name();
  Result<ExprPtr> parse_filter(ExprPtr base, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr operand);

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
};

}  // namespace qrun::jinja::detail
