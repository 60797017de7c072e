// The syntax tree the parser builds and the evaluator walks: expressions (Expr) and
// statements (Stmt), each a small struct tagged with its kind and the source offset that error
// messages turn into a line and column.
//
// Thread-safety: immutable once parsed; safe to read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvferry::jinja::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kLiteral,    // value
  kName,       // name
  kList,       // items
  kTuple,      // items
  kDict,       // keys, items (pairwise)
  kGetAttr,    // operand.name
  kGetItem,    // operand[index]
  kSlice,      // operand[start:stop:step] (each optional)
  kCall,       // operand(args)
  kFilter,     // operand | name(args); operand is null inside {% filter %} and set blocks
  kTest,       // operand is [not] name(args)
  kUnary,      // op operand: "-", "+", "not"
  kBinary,     // lhs op rhs: + - * / // % ** ~ and or
  kCompare,    // operand (op rhs)...: == != < <= > >= in notin
  kCondition,  // then if cond else otherwise (otherwise may be null)
};

// Call arguments as written: positional, then name=value.
struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  ExprKind kind;
  uint32_t offset = 0;
  // Longest path to a leaf (a leaf is 1); the parser bounds it, so that walking and destroying
  // the tree cannot exhaust the stack.
  uint32_t height = 1;
  explicit Expr(ExprKind k, uint32_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
};

struct Literal : Expr {
  Value value;
  Literal(uint32_t off, Value v) : Expr(ExprKind::kLiteral, off), value(std::move(v)) {}
};

struct Name : Expr {
  std::string name;
  Name(uint32_t off, std::string n) : Expr(ExprKind::kName, off), name(std::move(n)) {}
};

// kList, kTuple.
struct Sequence : Expr {
  std::vector<ExprPtr> items;
  Sequence(ExprKind k, uint32_t off) : Expr(k, off) {}
};

struct DictLit : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  explicit DictLit(uint32_t off) : Expr(ExprKind::kDict, off) {}
};

struct GetAttr : Expr {
  ExprPtr operand;
  std::string name;
  GetAttr(uint32_t off, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, off), operand(std::move(o)), name(std::move(n)) {}
};

struct GetItem : Expr {
  ExprPtr operand;
  ExprPtr index;
  GetItem(uint32_t off, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::kGetItem, off), operand(std::move(o)), index(std::move(i)) {}
};

struct Slice : Expr {
  ExprPtr operand;
  ExprPtr start, stop, step;  // each may be null
  explicit Slice(uint32_t off) : Expr(ExprKind::kSlice, off) {}
};

struct Call : Expr {
  ExprPtr callee;
  Args args;
  explicit Call(uint32_t off) : Expr(ExprKind::kCall, off) {}
};

// kFilter, kTest.
struct Apply : Expr {
  ExprPtr operand;
  std::string name;
  Args args;
  bool negated = false;  // `is not`
  Apply(ExprKind k, uint32_t off) : Expr(k, off) {}
};

struct Unary : Expr {
  std::string op;
  ExprPtr operand;
  Unary(uint32_t off, std::string o, ExprPtr e)
      : Expr(ExprKind::kUnary, off), op(std::move(o)), operand(std::move(e)) {}
};

struct Binary : Expr {
  std::string op;
  ExprPtr lhs, rhs;
  Binary(uint32_t off, std::string o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, off), op(std::move(o)), lhs(std::move(l)), rhs(std::move(r)) {}
};

struct Compare : Expr {
  ExprPtr operand;
  std::vector<std::pair<std::string, ExprPtr>> ops;
  explicit Compare(uint32_t off) : Expr(ExprKind::kCompare, off) {}
};

struct Condition : Expr {
  ExprPtr then, cond, otherwise;
  explicit Condition(uint32_t off) : Expr(ExprKind::kCondition, off) {}
};

enum class StmtKind : uint8_t {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches, else
  kFor,          // {% for targets in iter [if cond] [recursive] %} body {% else %} ... {% endfor %}
  kSet,          // {% set targets = value %} / {% set ns.attr = value %}
  kSetBlock,     // {% set name [| filters] %} body {% endset %}
  kMacro,        // {% macro name(params) %} body {% endmacro %}
  kCallBlock,    // {% call [(params)] macro(args) %} body {% endcall %}
  kFilterBlock,  // {% filter f %} body {% endfilter %}
  kBreak,
  kContinue,
  kScope,  // a body: {% print %}'s outputs, HF's {% generation %} (a scope of its own)
};

struct Stmt {
  StmtKind kind;
  uint32_t offset = 0;
  Stmt(StmtKind k, uint32_t off) : kind(k), offset(off) {}
  virtual ~Stmt() = default;
};

struct Data : Stmt {
  std::string text;
  Data(uint32_t off, std::string t) : Stmt(StmtKind::kData, off), text(std::move(t)) {}
};

struct Output : Stmt {
  ExprPtr expr;
  Output(uint32_t off, ExprPtr e) : Stmt(StmtKind::kOutput, off), expr(std::move(e)) {}
};

struct If : Stmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
  explicit If(uint32_t off) : Stmt(StmtKind::kIf, off) {}
};

// Names that start undefined in a new scope (Jinja2's symbol analysis: first set there, and
// unknown to every enclosing scope, so they hide the context until set); filled in by
// AnalyzeScopes (scopes.h).
using StartUndefined = std::vector<std::string>;

struct For : Stmt {
  std::vector<std::string> targets;  // one name, or several to unpack
  ExprPtr iter;
  ExprPtr filter;  // may be null
  bool recursive = false;
  Body body;
  Body otherwise;
  StartUndefined body_undefined, otherwise_undefined;
  explicit For(uint32_t off) : Stmt(StmtKind::kFor, off) {}
};

struct Set : Stmt {
  std::vector<std::string> targets;  // names (several: unpacking); or the namespace name
  std::string attr;                  // non-empty: {% set targets[0].attr = value %}
  ExprPtr value;
  explicit Set(uint32_t off) : Stmt(StmtKind::kSet, off) {}
};

struct SetBlock : Stmt {
  std::string target;
  std::string attr;  // non-empty for a namespace attribute
  ExprPtr filter;    // a filter chain whose innermost operand is null, or null
  Body body;
  StartUndefined body_undefined;
  explicit SetBlock(uint32_t off) : Stmt(StmtKind::kSetBlock, off) {}
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Macro : Stmt {
  std::string name;
  std::vector<Param> params;
  Body body;
  StartUndefined body_undefined;
  explicit Macro(uint32_t off) : Stmt(StmtKind::kMacro, off) {}
};

struct CallBlock : Stmt {
  std::unique_ptr<Call> call;
  std::vector<Param> caller_params;
  Body body;
  StartUndefined body_undefined;
  explicit CallBlock(uint32_t off) : Stmt(StmtKind::kCallBlock, off) {}
};

struct FilterBlock : Stmt {
  ExprPtr filter;  // a filter chain whose innermost operand is null
  Body body;
  StartUndefined body_undefined;
  explicit FilterBlock(uint32_t off) : Stmt(StmtKind::kFilterBlock, off) {}
};

struct Scope : Stmt {
  Body body;
  bool new_scope = false;  // sets inside stay inside, as in a call block
  StartUndefined body_undefined;
  explicit Scope(uint32_t off) : Stmt(StmtKind::kScope, off) {}
};

}  // namespace kvferry::jinja::ast
