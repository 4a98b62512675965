// The Jinja parser (jinja_parser_impl.h): expressions, following jinja2's precedence
// (filters and tests bind tighter than arithmetic, unary minus tighter than **).
#include "core/jinja/jinja_parser_impl.h"

namespace qrun::jinja::detail {

bool Parser::is_tuple_end(std::initializer_list<std::string_view> end_rules) const {
  const TokenType t = cur().type;
  if (t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || t == TokenType::kEnd ||
      is_op(")"))
    return true;
  for (std::string_view rule : end_rules) {
    if (is_name(rule)) return true;
  }
  return false;
}

Result<ExprPtr> Parser::parse_tuple(bool simplified, bool with_condexpr,
                                    std::initializer_list<std::string_view> end_rules,
                                    bool explicit_parentheses) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) QRUN_TRY(expect_op(","));
    if (is_tuple_end(end_rules)) break;
    QRUN_JINJA_ASSIGN(ExprPtr item, simplified ? parse_primary() : parse_expression(with_condexpr));
    items.push_back(std::move(item));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) return fail("expected an expression, got " + describe(cur()));
  }
  ExprPtr t = node(ExprKind::kTuple, line);
  t->children = std::move(items);
  return sealed(std::move(t));
}

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_);
  if (guard.exceeded()) return too_deep();
  if (!with_condexpr) return parse_or();
  QRUN_JINJA_ASSIGN(ExprPtr expr, parse_or());
  while (is_name("if")) {
    const int line = cur().line;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr test, parse_or());
    ExprPtr otherwise;
    if (skip_name("else")) {
      QRUN_JINJA_ASSIGN(otherwise, parse_expression(true));
    }
    ExprPtr c = node(ExprKind::kCondition, line);
    c->children.push_back(std::move(test));
    c->children.push_back(std::move(expr));
    c->children.push_back(std::move(otherwise));
    QRUN_JINJA_ASSIGN(expr, sealed(std::move(c)));
  }
  return expr;
}

Result<ExprPtr> Parser::binary(ExprKind kind, int line, ExprPtr a, ExprPtr b, BinaryOp op) {
  ExprPtr e = node(kind, line);
  e->op = op;
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return sealed(std::move(e));
}

