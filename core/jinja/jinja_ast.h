// The syntax tree of a parsed Jinja template. One node type for expressions and one for
// statements, each with a kind and the fields that kind uses (documented per kind below).
// The tree is immutable after parsing; macros defined while rendering point into it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/jinja/jinja_value.h"

namespace qrun::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kLiteral,    // value
  kName,       // name
  kList,       // items: children
  kTuple,      // items: children
  kDict,       // children: key0, value0, key1, value1, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]] (children[1] may be a kSlice)
  kSlice,      // children[0..2]: start, stop, step (each may be null)
  kCall,       // children[0](children[1..], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  kTest,       // children[0] is name(children[1..], kwargs)
  kNot,        // not children[0]
  kNegate,     // -children[0]
  kPlus,       // +children[0]
  kBinary,     // children[0] op children[1]
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCompare,    // children[0] compare_ops[0] children[1] compare_ops[1] children[2] ...
  kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int height = 1;  // of the subtree; bounded by the parser so walking it cannot overflow
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;
  ExprPtr dyn_kwargs;
  BinaryOp op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
};

// An assignment target: a name, a tuple of targets (unpacking) or namespace.attribute.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kAttribute };
  Kind kind = Kind::kName;
  std::string name;           // kName, kAttribute (the namespace variable)
  std::string attribute;      // kAttribute
  std::vector<Target> items;  // kTuple
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition, body); else_body
  kFor,          // for target in expr [if filter]: body; else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter]: body
  kMacro,        // macro name(params): body
  kCallBlock,    // call(params) expr: body (the caller)
  kFilterBlock,  // filter filter: body
  kWith,         // with assignments: body
  kBlock,        // body, rendered in place ({% generation %} and similar no-op wrappers)
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  // Macros that mention these names accept extra positional / keyword arguments.
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace qrun::jinja
