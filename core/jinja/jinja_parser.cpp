// The Jinja parser (jinja_parser_impl.h): the template and its statements, and parse().
#include "core/jinja/jinja_parser_impl.h"

namespace qrun::jinja {
namespace detail {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText:
      return "template data";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
    case TokenType::kFloat:
      return "'" + t.value + "'";
    case TokenType::kEnd:
      return "end of template";
    default:
      return "'" + t.value + "'";
  }
}

Result<Body> Parser::parse_statements(std::initializer_list<std::string_view> end_tags) {
  DepthGuard guard(depth_);
  if (guard.exceeded()) return too_deep();
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::kEnd) {
      if (end_tags.size() == 0) return body;
      std::string expected;
      for (std::string_view tag : end_tags)
        expected += (expected.empty() ? "'" : " or '") + std::string(tag) + "'";
      return fail("unexpected end of template, expected " + expected);
    }
    if (t.type == TokenType::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->line = t.line;
      s->text = t.value;
      body.push_back(std::move(s));
      advance();
    } else if (t.type == TokenType::kVariableBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = t.line;
      advance();
      QRUN_JINJA_ASSIGN(s->expr, parse_tuple(false, true, {}, false));
      if (cur().type != TokenType::kVariableEnd)
        return fail("expected end of print statement, got " + describe(cur()));
      advance();
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      advance();
      for (std::string_view tag : end_tags) {
        if (is_name(tag)) return body;
      }
      QRUN_JINJA_ASSIGN(StmtPtr s, parse_statement());
      if (s) body.push_back(std::move(s));
    } else {
      return fail("unexpected " + describe(t));
    }
  }
}

Result<StmtPtr> Parser::parse_statement() {
  if (cur().type != TokenType::kName) return fail("tag name expected");
  const std::string tag = cur().value;
  const int line = cur().line;
  advance();
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (tag == "if") return parse_if(std::move(s));
  if (tag == "for") return parse_for(std::move(s));
  if (tag == "set") return parse_set(std::move(s));
  if (tag == "macro") return parse_macro(std::move(s));
  if (tag == "call") return parse_call_block(std::move(s));
  if (tag == "filter") return parse_filter_block(std::move(s));
  if (tag == "with") return parse_with(std::move(s));
  if (tag == "generation") {
    s->kind = StmtKind::kBlock;
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(s->body, parse_statements({"endgeneration"}));
    return finish_end_tag(std::move(s));
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return fail("'" + tag + "' outside of a loop", line);
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    QRUN_TRY(expect_block_end());
    return s;
  }
  return fail("encountered unknown tag '" + tag + "'", line);
}

Result<StmtPtr> Parser::finish_end_tag(StmtPtr s) {
  advance();
  QRUN_TRY(expect_block_end());
  return s;
}

Result<StmtPtr> Parser::parse_if(StmtPtr s) {
  s->kind = StmtKind::kIf;
  while (true) {
    QRUN_JINJA_ASSIGN(ExprPtr cond, parse_tuple(false, false, {}, false));
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(Body body, parse_statements({"elif", "else", "endif"}));
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (is_name("elif")) {
      advance();
      continue;
    }
    if (is_name("else")) {
      advance();
      QRUN_TRY(expect_block_end());
      QRUN_JINJA_ASSIGN(s->else_body, parse_statements({"endif"}));
    }
    return finish_end_tag(std::move(s));
  }
}

Result<StmtPtr> Parser::parse_for(StmtPtr s) {
  s->kind = StmtKind::kFor;
  QRUN_JINJA_ASSIGN(s->target, parse_assign_target(true, {"in"}));
  if (!skip_name("in")) return fail("expected 'in' in for loop, got " + describe(cur()));
  QRUN_JINJA_ASSIGN(s->expr, parse_tuple(false, false, {"recursive"}, false));
  if (skip_name("if")) {
    QRUN_JINJA_ASSIGN(s->filter, parse_expression(true));
  }
  if (is_name("recursive")) return fail("recursive for loops are not supported");
  QRUN_TRY(expect_block_end());
  ++loop_depth_;
  auto body = parse_statements({"endfor", "else"});
  --loop_depth_;
  if (!body.ok()) return body.error();
  s->body = std::move(body).value();
  if (is_name("else")) {
    advance();
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(s->else_body, parse_statements({"endfor"}));
  }
  return finish_end_tag(std::move(s));
}

