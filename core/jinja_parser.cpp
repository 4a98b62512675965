// The Jinja parser: recursive descent over the token list, one function per grammar rule
// of jinja2's parser (parse_tuple, parse_condexpr, parse_or, ... parse_primary). Every
// recursive rule goes through DepthGuard, which fails past kMaxParseDepth.
#include "core/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace qrun::jinja {
namespace {

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

  // ---- statements ----

  // Statements up to a block whose tag is one of `end_tags` (left at that tag's name), or up
  // to the end of the template when `end_tags` is empty.
  Result<Body> parse_statements(std::initializer_list<std::string_view> end_tags) {
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

  // Parses `{% tag` ... up to the end of the statement's last block.
  Result<StmtPtr> parse_statement() {
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

  // Consumes the end tag's name (already matched) and its "%}".
  Result<StmtPtr> finish_end_tag(StmtPtr s) {
    advance();
    QRUN_TRY(expect_block_end());
    return s;
  }

  Result<StmtPtr> parse_if(StmtPtr s) {
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

  Result<StmtPtr> parse_for(StmtPtr s) {
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

  Result<StmtPtr> parse_set(StmtPtr s) {
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

  Result<void> parse_signature(Stmt& s) {
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

  // Parses a macro-like body (macro or call block): loops outside do not reach into it.
  Result<Body> parse_scoped_body(Stmt* s, std::string_view end_tag) {
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(s);
    auto body = parse_statements({end_tag});
    macros_.pop_back();
    loop_depth_ = saved_loops;
    return body;
  }

  Result<StmtPtr> parse_macro(StmtPtr s) {
    s->kind = StmtKind::kMacro;
    QRUN_JINJA_ASSIGN(s->name, expect_name());
    QRUN_TRY(parse_signature(*s));
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(s->body, parse_scoped_body(s.get(), "endmacro"));
    return finish_end_tag(std::move(s));
  }

  Result<StmtPtr> parse_call_block(StmtPtr s) {
    s->kind = StmtKind::kCallBlock;
    if (is_op("(")) QRUN_TRY(parse_signature(*s));
    QRUN_JINJA_ASSIGN(s->expr, parse_expression(true));
    if (s->expr->kind != ExprKind::kCall) return fail("expected a call expression", s->line);
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(s->body, parse_scoped_body(s.get(), "endcall"));
    return finish_end_tag(std::move(s));
  }

  Result<StmtPtr> parse_filter_block(StmtPtr s) {
    s->kind = StmtKind::kFilterBlock;
    QRUN_JINJA_ASSIGN(s->filter, parse_filter(nullptr, true));
    QRUN_TRY(expect_block_end());
    QRUN_JINJA_ASSIGN(s->body, parse_statements({"endfilter"}));
    return finish_end_tag(std::move(s));
  }

  Result<StmtPtr> parse_with(StmtPtr s) {
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

  // A name or a (possibly parenthesized) tuple of names, for `for` and `set`.
  Result<Target> parse_assign_target(bool with_tuple,
                                     std::initializer_list<std::string_view> end_rules) {
    QRUN_JINJA_ASSIGN(ExprPtr e,
                      with_tuple ? parse_tuple(true, false, end_rules, false) : parse_primary());
    return to_target(*e);
  }

  Result<Target> to_target(const Expr& e) {
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

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<std::string_view> end_rules) const {
    const TokenType t = cur().type;
    if (t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || t == TokenType::kEnd ||
        is_op(")"))
      return true;
    for (std::string_view rule : end_rules) {
      if (is_name(rule)) return true;
    }
    return false;
  }

  // jinja2's parse_tuple: comma-separated expressions; a single one without a trailing
  // comma is returned as is. `simplified` parses primaries only (assignment targets).
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr,
                              std::initializer_list<std::string_view> end_rules,
                              bool explicit_parentheses) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) QRUN_TRY(expect_op(","));
      if (is_tuple_end(end_rules)) break;
      QRUN_JINJA_ASSIGN(ExprPtr item,
                        simplified ? parse_primary() : parse_expression(with_condexpr));
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

  Result<ExprPtr> parse_expression(bool with_condexpr) {
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

  Result<ExprPtr> binary(ExprKind kind, int line, ExprPtr a, ExprPtr b, BinaryOp op = {}) {
    ExprPtr e = node(kind, line);
    e->op = op;
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return sealed(std::move(e));
  }

  Result<ExprPtr> parse_or() {
    QRUN_JINJA_ASSIGN(ExprPtr left, parse_and());
    while (is_name("or")) {
      const int line = cur().line;
      advance();
      QRUN_JINJA_ASSIGN(ExprPtr right, parse_and());
      QRUN_JINJA_ASSIGN(left, binary(ExprKind::kOr, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    QRUN_JINJA_ASSIGN(ExprPtr left, parse_not());
    while (is_name("and")) {
      const int line = cur().line;
      advance();
      QRUN_JINJA_ASSIGN(ExprPtr right, parse_not());
      QRUN_JINJA_ASSIGN(left, binary(ExprKind::kAnd, line, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
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

  Result<ExprPtr> parse_compare() {
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

  Result<ExprPtr> parse_binary_level(int level) {
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

  Result<ExprPtr> parse_math1() { return parse_binary_level(0); }

  Result<ExprPtr> parse_unary(bool with_filter) {
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

  Result<ExprPtr> parse_primary() {
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
      e->value = t.type == TokenType::kInteger ? Value::integer(t.int_value)
                                               : Value::number(t.float_value);
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

  // Marks the macros being parsed as taking varargs/kwargs when their bodies mention them.
  void note_name(const std::string& name) {
    for (Stmt* m : macros_) {
      if (name == "varargs") m->uses_varargs = true;
      if (name == "kwargs") m->uses_kwargs = true;
    }
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
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

  Result<ExprPtr> parse_filter_expr(ExprPtr e) {
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

  Result<ExprPtr> parse_subscript(ExprPtr obj) {
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

  Result<ExprPtr> parse_subscribed() {
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

  // Parses "(args)" into e's children (after any already there) and kwargs.
  Result<void> parse_call_args(Expr& e) {
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

  Result<ExprPtr> parse_call(ExprPtr callee) {
    ExprPtr e = node(ExprKind::kCall, cur().line);
    e->children.push_back(std::move(callee));
    QRUN_TRY(parse_call_args(*e));
    return sealed(std::move(e));
  }

  Result<std::string> parse_dotted_name() {
    QRUN_JINJA_ASSIGN(std::string name, expect_name());
    while (skip_op(".")) {
      QRUN_JINJA_ASSIGN(std::string part, expect_name());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> parse_filter(ExprPtr base, bool start_inline) {
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

  Result<ExprPtr> parse_test(ExprPtr operand) {
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

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_template();
}

}  // namespace qrun::jinja
