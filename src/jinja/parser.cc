#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/parser_internal.h"

namespace kvferry::jinja {
namespace internal {

using namespace ast;  // NOLINT: the parser builds every node kind

Status Parser::Nest::Check() const {
  if (p_->depth_ > kMaxParseDepth) {
    return p_->Error(p_->Cur(),
                     "template nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
  }
  return Status::Ok();
}

StatusOr<Body> Parser::ParseTemplate() {
  KVF_ASSIGN_OR_RETURN(Body body, Subparse({}));
  if (Cur().kind != TokenKind::kEof) return Unexpected(Cur());
  if (!unknown_names_.empty()) return unknown_names_.front();
  return body;
}

std::string Parser::Describe(TokenKind kind) {
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

std::string Parser::Describe(const Token& t) {
  if (t.kind == TokenKind::kName || t.kind == TokenKind::kOperator) return t.text;
  return Describe(t.kind);
}

Status Parser::Error(const Token& t, const std::string& msg) const {
  return InvalidArgumentError(map_.Location(t.offset) + ": " + msg);
}

Status Parser::Unexpected(const Token& t) const {
  return Error(t, "unexpected '" + Describe(t) + "'");
}

Status Parser::ExpectFailed(const std::string& what) const {
  if (Cur().kind == TokenKind::kEof) {
    return Error(Cur(), "unexpected end of template, expected '" + what + "'.");
  }
  return Error(Cur(), "expected token '" + what + "', got '" + Describe(Cur()) + "'");
}

Status Parser::Expect(TokenKind kind) {
  if (Cur().kind != kind) return ExpectFailed(Describe(kind));
  Next();
  return Status::Ok();
}

Status Parser::ExpectOp(std::string_view op) {
  if (!IsOp(op)) return ExpectFailed(std::string(op));
  Next();
  return Status::Ok();
}

StatusOr<std::string> Parser::ExpectName() {
  if (Cur().kind != TokenKind::kName) return ExpectFailed("name");
  std::string n = Cur().text;
  Next();
  return n;
}

StatusOr<Body> Parser::Subparse(std::initializer_list<std::string_view> end_tags) {
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

StatusOr<Body> Parser::ParseBlockBody(std::initializer_list<std::string_view> end_tags,
                                      bool drop_end, const std::string& innermost) {
  SkipOp(":");
  KVF_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd));
  KVF_ASSIGN_OR_RETURN(Body body, Subparse(end_tags));
  if (Cur().kind == TokenKind::kEof) {
    std::string looking;
    for (auto t : end_tags) looking += (looking.empty() ? "'" : " or '") + std::string(t) + "'";
    return Error(
        Cur(), "Unexpected end of template. Jinja was looking for the following tags: " + looking +
                   ". The innermost block that needs to be closed is '" + innermost + "'.");
  }
  if (drop_end) Next();
  return body;
}

StatusOr<StmtPtr> Parser::ParseStatement() {
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
  for (std::string_view no : {"extends", "block", "include", "import", "from", "with", "autoescape",
                              "do", "trans", "debug"}) {
    if (tag == no) {
      return UnimplementedError(map_.Location(t.offset) + ": the '" + tag +
                                "' tag is not supported");
    }
  }
  return Error(t, "Encountered unknown tag '" + tag + "'.");
}

StatusOr<StmtPtr> Parser::ParseIf() {
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

StatusOr<StmtPtr> Parser::ParseFor() {
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
    return UnimplementedError(map_.Location(Cur().offset) + ": recursive loops are not supported");
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

StatusOr<std::vector<std::string>> Parser::ParseTargets(
    std::initializer_list<std::string_view> end) {
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

StatusOr<StmtPtr> Parser::ParseSet() {
  const uint32_t off = Cur().offset;
  Next();
  std::vector<std::string> targets;
  std::string attr;
  if (Cur().kind == TokenKind::kName && Look().kind == TokenKind::kOperator && Look().text == ".") {
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

StatusOr<std::vector<Param>> Parser::ParseSignature() {
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

StatusOr<Body> Parser::ParseFunctionBody(std::string_view end_tag, const std::string& innermost) {
  HardFrame hard(this);
  const int saved = loop_depth_;
  loop_depth_ = 0;
  auto body = ParseBlockBody({end_tag}, true, innermost);
  loop_depth_ = saved;
  return body;
}

StatusOr<StmtPtr> Parser::ParseMacro() {
  auto node = std::make_unique<Macro>(Cur().offset);
  Next();
  KVF_ASSIGN_OR_RETURN(node->name, ExpectName());
  HardFrame hard(this);
  KVF_ASSIGN_OR_RETURN(node->params, ParseSignature());
  KVF_ASSIGN_OR_RETURN(node->body, ParseFunctionBody("endmacro", "macro"));
  return StmtPtr(std::move(node));
}

StatusOr<StmtPtr> Parser::ParseCallBlock() {
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

StatusOr<StmtPtr> Parser::ParseFilterBlock() {
  auto node = std::make_unique<FilterBlock>(Cur().offset);
  Next();
  HardFrame hard(this);
  KVF_ASSIGN_OR_RETURN(node->filter, ParseFilterChain(nullptr, /*start_inline=*/true));
  KVF_ASSIGN_OR_RETURN(node->body, ParseBlockBody({"endfilter"}, true, "filter"));
  return StmtPtr(std::move(node));
}

StatusOr<StmtPtr> Parser::ParsePrint() {
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

StatusOr<StmtPtr> Parser::ParseLoopControl() {
  const Token& t = Cur();
  const bool is_break = t.text == "break";
  if (loop_depth_ == 0) return Error(t, "'" + t.text + "' outside of a loop");
  Next();
  return std::make_unique<Stmt>(is_break ? StmtKind::kBreak : StmtKind::kContinue, t.offset);
}

StatusOr<StmtPtr> Parser::ParseGeneration() {
  auto node = std::make_unique<Scope>(Cur().offset);
  node->new_scope = true;
  Next();
  KVF_ASSIGN_OR_RETURN(node->body, ParseFunctionBody("endgeneration", "generation"));
  return StmtPtr(std::move(node));
}

}  // namespace internal

StatusOr<ast::Body> Parse(const std::vector<Token>& tokens, const SourceMap& map) {
  return internal::Parser(tokens, map).ParseTemplate();
}

}  // namespace kvferry::jinja
