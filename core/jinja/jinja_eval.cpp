// The interpreter: statements write to the current output buffer (set blocks, macros and
// filter blocks swap in their own), expressions evaluate to Values. Every exec/eval passes
// through a depth and step check, and turns a raw error from below into
// "ORIGIN:LINE: message" at the innermost node it reaches.
#include "core/jinja/jinja_eval.h"

#include "core/jinja/jinja_builtins.h"
#include "core/jinja/jinja_ops.h"
#include "core/jinja/jinja_parser.h"

namespace qrun::jinja {
namespace {

const Value* lookup(const FramePtr& frame, std::string_view name) {
  for (const Frame* f = frame.get(); f; f = f->parent.get()) {
    if (const Value* v = f->vars.find(name)) return v;
  }
  return nullptr;
}

// Counts nesting for the duration of one exec/eval call.
class DepthScope {
 public:
  explicit DepthScope(int& depth) : depth_(depth) { ++depth_; }
  ~DepthScope() { --depth_; }

 private:
  int& depth_;
};

Value make_loop(const ValueList& items, size_t i, const std::shared_ptr<Value>& last_changed) {
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t index0 = static_cast<int64_t>(i);
  auto d = std::make_shared<Dict>();
  d->set("index", Value::integer(index0 + 1));
  d->set("index0", Value::integer(index0));
  d->set("revindex", Value::integer(n - index0));
  d->set("revindex0", Value::integer(n - index0 - 1));
  d->set("first", Value::boolean(index0 == 0));
  d->set("last", Value::boolean(index0 == n - 1));
  d->set("length", Value::integer(n));
  d->set("depth", Value::integer(1));
  d->set("depth0", Value::integer(0));
  d->set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  d->set("nextitem",
         i + 1 < items.size() ? items[i + 1] : Value::undefined("there is no next item"));
  d->set("cycle",
         Value::function("loop.cycle", [index0](Interpreter&, CallArgs& a) -> Result<Value> {
           if (a.args.empty()) return raw_error("no items for cycling given");
           return a.args[static_cast<size_t>(index0) % a.args.size()];
         }));
  d->set("changed", Value::function(
                        "loop.changed", [last_changed](Interpreter&, CallArgs& a) -> Result<Value> {
                          Value now = Value::list(a.args);
                          if (!last_changed->is_undefined()) {
                            QRUN_JINJA_ASSIGN(const bool same, equals(*last_changed, now));
                            if (same) return Value::boolean(false);
                          }
                          *last_changed = std::move(now);
                          return Value::boolean(true);
                        }));
  return Value::loop_object(std::move(d));
}

}  // namespace

Interpreter::~Interpreter() {
  for (const std::weak_ptr<Frame>& w : captured_frames_) {
    if (FramePtr f = w.lock()) f->vars.clear();
  }
}

Error Interpreter::locate(const Error& e, int line) const {
  if (e.code == ErrorCode::kFormat) return e;
  return make_error(ErrorCode::kFormat,
                    format("%s:%d: %s", origin_.c_str(), line, e.message.c_str()));
}

Result<void> Interpreter::write(std::string_view s) {
  if (out_->size() + s.size() > limits_.max_output)
    return raw_error(format("rendered text longer than %zu bytes", limits_.max_output));
  out_->append(s);
  return {};
}

Result<std::string> Interpreter::render(const Body& body, const FramePtr& top) {
  std::string out;
  out_ = &out;
  auto r = exec_body(body, top);
  out_ = nullptr;
  if (!r.ok()) return r.error();
  return out;
}

Result<std::string> Interpreter::capture(const Body& body, const FramePtr& frame) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  auto r = exec_body(body, frame);
  out_ = saved;
  if (!r.ok()) return r.error();
  return buffer;
}

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body, const FramePtr& frame) {
  for (const StmtPtr& s : body) {
    QRUN_JINJA_ASSIGN(const Flow flow, exec(*s, frame));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& s, const FramePtr& frame) {
  DepthScope scope(depth_);
  if (depth_ > limits_.max_depth)
    return locate(raw_error("maximum recursion depth exceeded"), s.line);
  if (++steps_ > limits_.max_steps)
    return locate(raw_error(format("more than %lld steps executed",
                                   static_cast<long long>(limits_.max_steps))),
                  s.line);
  auto r = exec_impl(s, frame);
  if (!r.ok()) return locate(r.error(), s.line);
  return r;
}

Result<Interpreter::Flow> Interpreter::exec_impl(const Stmt& s, const FramePtr& frame) {
  switch (s.kind) {
    case StmtKind::kText:
      QRUN_TRY(write(s.text));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      QRUN_JINJA_ASSIGN(const Value v, eval(*s.expr, frame));
      if (v.is_string()) {
        QRUN_TRY(write(v.as_string()));
      } else {
        QRUN_JINJA_ASSIGN(const std::string text, to_str(v));
        QRUN_TRY(write(text));
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        QRUN_JINJA_ASSIGN(const Value c, eval(*cond, frame));
        if (c.truthy()) return exec_body(body, frame);
      }
      return exec_body(s.else_body, frame);
    case StmtKind::kFor:
      return exec_for(s, frame);
    case StmtKind::kSet: {
      QRUN_JINJA_ASSIGN(const Value v, eval(*s.expr, frame));
      QRUN_TRY(assign(s.target, v, frame));
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      QRUN_JINJA_ASSIGN(std::string text, capture(s.body, frame));
      Value v = Value::string(std::move(text));
      if (s.filter) {
        QRUN_JINJA_ASSIGN(v, eval_filter(*s.filter, frame, &v));
      }
      QRUN_TRY(assign(s.target, v, frame));
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      frame->vars.set(s.name, make_macro(s, frame, s.name));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Value caller = make_macro(s, frame, "caller");
      QRUN_JINJA_ASSIGN(const Value v, eval_call(*s.expr, frame, &caller));
      QRUN_JINJA_ASSIGN(const std::string text, to_str(v));
      QRUN_TRY(write(text));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      QRUN_JINJA_ASSIGN(std::string text, capture(s.body, frame));
      const Value input = Value::string(std::move(text));
      QRUN_JINJA_ASSIGN(const Value v, eval_filter(*s.filter, frame, &input));
      QRUN_JINJA_ASSIGN(const std::string out, to_str(v));
      QRUN_TRY(write(out));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Frame>(frame);
      for (const auto& [target, expr] : s.assignments) {
        QRUN_JINJA_ASSIGN(const Value v, eval(*expr, frame));
        QRUN_TRY(assign(target, v, inner));
      }
      return exec_body(s.body, inner);
    }
    case StmtKind::kBlock:
      return exec_body(s.body, frame);
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_for(const Stmt& s, const FramePtr& frame) {
  QRUN_JINJA_ASSIGN(const Value seq, eval(*s.expr, frame));
  // The loop walks a snapshot: appending to the list inside the loop cannot make it endless.
  QRUN_JINJA_ASSIGN(ValueList items, iterate(seq));
  if (s.filter) {
    ValueList kept;
    for (Value& item : items) {
      if (++steps_ > limits_.max_steps) return raw_error("too many loop iterations");
      auto f = std::make_shared<Frame>(frame);
      QRUN_TRY(assign(s.target, item, f));
      QRUN_JINJA_ASSIGN(const Value keep, eval(*s.filter, f));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, std::make_shared<Frame>(frame));
  auto last_changed = std::make_shared<Value>();
  for (size_t i = 0; i < items.size(); ++i) {
    if (++steps_ > limits_.max_steps) return raw_error("too many loop iterations");
    auto f = std::make_shared<Frame>(frame);
    QRUN_TRY(assign(s.target, items[i], f));
    f->vars.set("loop", make_loop(items, i, last_changed));
    QRUN_JINJA_ASSIGN(const Flow flow, exec_body(s.body, f));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Result<void> Interpreter::assign(const Target& t, const Value& v, const FramePtr& frame) {
  switch (t.kind) {
    case Target::Kind::kName:
      frame->vars.set(t.name, v);
      return {};
    case Target::Kind::kTuple: {
      QRUN_JINJA_ASSIGN(const ValueList items, iterate(v));
      if (items.size() != t.items.size()) {
        if (items.size() > t.items.size())
          return raw_error(format("too many values to unpack (expected %zu)", t.items.size()));
        return raw_error(format("not enough values to unpack (expected %zu, got %zu)",
                                t.items.size(), items.size()));
      }
      for (size_t i = 0; i < items.size(); ++i) QRUN_TRY(assign(t.items[i], items[i], frame));
      return {};
    }
    case Target::Kind::kAttribute: {
      const Value* ns = lookup(frame, t.name);
      if (!ns || ns->kind() != Kind::kNamespace)
        return raw_error("cannot assign attribute on non-namespace object");
      ns->dict_ref().set(t.attribute, v);
      return {};
    }
  }
  return {};
}

Value Interpreter::make_macro(const Stmt& s, const FramePtr& closure, const std::string& name) {
  captured_frames_.push_back(closure);
  const Stmt* stmt = &s;
  return Value::function(name, [stmt, closure, name](Interpreter& in, CallArgs& args) {
    return in.invoke_macro(*stmt, closure, name, args);
  });
}

Result<Value> Interpreter::invoke_macro(const Stmt& s, const FramePtr& closure,
                                        const std::string& name, CallArgs& args) {
  DepthScope scope(depth_);
  if (depth_ > limits_.max_depth) return raw_error("maximum recursion depth exceeded");
  auto f = std::make_shared<Frame>(closure);
  const size_t n = s.params.size();
  if (args.args.size() > n && !s.uses_varargs) {
    return raw_error(format("macro '%s' takes not more than %zu argument(s)", name.c_str(), n));
  }
  std::vector<bool> given(n, false);
  for (size_t i = 0; i < n && i < args.args.size(); ++i) {
    f->vars.set(s.params[i].name, args.args[i]);
    given[i] = true;
  }
  ValueList varargs;
  for (size_t i = n; i < args.args.size(); ++i) varargs.push_back(args.args[i]);
  auto extra = std::make_shared<Dict>();
  for (auto& [key, value] : args.kwargs) {
    size_t p = 0;
    while (p < n && s.params[p].name != key) ++p;
    if (p < n) {
      if (given[p])
        return raw_error(
            format("macro '%s' got multiple values for argument '%s'", name.c_str(), key.c_str()));
      f->vars.set(key, value);
      given[p] = true;
    } else if (key == "caller" && s.kind == StmtKind::kMacro) {
      f->vars.set("caller", value);
    } else if (s.uses_kwargs) {
      extra->set(key, value);
    } else {
      return raw_error(
          format("macro '%s' takes no keyword argument '%s'", name.c_str(), key.c_str()));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (given[i]) continue;
    const MacroParam& p = s.params[i];
    if (p.default_value) {
      QRUN_JINJA_ASSIGN(Value v, eval(*p.default_value, f));
      f->vars.set(p.name, std::move(v));
    } else {
      f->vars.set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
    }
  }
  f->vars.set("varargs", Value::tuple(std::move(varargs)));
  f->vars.set("kwargs", Value::dict(std::move(extra)));
  QRUN_JINJA_ASSIGN(std::string text, capture(s.body, f));
  return Value::string(std::move(text));
}

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) return callee.function_ref().call(*this, args);
  if (callee.is_undefined()) return raw_error(callee.undefined_hint());
  return raw_error(format("'%s' object is not callable", type_name(callee)));
}

Result<Value> Interpreter::apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) return raw_error("no filter named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

Result<bool> Interpreter::apply_test(std::string_view name, const Value& input, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) return raw_error("no test named '" + std::string(name) + "'");
  return fn(*this, input, args);
}

Result<Value> Interpreter::eval(const Expr& e, const FramePtr& frame) {
  DepthScope scope(depth_);
  if (depth_ > limits_.max_depth)
    return locate(raw_error("maximum recursion depth exceeded"), e.line);
  auto r = eval_impl(e, frame);
  if (!r.ok()) return locate(r.error(), e.line);
  return r;
}

Result<Value> Interpreter::eval_impl(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName: {
      const Value* v = lookup(frame, e.name);
      if (v) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return eval_collection(e, frame);
    case ExprKind::kGetAttr:
    case ExprKind::kGetItem:
      return eval_item(e, frame);
    case ExprKind::kSlice:
      return raw_error("a slice is only valid inside []");
    case ExprKind::kCall:
      return eval_call(e, frame, nullptr);
    case ExprKind::kFilter:
      return eval_filter(e, frame, nullptr);
    case ExprKind::kTest: {
      QRUN_JINJA_ASSIGN(const Value operand, eval(*e.children[0], frame));
      QRUN_JINJA_ASSIGN(CallArgs args, eval_args(e, frame));
      QRUN_JINJA_ASSIGN(const bool r, apply_test(e.name, operand, args));
      return Value::boolean(r);
    }
    case ExprKind::kNot: {
      QRUN_JINJA_ASSIGN(const Value v, eval(*e.children[0], frame));
      return Value::boolean(!v.truthy());
    }
    case ExprKind::kNegate:
    case ExprKind::kPlus: {
      QRUN_JINJA_ASSIGN(const Value v, eval(*e.children[0], frame));
      return negate(v, e.kind == ExprKind::kNegate);
    }
    case ExprKind::kBinary: {
      QRUN_JINJA_ASSIGN(const Value a, eval(*e.children[0], frame));
      QRUN_JINJA_ASSIGN(const Value b, eval(*e.children[1], frame));
      return binary_op(e.op, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      QRUN_JINJA_ASSIGN(Value a, eval(*e.children[0], frame));
      if (a.truthy() == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.children[1], frame);
    }
    case ExprKind::kCompare:
      return eval_compare(e, frame);
    case ExprKind::kCondition: {
      QRUN_JINJA_ASSIGN(const Value test, eval(*e.children[0], frame));
      if (test.truthy()) return eval(*e.children[1], frame);
      if (e.children[2]) return eval(*e.children[2], frame);
      return Value::undefined(
          format("the inline if-expression on line %d evaluated to false and "
                 "no else section was defined.",
                 e.line));
    }
  }
  return raw_error("unknown expression");
}

Result<Value> Interpreter::eval_collection(const Expr& e, const FramePtr& frame) {
  if (e.kind == ExprKind::kDict) {
    auto d = std::make_shared<Dict>();
    for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
      QRUN_JINJA_ASSIGN(Value key, eval(*e.children[i], frame));
      QRUN_JINJA_ASSIGN(Value value, eval(*e.children[i + 1], frame));
      QRUN_TRY(d->set(std::move(key), std::move(value)));
    }
    return Value::dict(std::move(d));
  }
  ValueList items;
  items.reserve(e.children.size());
  for (const ExprPtr& c : e.children) {
    QRUN_JINJA_ASSIGN(Value v, eval(*c, frame));
    items.push_back(std::move(v));
  }
  return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

Result<Value> Interpreter::eval_item(const Expr& e, const FramePtr& frame) {
  QRUN_JINJA_ASSIGN(const Value obj, eval(*e.children[0], frame));
  if (e.kind == ExprKind::kGetAttr) return get_attr(obj, e.name);
  const Expr& index = *e.children[1];
  if (index.kind != ExprKind::kSlice) {
    QRUN_JINJA_ASSIGN(const Value key, eval(index, frame));
    return get_item(obj, key);
  }
  Value bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (index.children[i]) {
      QRUN_JINJA_ASSIGN(bounds[i], eval(*index.children[i], frame));
    }
  }
  return slice(obj, bounds[0], bounds[1], bounds[2]);
}

Result<CallArgs> Interpreter::eval_args(const Expr& e, const FramePtr& frame) {
  CallArgs a;
  for (size_t i = 1; i < e.children.size(); ++i) {
    QRUN_JINJA_ASSIGN(Value v, eval(*e.children[i], frame));
    a.args.push_back(std::move(v));
  }
  if (e.dyn_args) {
    QRUN_JINJA_ASSIGN(const Value v, eval(*e.dyn_args, frame));
    QRUN_JINJA_ASSIGN(ValueList extra, iterate(v));
    for (Value& x : extra) a.args.push_back(std::move(x));
  }
  for (const auto& [name, expr] : e.kwargs) {
    QRUN_JINJA_ASSIGN(Value v, eval(*expr, frame));
    a.kwargs.emplace_back(name, std::move(v));
  }
  if (e.dyn_kwargs) {
    QRUN_JINJA_ASSIGN(const Value v, eval(*e.dyn_kwargs, frame));
    if (!v.is_dict()) return raw_error("argument after ** must be a mapping");
    for (const Dict::Entry& entry : v.dict_ref().entries()) {
      if (!entry.first.is_string()) return raw_error("keywords must be strings");
      a.kwargs.emplace_back(entry.first.as_string(), entry.second);
    }
  }
  return a;
}

Result<Value> Interpreter::eval_call(const Expr& e, const FramePtr& frame, const Value* caller) {
  const Expr& callee = *e.children[0];
  Value fn;
  if (callee.kind == ExprKind::kGetAttr) {
    QRUN_JINJA_ASSIGN(const Value obj, eval(*callee.children[0], frame));
    if (!obj.is_object() && has_method(obj, callee.name)) {
      QRUN_JINJA_ASSIGN(CallArgs args, eval_args(e, frame));
      return call_method(obj, callee.name, args);
    }
    QRUN_JINJA_ASSIGN(fn, get_attr(obj, callee.name));
  } else {
    QRUN_JINJA_ASSIGN(fn, eval(callee, frame));
  }
  QRUN_JINJA_ASSIGN(CallArgs args, eval_args(e, frame));
  if (caller) args.kwargs.emplace_back("caller", *caller);
  return call(fn, args);
}

Result<Value> Interpreter::eval_filter(const Expr& e, const FramePtr& frame, const Value* input) {
  Value base;
  const Expr* inner = e.children[0].get();
  if (!inner) {
    base = *input;
  } else if (inner->kind == ExprKind::kFilter) {
    QRUN_JINJA_ASSIGN(base, eval_filter(*inner, frame, input));
  } else {
    QRUN_JINJA_ASSIGN(base, eval(*inner, frame));
  }
  QRUN_JINJA_ASSIGN(CallArgs args, eval_args(e, frame));
  auto r = apply_filter(e.name, base, args);
  if (!r.ok()) return locate(r.error(), e.line);
  return r;
}

Result<Value> Interpreter::eval_compare(const Expr& e, const FramePtr& frame) {
  QRUN_JINJA_ASSIGN(Value left, eval(*e.children[0], frame));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    QRUN_JINJA_ASSIGN(Value right, eval(*e.children[i + 1], frame));
    bool ok = false;
    switch (e.compare_ops[i]) {
      case CompareOp::kEq:
      case CompareOp::kNe: {
        QRUN_JINJA_ASSIGN(const bool eq, equals(left, right));
        ok = eq == (e.compare_ops[i] == CompareOp::kEq);
        break;
      }
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        QRUN_JINJA_ASSIGN(const bool in, contains(right, left));
        ok = in == (e.compare_ops[i] == CompareOp::kIn);
        break;
      }
      default: {
        static constexpr const char* kSymbols[] = {"==", "!=", "<", "<=", ">", ">="};
        const int op = static_cast<int>(e.compare_ops[i]);
        QRUN_JINJA_ASSIGN(const int c, compare(left, right, kSymbols[op]));
        ok = op == 2 ? c < 0 : op == 3 ? c <= 0 : op == 4 ? c > 0 : c >= 0;
      }
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Result<Template> Template::parse(std::string_view source, std::string origin,
                                 const LexOptions& lex) {
  QRUN_JINJA_ASSIGN(const std::vector<Token> tokens, tokenize(source, origin, lex));
  QRUN_JINJA_ASSIGN(Body body, jinja::parse(tokens, origin));
  return Template(std::move(origin), std::make_shared<const Body>(std::move(body)));
}

Result<std::string> Template::render(const Variables& variables,
                                     const RenderOptions& options) const {
  auto globals = std::make_shared<Frame>();
  add_globals(globals->vars, options.now);
  auto top = std::make_shared<Frame>(globals);
  for (const auto& [name, value] : variables) top->vars.set(name, value);
  Interpreter in(origin_, options.limits);
  return in.render(*body_, top);
}

}  // namespace qrun::jinja