Result<ExprPtr> Parser::parse_or() {
  QRUN_JINJA_ASSIGN(ExprPtr left, parse_and());
  while (is_name("or")) {
    const int line = cur().line;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr right, parse_and());
    QRUN_JINJA_ASSIGN(left, binary(ExprKind::kOr, line, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  QRUN_JINJA_ASSIGN(ExprPtr left, parse_not());
  while (is_name("and")) {
    const int line = cur().line;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr right, parse_not());
    QRUN_JINJA_ASSIGN(left, binary(ExprKind::kAnd, line, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(depth_);
    if (guard.exceeded()) return too_deep();
    const int line = cur().line;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr operand, parse_not());
    ExprPtr e = node(ExprKind::kNot, line);
    e->children.push_back(std::move(operand));
    return sealed(std::move(e));
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  const int line = cur().line;
  QRUN_JINJA_ASSIGN(ExprPtr first, parse_math1());
  ExprPtr cmp;
  while (true) {
    CompareOp op;
    if (is_op("==")) {
      op = CompareOp::kEq;
    } else if (is_op("!=")) {
      op = CompareOp::kNe;
    } else if (is_op("<")) {
      op = CompareOp::kLt;
    } else if (is_op("<=")) {
      op = CompareOp::kLe;
    } else if (is_op(">")) {
      op = CompareOp::kGt;
    } else if (is_op(">=")) {
      op = CompareOp::kGe;
    } else if (is_name("in")) {
      op = CompareOp::kIn;
    } else if (is_name("not") && is_name("in", &peek())) {
      op = CompareOp::kNotIn;
      advance();
    } else {
      break;
    }
    advance();
    if (!cmp) {
      cmp = node(ExprKind::kCompare, line);
      cmp->children.push_back(std::move(first));
    }
    QRUN_JINJA_ASSIGN(ExprPtr operand, parse_math1());
    cmp->children.push_back(std::move(operand));
    cmp->compare_ops.push_back(op);
  }
  if (!cmp) return first;
  return sealed(std::move(cmp));
}

Result<ExprPtr> Parser::parse_binary_level(int level) {
  // Levels: 0 = + -, 1 = ~, 2 = * / // %, 3 = **; then unary.
  static constexpr std::pair<std::string_view, BinaryOp> kOps[] = {
      {"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub},  {"~", BinaryOp::kConcat},
      {"*", BinaryOp::kMul}, {"/", BinaryOp::kDiv},  {"//", BinaryOp::kFloorDiv},
      {"%", BinaryOp::kMod}, {"**", BinaryOp::kPow},
  };
  static constexpr int kLevelOf[] = {0, 0, 1, 2, 2, 2, 2, 3};
  if (level > 3) return parse_unary(true);
  QRUN_JINJA_ASSIGN(ExprPtr left, parse_binary_level(level + 1));
  while (true) {
    int found = -1;
    for (int i = 0; i < 8; ++i) {
      if (kLevelOf[i] == level && is_op(kOps[i].first)) found = i;
    }
    if (found < 0) return left;
    const int line = cur().line;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr right, parse_binary_level(level + 1));
    QRUN_JINJA_ASSIGN(left, binary(ExprKind::kBinary, line, std::move(left), std::move(right),
                                   kOps[found].second));
  }
}

Result<ExprPtr> Parser::parse_math1() {
  return parse_binary_level(0);
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  if (guard.exceeded()) return too_deep();
  const int line = cur().line;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const ExprKind kind = is_op("-") ? ExprKind::kNegate : ExprKind::kPlus;
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr operand, parse_unary(false));
    e = node(kind, line);
    e->children.push_back(std::move(operand));
    QRUN_JINJA_ASSIGN(e, sealed(std::move(e)));
  } else {
    QRUN_JINJA_ASSIGN(e, parse_primary());
  }
  QRUN_JINJA_ASSIGN(e, parse_postfix(std::move(e)));
  if (with_filter) {
    QRUN_JINJA_ASSIGN(e, parse_filter_expr(std::move(e)));
  }
  return e;
}

Result<ExprPtr> Parser::parse_primary() {
  DepthGuard guard(depth_);
  if (guard.exceeded()) return too_deep();
  const Token& t = cur();
  const int line = t.line;
  if (t.type == TokenType::kName) {
    ExprPtr e = node(ExprKind::kLiteral, line);
    if (t.value == "true" || t.value == "True") {
      e->value = Value::boolean(true);
    } else if (t.value == "false" || t.value == "False") {
      e->value = Value::boolean(false);
    } else if (t.value == "none" || t.value == "None") {
      e->value = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = t.value;
      note_name(t.value);
    }
    advance();
    return e;
  }
  if (t.type == TokenType::kString) {
    std::string s;
    while (cur().type == TokenType::kString) {
      s += cur().value;
      advance();
    }
    ExprPtr e = node(ExprKind::kLiteral, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
    ExprPtr e = node(ExprKind::kLiteral, line);
    e->value =
        t.type == TokenType::kInteger ? Value::integer(t.int_value) : Value::number(t.float_value);
    advance();
    return e;
  }
  if (is_op("(")) {
    advance();
    QRUN_JINJA_ASSIGN(ExprPtr e, parse_tuple(false, true, {}, true));
    QRUN_TRY(expect_op(")"));
    return e;
  }
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    advance();
    ExprPtr e = node(is_list ? ExprKind::kList : ExprKind::kDict, line);
    const std::string_view close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->children.empty()) QRUN_TRY(expect_op(","));
      if (is_op(close)) break;
      QRUN_JINJA_ASSIGN(ExprPtr item, parse_expression(true));
      e->children.push_back(std::move(item));
      if (!is_list) {
        QRUN_TRY(expect_op(":"));
        QRUN_JINJA_ASSIGN(ExprPtr value, parse_expression(true));
        e->children.push_back(std::move(value));
      }
    }
    advance();
    return sealed(std::move(e));
  }
  return fail("unexpected " + describe(t));
}

void Parser::note_name(const std::string& name) {
  for (Stmt* m : macros_) {
    if (name == "varargs") m->uses_varargs = true;
    if (name == "kwargs") m->uses_kwargs = true;
  }
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      QRUN_JINJA_ASSIGN(e, parse_subscript(std::move(e)));
    } else if (is_op("(")) {
      QRUN_JINJA_ASSIGN(e, parse_call(std::move(e)));
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      QRUN_JINJA_ASSIGN(e, parse_filter(std::move(e), false));
    } else if (is_name("is")) {
      QRUN_JINJA_ASSIGN(e, parse_test(std::move(e)));
    } else if (is_op("(")) {
      QRUN_JINJA_ASSIGN(e, parse_call(std::move(e)));
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr obj) {
  const int line = cur().line;
  if (skip_op(".")) {
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      ExprPtr e = node(ExprKind::kGetAttr, line);
      e->name = t.value;
      e->children.push_back(std::move(obj));
      advance();
      return sealed(std::move(e));
    }
    if (t.type != TokenType::kInteger) return fail("expected name or number");
    ExprPtr e = node(ExprKind::kGetItem, line);
    ExprPtr index = node(ExprKind::kLiteral, line);
    index->value = Value::integer(t.int_value);
    e->children.push_back(std::move(obj));
    e->children.push_back(std::move(index));
    advance();
    return sealed(std::move(e));
  }
  advance();  // [
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) QRUN_TRY(expect_op(","));
    QRUN_JINJA_ASSIGN(ExprPtr arg, parse_subscribed());
    args.push_back(std::move(arg));
  }
  advance();
  if (args.empty()) return fail("expected an index", line);
  ExprPtr e = node(ExprKind::kGetItem, line);
  e->children.push_back(std::move(obj));
  if (args.size() == 1) {
    e->children.push_back(std::move(args[0]));
  } else {
    ExprPtr t = node(ExprKind::kTuple, line);
    t->children = std::move(args);
    QRUN_JINJA_ASSIGN(t, sealed(std::move(t)));
    e->children.push_back(std::move(t));
  }
  return sealed(std::move(e));
}