Result<StmtPtr> Parser::parse_set(StmtPtr s) {
  if (cur().type == TokenType::kName && is_op(".", &peek())) {
    s->target.kind = Target::Kind::kAttribute;
    s->target.name = cur().value;
    advance();
    advance();
    QRUN_JINJA_ASSIGN(s->target.attribute, expect_name());
  } else {
    QRUN_JINJA_ASSIGN(s->target, parse_assign_target(true, {}));
  }
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    QRUN_JINJA_ASSIGN(s->expr, parse_tuple(false, true, {}, false));
    QRUN_TRY(expect_block_end());
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (is_op("|")) {
    QRUN_JINJA_ASSIGN(s->filter, parse_filter(nullptr, false));
  }
  QRUN_TRY(expect_block_end());
  QRUN_JINJA_ASSIGN(s->body, parse_statements({"endset"}));
  return finish_end_tag(std::move(s));
}

Result<void> Parser::parse_signature(Stmt& s) {
  QRUN_TRY(expect_op("("));
  while (!is_op(")")) {
    if (!s.params.empty()) QRUN_TRY(expect_op(","));
    if (is_op(")")) break;
    MacroParam p;
    QRUN_JINJA_ASSIGN(p.name, expect_name());
    if (skip_op("=")) {
      QRUN_JINJA_ASSIGN(p.default_value, parse_expression(true));
    } else {
      for (const MacroParam& q : s.params) {
        if (q.default_value) return fail("non-default argument follows default argument");
      }
    }
    s.params.push_back(std::move(p));
  }
  advance();
  return {};
}

Result<Body> Parser::parse_scoped_body(Stmt* s, std::string_view end_tag) {
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  macros_.push_back(s);
  auto body = parse_statements({end_tag});
  macros_.pop_back();
  loop_depth_ = saved_loops;
  return body;
}

Result<StmtPtr> Parser::parse_macro(StmtPtr s) {
  s->kind = StmtKind::kMacro;
  QRUN_JINJA_ASSIGN(s->name, expect_name());
  QRUN_TRY(parse_signature(*s));
  QRUN_TRY(expect_block_end());
  QRUN_JINJA_ASSIGN(s->body, parse_scoped_body(s.get(), "endmacro"));
  return finish_end_tag(std::move(s));
}

Result<StmtPtr> Parser::parse_call_block(StmtPtr s) {
  s->kind = StmtKind::kCallBlock;
  if (is_op("(")) QRUN_TRY(parse_signature(*s));
  QRUN_JINJA_ASSIGN(s->expr, parse_expression(true));
  if (s->expr->kind != ExprKind::kCall) return fail("expected a call expression", s->line);
  QRUN_TRY(expect_block_end());
  QRUN_JINJA_ASSIGN(s->body, parse_scoped_body(s.get(), "endcall"));
  return finish_end_tag(std::move(s));
}

Result<StmtPtr> Parser::parse_filter_block(StmtPtr s) {
  s->kind = StmtKind::kFilterBlock;
  QRUN_JINJA_ASSIGN(s->filter, parse_filter(nullptr, true));
  QRUN_TRY(expect_block_end());
  QRUN_JINJA_ASSIGN(s->body, parse_statements({"endfilter"}));
  return finish_end_tag(std::move(s));
}

Result<StmtPtr> Parser::parse_with(StmtPtr s) {
  s->kind = StmtKind::kWith;
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->assignments.empty()) QRUN_TRY(expect_op(","));
    QRUN_JINJA_ASSIGN(Target target, parse_assign_target(true, {}));
    QRUN_TRY(expect_op("="));
    QRUN_JINJA_ASSIGN(ExprPtr value, parse_expression(true));
    s->assignments.emplace_back(std::move(target), std::move(value));
  }
  advance();
  QRUN_JINJA_ASSIGN(s->body, parse_statements({"endwith"}));
  return finish_end_tag(std::move(s));
}

Result<Target> Parser::parse_assign_target(bool with_tuple,
                                           std::initializer_list<std::string_view> end_rules) {
  QRUN_JINJA_ASSIGN(ExprPtr e,
                    with_tuple ? parse_tuple(true, false, end_rules, false) : parse_primary());
  return to_target(*e);
}

Result<Target> Parser::to_target(const Expr& e) {
  Target t;
  if (e.kind == ExprKind::kName) {
    if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" ||
        e.name == "False" || e.name == "None")
      return fail("cannot assign to '" + e.name + "'", e.line);
    t.name = e.name;
    return t;
  }
  if (e.kind == ExprKind::kTuple) {
    t.kind = Target::Kind::kTuple;
    for (const ExprPtr& item : e.children) {
      QRUN_JINJA_ASSIGN(Target sub, to_target(*item));
      t.items.push_back(std::move(sub));
    }
    return t;
  }
  return fail("cannot assign to this expression", e.line);
}

}  // namespace detail

Result<Body> parse(const std::vector<Token>& tokens, const std::string& origin) {
  return detail::Parser(tokens, origin).parse_template();
}

}  // namespace qrun::jinja
