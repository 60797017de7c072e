// The recursive-descent parser behind jinja::Parse (parser.h), shared by its two sources:
// parser.cc (tokens, errors and statements) and parser_expr.cc (expressions, by precedence).
// Only those two files include this header; everyone else calls Parse.
//
// Thread-safety: a Parser is used by one thread for one Parse call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja::internal {

// Each node's height (1 + its tallest child) bounds how deep the evaluator recurses.
inline uint32_t HeightOf(const ast::Expr* e) { return e == nullptr ? 0 : e->height; }

// Sets `e`'s height from its children's heights.
template <typename... Children>
void SetHeight(ast::Expr* e, const Children*... children) {
  e->height = 1 + std::max({uint32_t{0}, HeightOf(children)...});
}

uint32_t MaxHeight(const std::vector<ast::ExprPtr>& items);
uint32_t MaxHeight(const ast::Args& args);

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map) : toks_(tokens), map_(map) {}

  StatusOr<ast::Body> ParseTemplate();

 private:
  // RAII nesting counter for recursive descent.
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->depth_; }
    ~Nest() { --p_->depth_; }
    Status Check() const;

   private:
    Parser* p_;
  };

  // Jinja2 compiles loop filters and bodies, macro and call bodies, filter and set blocks in
  // frames of their own, which are not soft even inside an `if`.
  class HardFrame {
   public:
    explicit HardFrame(Parser* p) : p_(p), saved_(p->soft_) { p_->soft_ = 0; }
    ~HardFrame() { p_->soft_ = saved_; }

   private:
    Parser* p_;
    int saved_;
  };

  // ---- tokens (parser.cc) ----

  const Token& Cur() const { return toks_[i_]; }
  const Token& Look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsName(std::string_view v) const {
    return Cur().kind == TokenKind::kName && Cur().text == v;
  }
  bool IsOp(std::string_view op) const {
    return Cur().kind == TokenKind::kOperator && Cur().text == op;
  }
  bool IsAnyName(std::initializer_list<std::string_view> names) const {
    return std::any_of(names.begin(), names.end(), [&](auto n) { return IsName(n); });
  }
  bool SkipName(std::string_view v) {
    if (!IsName(v)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }

  static std::string Describe(TokenKind kind);
  static std::string Describe(const Token& t);

  Status Error(const Token& t, const std::string& msg) const;
  Status Unexpected(const Token& t) const;
  Status ExpectFailed(const std::string& what) const;
  Status Expect(TokenKind kind);
  Status ExpectOp(std::string_view op);
  StatusOr<std::string> ExpectName();

  // ---- statements (parser.cc) ----

  // Statements up to one of `end_tags` (left current) or the end of input.
  StatusOr<ast::Body> Subparse(std::initializer_list<std::string_view> end_tags);
  // `:`? `%}` body, stopping at one of `end_tags` (consumed when `drop_end`).
  StatusOr<ast::Body> ParseBlockBody(std::initializer_list<std::string_view> end_tags,
                                     bool drop_end, const std::string& innermost);
  StatusOr<ast::StmtPtr> ParseStatement();
  StatusOr<ast::StmtPtr> ParseIf();
  StatusOr<ast::StmtPtr> ParseFor();
  // Names before `in` or `=`: `x`, `k, v`, `(k, v)`.
  StatusOr<std::vector<std::string>> ParseTargets(std::initializer_list<std::string_view> end);
  StatusOr<ast::StmtPtr> ParseSet();
  StatusOr<std::vector<ast::Param>> ParseSignature();
  // Macro and call bodies are new functions: break/continue cannot reach an outer loop.
  StatusOr<ast::Body> ParseFunctionBody(std::string_view end_tag, const std::string& innermost);
  StatusOr<ast::StmtPtr> ParseMacro();
  StatusOr<ast::StmtPtr> ParseCallBlock();
  StatusOr<ast::StmtPtr> ParseFilterBlock();
  // {% print a, b %}: the expressions, output in order.
  StatusOr<ast::StmtPtr> ParsePrint();
  StatusOr<ast::StmtPtr> ParseLoopControl();
  // transformers' {% generation %}: a call block around its body, so a scope of its own.
  StatusOr<ast::StmtPtr> ParseGeneration();

  // ---- expressions (parser_expr.cc) ----

  Status CheckHeight(const ast::Expr& e) const;
  // A tuple `a, b` or a single expression; `extra_end` names also end it (`in`, `recursive`).
  StatusOr<ast::ExprPtr> ParseTuple(bool simplified, bool condexpr,
                                    std::initializer_list<std::string_view> extra_end,
                                    bool explicit_parens);
  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const;
  StatusOr<ast::ExprPtr> ParseExpression(bool condexpr);
  StatusOr<ast::ExprPtr> ParseCondExpr();
  StatusOr<ast::ExprPtr> MakeBinary(uint32_t off, std::string op, ast::ExprPtr lhs,
                                    ast::ExprPtr rhs);
  StatusOr<ast::ExprPtr> ParseOr();
  StatusOr<ast::ExprPtr> ParseAnd();
  StatusOr<ast::ExprPtr> ParseNot();
  StatusOr<ast::ExprPtr> ParseCompare();
  StatusOr<ast::ExprPtr> ParseMath1();
  StatusOr<ast::ExprPtr> ParseConcat();
  StatusOr<ast::ExprPtr> ParseMath2();
  StatusOr<ast::ExprPtr> ParsePow();
  StatusOr<ast::ExprPtr> ParseUnary(bool with_filter);
  StatusOr<ast::ExprPtr> ParsePrimary();
  StatusOr<ast::ExprPtr> ParseList();
  StatusOr<ast::ExprPtr> ParseDict();
  StatusOr<ast::ExprPtr> ParsePostfix(ast::ExprPtr node);
  StatusOr<ast::ExprPtr> ParseFilterExpr(ast::ExprPtr node);
  StatusOr<ast::ExprPtr> ParseSubscript(ast::ExprPtr operand);
  // One subscript: an expression or a slice `a:b:c` (each part optional).
  StatusOr<ast::ExprPtr> ParseSubscribed();
  StatusOr<ast::Args> ParseCallArgs();
  StatusOr<ast::ExprPtr> ParseCall(ast::ExprPtr callee);
  // `| f(args) | g ...`; with start_inline the first filter has no leading `|`.
  StatusOr<ast::ExprPtr> ParseFilterChain(ast::ExprPtr operand, bool start_inline);
  StatusOr<ast::ExprPtr> ParseTest(ast::ExprPtr operand);
  // `x is divisibleby 3`: a test argument without parentheses.
  bool StartsTestArgument() const;

  const std::vector<Token>& toks_;
  const SourceMap& map_;
  size_t i_ = 0;
  int depth_ = 0;
  int soft_ = 0;  // inside `if` statements or conditional expressions
  // Unknown filter and test names outside soft places: errors once the whole template parsed
  // (as Jinja2's compiler reports them), unless the expression turns out to be the first part
  // of a conditional expression.
  std::vector<Status> unknown_names_;
  int loop_depth_ = 0;  // inside for-loop bodies of the current function
};

}  // namespace kvferry::jinja::internal