Result<ExprPtr> Parser::parse_subscribed() {
  const int line = cur().line;
  std::vector<ExprPtr> parts;
  if (is_op(":")) {
    advance();
    parts.push_back(nullptr);
  } else {
    QRUN_JINJA_ASSIGN(ExprPtr e, parse_expression(true));
    if (!is_op(":")) return e;
    advance();
    parts.push_back(std::move(e));
  }
  const auto optional_part = [&]() -> Result<ExprPtr> {
    if (is_op(":") || is_op("]") || is_op(",")) return ExprPtr();
    return parse_expression(true);
  };
  QRUN_JINJA_ASSIGN(ExprPtr stop, optional_part());
  parts.push_back(std::move(stop));
  if (skip_op(":")) {
    QRUN_JINJA_ASSIGN(ExprPtr step, optional_part());
    parts.push_back(std::move(step));
  } else {
    parts.push_back(nullptr);
  }
  ExprPtr s = node(ExprKind::kSlice, line);
  s->children = std::move(parts);
  return sealed(std::move(s));
}

Result<void> Parser::parse_call_args(Expr& e) {
  QRUN_TRY(expect_op("("));
  bool need_comma = false;
  while (!is_op(")")) {
    if (need_comma) {
      QRUN_TRY(expect_op(","));
      if (is_op(")")) break;
    }
    const auto invalid = [&] { return fail("invalid syntax for function call expression"); };
    if (is_op("*")) {
      if (e.dyn_args || e.dyn_kwargs) return invalid();
      advance();
      QRUN_JINJA_ASSIGN(e.dyn_args, parse_expression(true));
    } else if (is_op("**")) {
      if (e.dyn_kwargs) return invalid();
      advance();
      QRUN_JINJA_ASSIGN(e.dyn_kwargs, parse_expression(true));
    } else if (cur().type == TokenType::kName && is_op("=", &peek())) {
      if (e.dyn_kwargs) return invalid();
      std::string key = cur().value;
      advance();
      advance();
      QRUN_JINJA_ASSIGN(ExprPtr value, parse_expression(true));
      e.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (e.dyn_args || e.dyn_kwargs || !e.kwargs.empty()) return invalid();
      QRUN_JINJA_ASSIGN(ExprPtr arg, parse_expression(true));
      e.children.push_back(std::move(arg));
    }
    need_comma = true;
  }
  advance();
  return {};
}

Result<ExprPtr> Parser::parse_call(ExprPtr callee) {
  ExprPtr e = node(ExprKind::kCall, cur().line);
  e->children.push_back(std::move(callee));
  QRUN_TRY(parse_call_args(*e));
  return sealed(std::move(e));
}

Result<std::string> Parser::parse_dotted_name() {
  QRUN_JINJA_ASSIGN(std::string name, expect_name());
  while (skip_op(".")) {
    QRUN_JINJA_ASSIGN(std::string part, expect_name());
    name += "." + part;
  }
  return name;
}

Result<ExprPtr> Parser::parse_filter(ExprPtr base, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    ExprPtr e = node(ExprKind::kFilter, cur().line);
    QRUN_JINJA_ASSIGN(e->name, parse_dotted_name());
    e->children.push_back(std::move(base));
    if (is_op("(")) QRUN_TRY(parse_call_args(*e));
    QRUN_JINJA_ASSIGN(base, sealed(std::move(e)));
  }
  return base;
}

Result<ExprPtr> Parser::parse_test(ExprPtr operand) {
  const int line = cur().line;
  advance();  // is
  const bool negated = skip_name("not");
  ExprPtr e = node(ExprKind::kTest, line);
  QRUN_JINJA_ASSIGN(e->name, parse_dotted_name());
  e->children.push_back(std::move(operand));
  const TokenType t = cur().type;
  if (is_op("(")) {
    QRUN_TRY(parse_call_args(*e));
  } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
              t == TokenType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) return fail("you cannot chain multiple tests with is");
    QRUN_JINJA_ASSIGN(ExprPtr arg, parse_primary());
    QRUN_JINJA_ASSIGN(arg, parse_postfix(std::move(arg)));
    e->children.push_back(std::move(arg));
  }
  QRUN_JINJA_ASSIGN(e, sealed(std::move(e)));
  if (!negated) return e;
  ExprPtr n = node(ExprKind::kNot, line);
  n->children.push_back(std::move(e));
  return sealed(std::move(n));
}

}  // namespace qrun::jinja::detail
