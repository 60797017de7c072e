// The expression half of the parser (statements: parser.cc), in the order of Jinja2's
// precedence from lowest to highest.
#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/filters.h"
#include "jinja/parser_internal.h"
#include "jinja/tests.h"

namespace kvferry::jinja::internal {

using namespace ast;  // NOLINT: the parser builds every node kind

uint32_t MaxHeight(const std::vector<ExprPtr>& items) {
  uint32_t h = 0;
  for (const auto& e : items) h = std::max(h, e->height);
  return h;
}

uint32_t MaxHeight(const Args& args) {
  uint32_t h = MaxHeight(args.positional);
  for (const auto& [k, e] : args.keyword) h = std::max(h, e->height);
  return h;
}

Status Parser::CheckHeight(const Expr& e) const {
  if (e.height > 2 * kMaxParseDepth) {
    return InvalidArgumentError(map_.Location(e.offset) + ": expression nests deeper than " +
                                std::to_string(2 * kMaxParseDepth) + " levels");
  }
  return Status::Ok();
}

StatusOr<ExprPtr> Parser::ParseTuple(bool simplified, bool condexpr,
                                     std::initializer_list<std::string_view> extra_end,
                                     bool explicit_parens) {
  const uint32_t off = Cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    ExprPtr e;
    if (simplified) {
      KVF_ASSIGN_OR_RETURN(e, ParsePrimary());
    } else {
      KVF_ASSIGN_OR_RETURN(e, ParseExpression(condexpr));
    }
    items.push_back(std::move(e));
    if (!IsOp(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) {
      return Error(Cur(), "Expected an expression, got '" + Describe(Cur()) + "'");
    }
  }
  auto t = std::make_unique<Sequence>(ExprKind::kTuple, off);
  t->items = std::move(items);
  t->height = 1 + MaxHeight(t->items);
  return ExprPtr(std::move(t));
}

bool Parser::IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
  const TokenKind k = Cur().kind;
  if (k == TokenKind::kVariableEnd || k == TokenKind::kBlockEnd || IsOp(")")) return true;
  return IsAnyName(extra_end);
}

StatusOr<ExprPtr> Parser::ParseExpression(bool condexpr) {
  if (condexpr) return ParseCondExpr();
  return ParseOr();
}

StatusOr<ExprPtr> Parser::ParseCondExpr() {
  const size_t unknown_before = unknown_names_.size();
  KVF_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  if (IsName("if")) unknown_names_.resize(unknown_before);  // all of a condexpr is soft
  while (IsName("if")) {
    const uint32_t off = Cur().offset;
    Next();
    ++soft_;
    auto node = std::make_unique<Condition>(off);
    node->then = std::move(expr);
    auto cond = ParseOr();
    if (!cond.ok()) return cond.status();
    node->cond = std::move(cond).value();
    if (SkipName("else")) {
      auto otherwise = ParseCondExpr();
      if (!otherwise.ok()) return otherwise.status();
      node->otherwise = std::move(otherwise).value();
    }
    --soft_;
    SetHeight(node.get(), node->then.get(), node->cond.get(), node->otherwise.get());
    KVF_RETURN_IF_ERROR(CheckHeight(*node));
    expr = std::move(node);
  }
  return expr;
}

StatusOr<ExprPtr> Parser::MakeBinary(uint32_t off, std::string op, ExprPtr lhs, ExprPtr rhs) {
  auto node = std::make_unique<Binary>(off, std::move(op), std::move(lhs), std::move(rhs));
  SetHeight(node.get(), node->lhs.get(), node->rhs.get());
  KVF_RETURN_IF_ERROR(CheckHeight(*node));
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseOr() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseAnd());
  while (IsName("or")) {
    const uint32_t off = Cur().offset;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "or", std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParseAnd() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseNot());
  while (IsName("and")) {
    const uint32_t off = Cur().offset;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "and", std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  Nest nest(this);
  KVF_RETURN_IF_ERROR(nest.Check());
  const uint32_t off = Cur().offset;
  Next();
  KVF_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  auto node = std::make_unique<Unary>(off, "not", std::move(operand));
  SetHeight(node.get(), node->operand.get());
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  const uint32_t off = Cur().offset;
  KVF_ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
  auto node = std::make_unique<Compare>(off);
  while (true) {
    std::string op;
    if (Cur().kind == TokenKind::kOperator &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      Next();
    } else if (SkipName("in")) {
      op = "in";
    } else if (IsName("not") && Look().kind == TokenKind::kName && Look().text == "in") {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    node->ops.emplace_back(std::move(op), std::move(rhs));
  }
  if (node->ops.empty()) return expr;
  node->operand = std::move(expr);
  uint32_t h = node->operand->height;
  for (const auto& [op, e] : node->ops) h = std::max(h, e->height);
  node->height = h + 1;
  KVF_RETURN_IF_ERROR(CheckHeight(*node));
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseMath1() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const uint32_t off = Cur().offset;
    std::string op = Cur().text;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseConcat());
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, std::move(op), std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParseConcat() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseMath2());
  while (IsOp("~")) {
    const uint32_t off = Cur().offset;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath2());
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "~", std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParseMath2() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const uint32_t off = Cur().offset;
    std::string op = Cur().text;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParsePow());
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, std::move(op), std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParsePow() {
  KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseUnary(true));
  while (IsOp("**")) {
    const uint32_t off = Cur().offset;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary(true));
    KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "**", std::move(lhs), std::move(rhs)));
  }
  return lhs;
}

StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Nest nest(this);
  KVF_RETURN_IF_ERROR(nest.Check());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const uint32_t off = Cur().offset;
    std::string op = Cur().text;
    Next();
    KVF_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    auto u = std::make_unique<Unary>(off, std::move(op), std::move(operand));
    SetHeight(u.get(), u->operand.get());
    node = std::move(u);
  } else {
    KVF_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  KVF_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    KVF_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParsePrimary() {
  Nest nest(this);
  KVF_RETURN_IF_ERROR(nest.Check());
  const Token& t = Cur();
  switch (t.kind) {
    case TokenKind::kName: {
      ExprPtr e;
      if (t.text == "true" || t.text == "True") {
        e = std::make_unique<Literal>(t.offset, Value::Bool(true));
      } else if (t.text == "false" || t.text == "False") {
        e = std::make_unique<Literal>(t.offset, Value::Bool(false));
      } else if (t.text == "none" || t.text == "None") {
        e = std::make_unique<Literal>(t.offset, Value::None());
      } else {
        e = std::make_unique<Name>(t.offset, t.text);
      }
      Next();
      return e;
    }
    case TokenKind::kString: {
      const uint32_t off = t.offset;
      std::string s;
      while (Cur().kind == TokenKind::kString) {  // adjacent literals concatenate
        s += Cur().text;
        Next();
      }
      return ExprPtr(std::make_unique<Literal>(off, Value::Str(std::move(s))));
    }
    case TokenKind::kInteger:
      Next();
      return ExprPtr(std::make_unique<Literal>(t.offset, Value::Int(t.int_value)));
    case TokenKind::kFloat:
      Next();
      return ExprPtr(std::make_unique<Literal>(t.offset, Value::Float(t.float_value)));
    case TokenKind::kOperator:
      if (t.text == "(") {
        Next();
        KVF_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, /*explicit_parens=*/true));
        KVF_RETURN_IF_ERROR(ExpectOp(")"));
        return e;
      }
      if (t.text == "[") return ParseList();
      if (t.text == "{") return ParseDict();
      break;
    default:
      break;
  }
  return Unexpected(t);
}

StatusOr<ExprPtr> Parser::ParseList() {
  auto node = std::make_unique<Sequence>(ExprKind::kList, Cur().offset);
  Next();
  while (!IsOp("]")) {
    if (!node->items.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("]")) break;
    KVF_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
    node->items.push_back(std::move(e));
  }
  KVF_RETURN_IF_ERROR(ExpectOp("]"));
  node->height = 1 + MaxHeight(node->items);
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseDict() {
  auto node = std::make_unique<DictLit>(Cur().offset);
  Next();
  uint32_t h = 0;
  while (!IsOp("}")) {
    if (!node->pairs.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("}")) break;
    KVF_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
    KVF_RETURN_IF_ERROR(ExpectOp(":"));
    KVF_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    h = std::max({h, key->height, value->height});
    node->pairs.emplace_back(std::move(key), std::move(value));
  }
  KVF_RETURN_IF_ERROR(ExpectOp("}"));
  node->height = 1 + h;
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      KVF_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      KVF_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
    KVF_RETURN_IF_ERROR(CheckHeight(*node));
  }
}

StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      KVF_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node), false));
    } else if (IsName("is")) {
      KVF_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      KVF_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
    KVF_RETURN_IF_ERROR(CheckHeight(*node));
  }
}

StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr operand) {
  const Token& t = Cur();
  Next();
  if (t.text == ".") {
    const Token& attr = Cur();
    if (attr.kind == TokenKind::kName) {
      Next();
      auto node = std::make_unique<GetAttr>(t.offset, std::move(operand), attr.text);
      SetHeight(node.get(), node->operand.get());
      return ExprPtr(std::move(node));
    }
    if (attr.kind != TokenKind::kInteger) return Error(attr, "expected name or number");
    Next();
    auto index = std::make_unique<Literal>(attr.offset, Value::Int(attr.int_value));
    auto node = std::make_unique<GetItem>(t.offset, std::move(operand), std::move(index));
    SetHeight(node.get(), node->operand.get());
    return ExprPtr(std::move(node));
  }
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
    KVF_ASSIGN_OR_RETURN(ExprPtr a, ParseSubscribed());
    args.push_back(std::move(a));
  }
  KVF_RETURN_IF_ERROR(ExpectOp("]"));
  if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
    auto* slice = static_cast<Slice*>(args[0].get());
    slice->operand = std::move(operand);
    SetHeight(slice, slice->operand.get(), slice->start.get(), slice->stop.get(),
              slice->step.get());
    return std::move(args[0]);
  }
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    for (const auto& a : args) {  // Python lists take no tuple of slices
      if (a->kind == ExprKind::kSlice) {
        return UnimplementedError(map_.Location(a->offset) +
                                  ": a slice inside a tuple subscript is not supported");
      }
    }
    auto tuple = std::make_unique<Sequence>(ExprKind::kTuple, t.offset);
    tuple->items = std::move(args);
    tuple->height = 1 + MaxHeight(tuple->items);
    index = std::move(tuple);
  }
  auto node = std::make_unique<GetItem>(t.offset, std::move(operand), std::move(index));
  SetHeight(node.get(), node->operand.get(), node->index.get());
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const uint32_t off = Cur().offset;
  ExprPtr first;
  if (!IsOp(":")) {
    KVF_ASSIGN_OR_RETURN(first, ParseExpression(true));
    if (!IsOp(":")) return first;
  }
  Next();  // ':'
  auto slice = std::make_unique<Slice>(off);
  slice->start = std::move(first);
  if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
    KVF_ASSIGN_OR_RETURN(slice->stop, ParseExpression(true));
  }
  if (SkipOp(":") && !IsOp("]") && !IsOp(",")) {
    KVF_ASSIGN_OR_RETURN(slice->step, ParseExpression(true));
  }
  return ExprPtr(std::move(slice));
}

StatusOr<Args> Parser::ParseCallArgs() {
  Args args;
  const Token& open = Cur();
  KVF_RETURN_IF_ERROR(ExpectOp("("));
  bool need_comma = false;
  while (!IsOp(")")) {
    if (need_comma) {
      KVF_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*") || IsOp("**")) {
      return UnimplementedError(map_.Location(Cur().offset) +
                                ": *args and **kwargs in calls are not supported");
    }
    if (Cur().kind == TokenKind::kName && Look().kind == TokenKind::kOperator &&
        Look().text == "=") {
      std::string key = Cur().text;
      Next();
      Next();
      KVF_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      args.keyword.emplace_back(std::move(key), std::move(value));
    } else {
      if (!args.keyword.empty()) {
        return Error(open, "invalid syntax for function call expression");
      }
      KVF_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      args.positional.push_back(std::move(value));
    }
    need_comma = true;
  }
  KVF_RETURN_IF_ERROR(ExpectOp(")"));
  return args;
}

StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  auto node = std::make_unique<Call>(Cur().offset);
  KVF_ASSIGN_OR_RETURN(node->args, ParseCallArgs());
  node->callee = std::move(callee);
  node->height = 1 + std::max(node->callee->height, MaxHeight(node->args));
  return ExprPtr(std::move(node));
}

StatusOr<ExprPtr> Parser::ParseFilterChain(ExprPtr operand, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Next();
    start_inline = false;
    const Token& t = Cur();
    KVF_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      KVF_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    if (soft_ == 0 && !IsKnownFilter(name)) {
      unknown_names_.push_back(Error(t, "No filter named '" + name + "'."));
    }
    auto node = std::make_unique<Apply>(ExprKind::kFilter, t.offset);
    node->name = std::move(name);
    if (IsOp("(")) {
      KVF_ASSIGN_OR_RETURN(node->args, ParseCallArgs());
    }
    node->operand = std::move(operand);
    node->height = 1 + std::max(HeightOf(node->operand.get()), MaxHeight(node->args));
    KVF_RETURN_IF_ERROR(CheckHeight(*node));
    operand = std::move(node);
  }
  return operand;
}

StatusOr<ExprPtr> Parser::ParseTest(ExprPtr operand) {
  const Token& is = Cur();
  Next();
  const bool negated = SkipName("not");
  const Token& t = Cur();
  KVF_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    KVF_ASSIGN_OR_RETURN(std::string part, ExpectName());
    name += "." + part;
  }
  if (soft_ == 0 && !IsKnownTest(name)) {
    unknown_names_.push_back(Error(t, "No test named '" + name + "'."));
  }
  auto node = std::make_unique<Apply>(ExprKind::kTest, is.offset);
  node->name = std::move(name);
  node->negated = negated;
  if (IsOp("(")) {
    KVF_ASSIGN_OR_RETURN(node->args, ParseCallArgs());
  } else if (StartsTestArgument()) {
    if (IsName("is")) return Error(Cur(), "You cannot chain multiple tests with is");
    KVF_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    KVF_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    node->args.positional.push_back(std::move(arg));
  }
  node->operand = std::move(operand);
  node->height = 1 + std::max(node->operand->height, MaxHeight(node->args));
  return ExprPtr(std::move(node));
}

bool Parser::StartsTestArgument() const {
  const TokenKind k = Cur().kind;
  if (k == TokenKind::kName) return !IsAnyName({"else", "or", "and"});
  if (k == TokenKind::kString || k == TokenKind::kInteger || k == TokenKind::kFloat) return true;
  return IsOp("(") || IsOp("[") || IsOp("{");
}

}  // namespace kvferry::jinja::internal
