// The tree-walking interpreter behind jinja::Template::render. Scopes are frames chained to
// their parent, as jinja2 scopes them: each for-loop iteration and each macro call gets a
// fresh frame (a `set` inside it does not leak out), `if` does not; macros see the frame they
// were defined in at call time. Built-ins reach back here to apply filters and tests and to
// call functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/jinja/jinja.h"

namespace qrun::jinja {

struct Frame {
  explicit Frame(std::shared_ptr<Frame> p = nullptr) : parent(std::move(p)) {}
  std::shared_ptr<Frame> parent;
  Dict vars;
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  Interpreter(const std::string& origin, const RenderLimits& limits)
      : origin_(origin), limits_(limits) {}
  // Clears the frames that macros captured, breaking frame -> macro -> frame cycles.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Result<std::string> render(const Body& body, const FramePtr& top);

  // Calls a function value (macro, global, bound method).
  Result<Value> call(const Value& callee, CallArgs& args);
  Result<Value> apply_filter(std::string_view name, const Value& input, CallArgs& args);
  Result<bool> apply_test(std::string_view name, const Value& input, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Error locate(const Error& e, int line) const;
  Result<void> write(std::string_view s);
  Result<std::string> capture(const Body& body, const FramePtr& frame);

  Result<Flow> exec_body(const Body& body, const FramePtr& frame);
  Result<Flow> exec(const Stmt& s, const FramePtr& frame);
  Result<Flow> exec_impl(const Stmt& s, const FramePtr& frame);
  Result<Flow> exec_for(const Stmt& s, const FramePtr& frame);
  Result<void> assign(const Target& t, const Value& v, const FramePtr& frame);

  Result<Value> eval(const Expr& e, const FramePtr& frame);
  Result<Value> eval_impl(const Expr& e, const FramePtr& frame);
  Result<Value> eval_collection(const Expr& e, const FramePtr& frame);
  Result<Value> eval_item(const Expr& e, const FramePtr& frame);
  Result<Value> eval_call(const Expr& e, const FramePtr& frame, const Value* caller);
  Result<CallArgs> eval_args(const Expr& e, const FramePtr& frame);
  Result<Value> eval_filter(const Expr& e, const FramePtr& frame, const Value* input);
  Result<Value> eval_compare(const Expr& e, const FramePtr& frame);

  Value make_macro(const Stmt& s, const FramePtr& closure, const std::string& name);
  Result<Value> invoke_macro(const Stmt& s, const FramePtr& closure, const std::string& name,
                             CallArgs& args);

  const std::string& origin_;
  RenderLimits limits_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
  std::vector<std::weak_ptr<Frame>> captured_frames_;
};

}  // namespace qrun::jinja
