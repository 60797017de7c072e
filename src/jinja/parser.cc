#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/filters.h"
#include "jinja/tests.h"

namespace kvferry::jinja {
namespace {

using namespace ast;  // NOLINT: the parser builds every node kind

uint32_t HeightOf(const Expr* e) { return e == nullptr ? 0 : e->height; }

// Sets `e`'s height from its children's heights.
template <typename... Children>
void SetHeight(Expr* e, const Children*... children) {
  e->height = 1 + std::max({uint32_t{0}, HeightOf(children)...});
}

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

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map) : toks_(tokens), map_(map) {}

  StatusOr<Body> ParseTemplate() {
    KVF_ASSIGN_OR_RETURN(Body body, Subparse({}));
    if (Cur().kind != TokenKind::kEof) return Unexpected(Cur());
    if (!unknown_names_.empty()) return unknown_names_.front();
    return body;
  }

 private:
  // RAII nesting counter for recursive descent.
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->depth_; }
    ~Nest() { --p_->depth_; }
    Status Check() const {
      if (p_->depth_ > kMaxParseDepth) {
        return p_->Error(
            p_->Cur(), "template nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
      }
      return Status::Ok();
    }

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

  // ---- tokens ----

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

  static std::string Describe(TokenKind kind) {
    switch (kind) {
      case TokenKind::kData:
        return "template data / text";
      case TokenKind::kVariableBegin:
        return "begin of print statement";
      case TokenKind::kVariableEnd:
        return "end of print statement";
      case TokenKind::kBlockBegin:
        return "begin of statement block";
      case TokenKind::kBlockEnd:
        return "end of statement block";
      case TokenKind::kString:
        return "string";
      case TokenKind::kInteger:
        return "integer";
      case TokenKind::kFloat:
        return "float";
      case TokenKind::kEof:
        return "end of template";
      default:
        return "token";
    }
  }
  static std::string Describe(const Token& t) {
    if (t.kind == TokenKind::kName || t.kind == TokenKind::kOperator) return t.text;
    return Describe(t.kind);
  }

  Status Error(const Token& t, const std::string& msg) const {
    return InvalidArgumentError(map_.Location(t.offset) + ": " + msg);
  }
  Status Unexpected(const Token& t) const { return Error(t, "unexpected '" + Describe(t) + "'"); }
  Status ExpectFailed(const std::string& what) const {
    if (Cur().kind == TokenKind::kEof) {
      return Error(Cur(), "unexpected end of template, expected '" + what + "'.");
    }
    return Error(Cur(), "expected token '" + what + "', got '" + Describe(Cur()) + "'");
  }
  Status Expect(TokenKind kind) {
    if (Cur().kind != kind) return ExpectFailed(Describe(kind));
    Next();
    return Status::Ok();
  }
  Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return ExpectFailed(std::string(op));
    Next();
    return Status::Ok();
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return ExpectFailed("name");
    std::string n = Cur().text;
    Next();
    return n;
  }

  // ---- statements ----

  // Statements up to one of `end_tags` (left current) or the end of input.
  StatusOr<Body> Subparse(std::initializer_list<std::string_view> end_tags) {
    Nest nest(this);
    KVF_RETURN_IF_ERROR(nest.Check());
    Body body;
    while (Cur().kind != TokenKind::kEof) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kData) {
        body.push_back(std::make_unique<Data>(t.offset, t.text));
        Next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        Next();
        KVF_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(/*simplified=*/false, /*condexpr=*/true, {},
                                                   /*explicit_parens=*/false));
        KVF_RETURN_IF_ERROR(Expect(TokenKind::kVariableEnd));
        body.push_back(std::make_unique<Output>(t.offset, std::move(e)));
      } else if (t.kind == TokenKind::kBlockBegin) {
        Next();
        if (Cur().kind == TokenKind::kName &&
            std::find(end_tags.begin(), end_tags.end(), Cur().text) != end_tags.end()) {
          return body;
        }
        KVF_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
        if (s != nullptr) body.push_back(std::move(s));
        KVF_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
      } else {
        return Unexpected(t);
      }
    }
    return body;
  }

  // `:`? `%}` body, stopping at one of `end_tags` (consumed when `drop_end`).
  StatusOr<Body> ParseBlockBody(std::initializer_list<std::string_view> end_tags, bool drop_end,
                                const std::string& innermost) {
    SkipOp(":");
    KVF_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
    KVF_ASSIGN_OR_RETURN(Body body, Subparse(end_tags));
    if (Cur().kind == TokenKind::kEof) {
      std::string looking;
      for (auto t : end_tags) looking += (looking.empty() ? "'" : " or '") + std::string(t) + "'";
      return Error(Cur(), "Unexpected end of template. Jinja was looking for the following tags: " +
                              looking + ". The innermost block that needs to be closed is '" +
                              innermost + "'.");
    }
    if (drop_end) Next();
    return body;
  }

  StatusOr<StmtPtr> ParseStatement() {
    const Token& t = Cur();
    if (t.kind != TokenKind::kName) return Error(t, "tag name expected");
    const std::string& tag = t.text;
    if (tag == "if") return ParseIf();
    if (tag == "for") return ParseFor();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "print") return ParsePrint();
    if (tag == "break" || tag == "continue") return ParseLoopControl();
    if (tag == "generation") return ParseGeneration();
    for (std::string_view no : {"extends", "block", "include", "import", "from", "with",
                                "autoescape", "do", "trans", "debug"}) {
      if (tag == no) {
        return UnimplementedError(map_.Location(t.offset) + ": the '" + tag +
                                  "' tag is not supported");
      }
    }
    return Error(t, "Encountered unknown tag '" + tag + "'.");
  }

  StatusOr<StmtPtr> ParseIf() {
    auto node = std::make_unique<If>(Cur().offset);
    Next();
    ++soft_;
    while (true) {
      KVF_ASSIGN_OR_RETURN(ExprPtr test, ParseTuple(false, /*condexpr=*/false, {}, false));
      KVF_ASSIGN_OR_RETURN(Body body, ParseBlockBody({"elif", "else", "endif"}, false, "if"));
      node->branches.emplace_back(std::move(test), std::move(body));
      const std::string tag = Cur().text;
      Next();
      if (tag == "elif") continue;
      if (tag == "else") {
        KVF_ASSIGN_OR_RETURN(node->otherwise, ParseBlockBody({"endif"}, true, "if"));
      }
      break;
    }
    --soft_;
    return StmtPtr(std::move(node));
  }

  StatusOr<StmtPtr> ParseFor() {
    auto node = std::make_unique<For>(Cur().offset);
    Next();
    KVF_ASSIGN_OR_RETURN(node->targets, ParseTargets({"in"}));
    if (!SkipName("in")) return ExpectFailed("in");
    KVF_ASSIGN_OR_RETURN(node->iter, ParseTuple(false, /*condexpr=*/false, {"recursive"}, false));
    HardFrame hard(this);
    if (SkipName("if")) {
      KVF_ASSIGN_OR_RETURN(node->filter, ParseExpression(true));
    }
    if (IsName("recursive")) {
      return UnimplementedError(map_.Location(Cur().offset) +
                                ": recursive loops are not supported");
    }
    ++loop_depth_;
    auto body = ParseBlockBody({"endfor", "else"}, false, "for");
    --loop_depth_;
    if (!body.ok()) return body.status();
    node->body = std::move(body).value();
    const std::string tag = Cur().text;
    Next();
    if (tag == "else") {
      KVF_ASSIGN_OR_RETURN(node->otherwise, ParseBlockBody({"endfor"}, true, "for"));
    }
    return StmtPtr(std::move(node));
  }

  // Names before `in` or `=`: `x`, `k, v`, `(k, v)`.
  StatusOr<std::vector<std::string>> ParseTargets(std::initializer_list<std::string_view> end) {
    std::vector<std::string> names;
    const bool parens = SkipOp("(");
    while (true) {
      if (!names.empty()) {
        if (!SkipOp(",")) break;
        if (IsAnyName(end) || IsOp("=") || IsOp(")")) break;
      }
      if (Cur().kind != TokenKind::kName ||
          IsAnyName({"true", "false", "none", "True", "False", "None"})) {
        return Error(Cur(), "can't assign to '" + Describe(Cur()) + "'");
      }
      names.push_back(Cur().text);
      Next();
    }
    if (parens) KVF_RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  StatusOr<StmtPtr> ParseSet() {
    const uint32_t off = Cur().offset;
    Next();
    std::vector<std::string> targets;
    std::string attr;
    if (Cur().kind == TokenKind::kName && Look().kind == TokenKind::kOperator &&
        Look().text == ".") {
      targets.push_back(Cur().text);
      Next();
      Next();
      KVF_ASSIGN_OR_RETURN(attr, ExpectName());
    } else {
      KVF_ASSIGN_OR_RETURN(targets, ParseTargets({}));
    }
    if (SkipOp("=")) {
      auto node = std::make_unique<Set>(off);
      node->targets = std::move(targets);
      node->attr = std::move(attr);
      KVF_ASSIGN_OR_RETURN(node->value, ParseTuple(false, true, {}, false));
      return StmtPtr(std::move(node));
    }
    if (targets.size() != 1) return ExpectFailed("=");
    HardFrame hard(this);
    auto node = std::make_unique<SetBlock>(off);
    node->target = targets[0];
    node->attr = std::move(attr);
    if (IsOp("|")) {
      KVF_ASSIGN_OR_RETURN(node->filter, ParseFilterChain(nullptr, /*start_inline=*/false));
    }
    KVF_ASSIGN_OR_RETURN(node->body, ParseBlockBody({"endset"}, true, "set"));
    return StmtPtr(std::move(node));
  }

  StatusOr<std::vector<Param>> ParseSignature() {
    std::vector<Param> params;
    KVF_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
      Param p;
      KVF_ASSIGN_OR_RETURN(p.name, ExpectName());
      if (SkipOp("=")) {
        KVF_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      } else if (!params.empty() && params.back().default_value != nullptr) {
        return Error(Cur(), "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    KVF_RETURN_IF_ERROR(ExpectOp(")"));
    return params;
  }

  // Macro and call bodies are new functions: break/continue cannot reach an outer loop.
  StatusOr<Body> ParseFunctionBody(std::string_view end_tag, const std::string& innermost) {
    HardFrame hard(this);
    const int saved = loop_depth_;
    loop_depth_ = 0;
    auto body = ParseBlockBody({end_tag}, true, innermost);
    loop_depth_ = saved;
    return body;
  }

  StatusOr<StmtPtr> ParseMacro() {
    auto node = std::make_unique<Macro>(Cur().offset);
    Next();
    KVF_ASSIGN_OR_RETURN(node->name, ExpectName());
    HardFrame hard(this);
    KVF_ASSIGN_OR_RETURN(node->params, ParseSignature());
    KVF_ASSIGN_OR_RETURN(node->body, ParseFunctionBody("endmacro", "macro"));
    return StmtPtr(std::move(node));
  }

  StatusOr<StmtPtr> ParseCallBlock() {
    auto node = std::make_unique<CallBlock>(Cur().offset);
    Next();
    if (IsOp("(")) {
      HardFrame hard(this);
      KVF_ASSIGN_OR_RETURN(node->caller_params, ParseSignature());
    }
    const Token& at = Cur();
    KVF_ASSIGN_OR_RETURN(ExprPtr call, ParseExpression(true));
    if (call->kind != ExprKind::kCall) return Error(at, "expected call");
    node->call.reset(static_cast<Call*>(call.release()));
    KVF_ASSIGN_OR_RETURN(node->body, ParseFunctionBody("endcall", "call"));
    return StmtPtr(std::move(node));
  }

  StatusOr<StmtPtr> ParseFilterBlock() {
    auto node = std::make_unique<FilterBlock>(Cur().offset);
    Next();
    HardFrame hard(this);
    KVF_ASSIGN_OR_RETURN(node->filter, ParseFilterChain(nullptr, /*start_inline=*/true));
    KVF_ASSIGN_OR_RETURN(node->body, ParseBlockBody({"endfilter"}, true, "filter"));
    return StmtPtr(std::move(node));
  }

  // {% print a, b %}: the expressions, output in order.
  StatusOr<StmtPtr> ParsePrint() {
    auto node = std::make_unique<Scope>(Cur().offset);
    Next();
    while (Cur().kind != TokenKind::kBlockEnd) {
      if (!node->body.empty()) KVF_RETURN_IF_ERROR(ExpectOp(","));
      const uint32_t off = Cur().offset;
      KVF_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      node->body.push_back(std::make_unique<Output>(off, std::move(e)));
    }
    return StmtPtr(std::move(node));
  }

  StatusOr<StmtPtr> ParseLoopControl() {
    const Token& t = Cur();
    const bool is_break = t.text == "break";
    if (loop_depth_ == 0) return Error(t, "'" + t.text + "' outside of a loop");
    Next();
    return std::make_unique<Stmt>(is_break ? StmtKind::kBreak : StmtKind::kContinue, t.offset);
  }

  // transformers' {% generation %}: a call block around its body, so a scope of its own.
  StatusOr<StmtPtr> ParseGeneration() {
    auto node = std::make_unique<Scope>(Cur().offset);
    node->new_scope = true;
    Next();
    KVF_ASSIGN_OR_RETURN(node->body, ParseFunctionBody("endgeneration", "generation"));
    return StmtPtr(std::move(node));
  }

  // ---- expressions ----

  Status CheckHeight(const Expr& e) const {
    if (e.height > 2 * kMaxParseDepth) {
      return InvalidArgumentError(map_.Location(e.offset) + ": expression nests deeper than " +
                                  std::to_string(2 * kMaxParseDepth) + " levels");
    }
    return Status::Ok();
  }

  // A tuple `a, b` or a single expression; `extra_end` names also end it (`in`, `recursive`).
  StatusOr<ExprPtr> ParseTuple(bool simplified, bool condexpr,
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

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const TokenKind k = Cur().kind;
    if (k == TokenKind::kVariableEnd || k == TokenKind::kBlockEnd || IsOp(")")) return true;
    return IsAnyName(extra_end);
  }

  StatusOr<ExprPtr> ParseExpression(bool condexpr) {
    if (condexpr) return ParseCondExpr();
    return ParseOr();
  }

  StatusOr<ExprPtr> ParseCondExpr() {
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

  StatusOr<ExprPtr> MakeBinary(uint32_t off, std::string op, ExprPtr lhs, ExprPtr rhs) {
    auto node = std::make_unique<Binary>(off, std::move(op), std::move(lhs), std::move(rhs));
    SetHeight(node.get(), node->lhs.get(), node->rhs.get());
    KVF_RETURN_IF_ERROR(CheckHeight(*node));
    return ExprPtr(std::move(node));
  }

  StatusOr<ExprPtr> ParseOr() {
    KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseAnd());
    while (IsName("or")) {
      const uint32_t off = Cur().offset;
      Next();
      KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
      KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "or", std::move(lhs), std::move(rhs)));
    }
    return lhs;
  }

  StatusOr<ExprPtr> ParseAnd() {
    KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseNot());
    while (IsName("and")) {
      const uint32_t off = Cur().offset;
      Next();
      KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
      KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "and", std::move(lhs), std::move(rhs)));
    }
    return lhs;
  }

  StatusOr<ExprPtr> ParseNot() {
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

  StatusOr<ExprPtr> ParseCompare() {
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

  StatusOr<ExprPtr> ParseMath1() {
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

  StatusOr<ExprPtr> ParseConcat() {
    KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseMath2());
    while (IsOp("~")) {
      const uint32_t off = Cur().offset;
      Next();
      KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath2());
      KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "~", std::move(lhs), std::move(rhs)));
    }
    return lhs;
  }

  StatusOr<ExprPtr> ParseMath2() {
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

  StatusOr<ExprPtr> ParsePow() {
    KVF_ASSIGN_OR_RETURN(ExprPtr lhs, ParseUnary(true));
    while (IsOp("**")) {
      const uint32_t off = Cur().offset;
      Next();
      KVF_ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary(true));
      KVF_ASSIGN_OR_RETURN(lhs, MakeBinary(off, "**", std::move(lhs), std::move(rhs)));
    }
    return lhs;
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
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

  StatusOr<ExprPtr> ParsePrimary() {
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

  StatusOr<ExprPtr> ParseList() {
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

  StatusOr<ExprPtr> ParseDict() {
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

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
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

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
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

  StatusOr<ExprPtr> ParseSubscript(ExprPtr operand) {
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

  // One subscript: an expression or a slice `a:b:c` (each part optional).
  StatusOr<ExprPtr> ParseSubscribed() {
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

  StatusOr<Args> ParseCallArgs() {
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

  StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto node = std::make_unique<Call>(Cur().offset);
    KVF_ASSIGN_OR_RETURN(node->args, ParseCallArgs());
    node->callee = std::move(callee);
    node->height = 1 + std::max(node->callee->height, MaxHeight(node->args));
    return ExprPtr(std::move(node));
  }

  // `| f(args) | g ...`; with start_inline the first filter has no leading `|`.
  StatusOr<ExprPtr> ParseFilterChain(ExprPtr operand, bool start_inline) {
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

  StatusOr<ExprPtr> ParseTest(ExprPtr operand) {
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

  // `x is divisibleby 3`: a test argument without parentheses.
  bool StartsTestArgument() const {
    const TokenKind k = Cur().kind;
    if (k == TokenKind::kName) return !IsAnyName({"else", "or", "and"});
    if (k == TokenKind::kString || k == TokenKind::kInteger || k == TokenKind::kFloat) return true;
    return IsOp("(") || IsOp("[") || IsOp("{");
  }

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

}  // namespace

StatusOr<ast::Body> Parse(const std::vector<Token>& tokens, const SourceMap& map) {
  return Parser(tokens, map).ParseTemplate();
}

}  // namespace kvferry::jinja
