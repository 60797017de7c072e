#include "jinja/parser.h"

#include <gtest/gtest.h>

#include <string>

#include "jinja/py_format.h"

namespace kvferry::jinja {
namespace {

using namespace ast;  // NOLINT: the test prints every node kind

std::string Dump(const Expr* e);

std::string DumpArgs(const Args& a) {
  std::string out;
  for (const auto& p : a.positional) out += " " + Dump(p.get());
  for (const auto& [k, p] : a.keyword) out += " " + k + "=" + Dump(p.get());
  return out;
}

// An expression as an s-expression, so that tests can see the tree's shape.
std::string Dump(const Expr* e) {
  if (e == nullptr) return "_";
  switch (e->kind) {
    case ExprKind::kLiteral:
      return PyRepr(static_cast<const Literal*>(e)->value);
    case ExprKind::kName:
      return static_cast<const Name*>(e)->name;
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::string out = e->kind == ExprKind::kList ? "(list" : "(tuple";
      for (const auto& i : static_cast<const Sequence*>(e)->items) out += " " + Dump(i.get());
      return out + ")";
    }
    case ExprKind::kDict: {
      std::string out = "(dict";
      for (const auto& [k, v] : static_cast<const DictLit*>(e)->pairs) {
        out += " " + Dump(k.get()) + ":" + Dump(v.get());
      }
      return out + ")";
    }
    case ExprKind::kGetAttr: {
      const auto* g = static_cast<const ast::GetAttr*>(e);
      return "(. " + Dump(g->operand.get()) + " " + g->name + ")";
    }
    case ExprKind::kGetItem: {
      const auto* g = static_cast<const ast::GetItem*>(e);
      return "([] " + Dump(g->operand.get()) + " " + Dump(g->index.get()) + ")";
    }
    case ExprKind::kSlice: {
      const auto* s = static_cast<const Slice*>(e);
      return "(slice " + Dump(s->operand.get()) + " " + Dump(s->start.get()) + " " +
             Dump(s->stop.get()) + " " + Dump(s->step.get()) + ")";
    }
    case ExprKind::kCall: {
      const auto* c = static_cast<const Call*>(e);
      return "(call " + Dump(c->callee.get()) + DumpArgs(c->args) + ")";
    }
    case ExprKind::kFilter:
    case ExprKind::kTest: {
      const auto* a = static_cast<const Apply*>(e);
      const std::string head =
          e->kind == ExprKind::kFilter ? "(| " : (a->negated ? "(is-not " : "(is ");
      return head + a->name + " " + Dump(a->operand.get()) + DumpArgs(a->args) + ")";
    }
    case ExprKind::kUnary: {
      const auto* u = static_cast<const Unary*>(e);
      return "(" + u->op + " " + Dump(u->operand.get()) + ")";
    }
    case ExprKind::kBinary: {
      const auto* b = static_cast<const Binary*>(e);
      return "(" + b->op + " " + Dump(b->lhs.get()) + " " + Dump(b->rhs.get()) + ")";
    }
    case ExprKind::kCompare: {
      const auto* c = static_cast<const Compare*>(e);
      std::string out = "(cmp " + Dump(c->operand.get());
      for (const auto& [op, x] : c->ops) out += " " + op + " " + Dump(x.get());
      return out + ")";
    }
    case ExprKind::kCondition: {
      const auto* c = static_cast<const Condition*>(e);
      return "(if " + Dump(c->cond.get()) + " " + Dump(c->then.get()) + " " +
             Dump(c->otherwise.get()) + ")";
    }
  }
  return "?";
}

StatusOr<Body> ParseSource(const std::string& source, SourceMap* map) {
  *map = SourceMap(NormalizeNewlines(source));
  KVF_ASSIGN_OR_RETURN(auto tokens, Tokenize(*map));
  return Parse(tokens, *map);
}

// The expression of `{{ expr }}`, dumped; or the parse error.
std::string Expression(const std::string& expr) {
  SourceMap map("");
  auto body = ParseSource("{{ " + expr + " }}", &map);
  if (!body.ok()) return "ERROR " + std::string(body.status().message());
  return Dump(static_cast<const Output*>((*body)[0].get())->expr.get());
}

std::string ParseError(const std::string& source) {
  SourceMap map("");
  auto body = ParseSource(source, &map);
  return body.ok() ? "OK" : body.status().ToString();
}

TEST(Parser, OperatorPrecedence) {
  EXPECT_EQ(Expression("1 + 2 * 3"), "(+ 1 (* 2 3))");
  EXPECT_EQ(Expression("a or b and not c"), "(or a (and b (not c)))");
  EXPECT_EQ(Expression("a ~ b + c"), "(+ (~ a b) c)");      // ~ binds tighter than +
  EXPECT_EQ(Expression("2 ** 3 ** 2"), "(** (** 2 3) 2)");  // Jinja2 is left-associative
  EXPECT_EQ(Expression("-x|abs"), "(| abs (- x))");
  EXPECT_EQ(Expression("'a' + s|trim + 'c'"), "(+ (+ 'a' (| trim s)) 'c')");
  EXPECT_EQ(Expression("not a == b"), "(not (cmp a == b))");
  EXPECT_EQ(Expression("1 < x <= 3"), "(cmp 1 < x <= 3)");
  EXPECT_EQ(Expression("a not in b"), "(cmp a notin b)");
}

TEST(Parser, PostfixFiltersAndTests) {
  EXPECT_EQ(Expression("m.content.split('x')[-1]"),
            "([] (call (. (. m content) split) 'x') (- 1))");
  EXPECT_EQ(Expression("xs[1:][::-1]"), "(slice (slice xs 1 _ _) _ _ (- 1))");
  EXPECT_EQ(Expression("xs | map(attribute='a') | join(', ')"),
            "(| join (| map xs attribute='a') ', ')");
  EXPECT_EQ(Expression("x is not defined"), "(is-not defined x)");
  EXPECT_EQ(Expression("x is divisibleby 3"), "(is divisibleby x 3)");
  EXPECT_EQ(Expression("x is sameas none"), "(is sameas x None)");
}

TEST(Parser, LiteralsAndConditionals) {
  EXPECT_EQ(Expression("[1, 'a', (2,), {'k': none}]"), "(list 1 'a' (tuple 2) (dict 'k':None))");
  EXPECT_EQ(Expression("a if c else b if d"), "(if c a (if d b _))");
  EXPECT_EQ(Expression("1, 2"), "(tuple 1 2)");
  EXPECT_EQ(Expression("'a' 'b'"), "'ab'");
}

TEST(Parser, Statements) {
  EXPECT_EQ(ParseError("{% for k, v in d.items() if k %}{{ k }}{% else %}-{% endfor %}"), "OK");
  EXPECT_EQ(ParseError("{% set ns.x = 1 %}{% set a, b = 1, 2 %}{% set t | upper %}x{% endset %}"),
            "OK");
  EXPECT_EQ(ParseError("{% macro m(a, b=1) %}{{ caller() }}{% endmacro %}"
                       "{% call(x) m(1) %}{{ x }}{% endcall %}"),
            "OK");
  EXPECT_EQ(ParseError("{% filter upper %}x{% endfilter %}{% generation %}y{% endgeneration %}"),
            "OK");
}

TEST(Parser, ErrorsNameLineAndColumn) {
  EXPECT_EQ(ParseError("{{ 1 + }}"),
            "INVALID_ARGUMENT: line 1, column 8: unexpected 'end of print statement'");
  EXPECT_EQ(ParseError("a\n{% frob %}"),
            "INVALID_ARGUMENT: line 2, column 4: Encountered unknown tag 'frob'.");
  EXPECT_EQ(ParseError("{% for x in y %}"),
            "INVALID_ARGUMENT: line 1, column 17: Unexpected end of template. Jinja was looking "
            "for the following tags: 'endfor' or 'else'. The innermost block that needs to be "
            "closed is 'for'.");
  EXPECT_EQ(ParseError("{% break %}"),
            "INVALID_ARGUMENT: line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(ParseError("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}"),
            "INVALID_ARGUMENT: line 1, column 35: 'break' outside of a loop");
  EXPECT_EQ(ParseError("{{ x"),
            "INVALID_ARGUMENT: line 1, column 5: unexpected end of "
            "template, expected 'end of print statement'.");
}

TEST(Parser, UnknownFiltersFailUnlessInsideAnIf) {
  EXPECT_EQ(ParseError("{{ x|nope }}"),
            "INVALID_ARGUMENT: line 1, column 6: No filter named 'nope'.");
  EXPECT_EQ(ParseError("{{ x is nope }}"),
            "INVALID_ARGUMENT: line 1, column 9: No test named 'nope'.");
  EXPECT_EQ(ParseError("{% if a %}{{ x|nope }}{% endif %}{{ y|nope if c }}"), "OK");
  // Loop bodies, macros and blocks start afresh inside an if (Jinja2's new frames).
  EXPECT_EQ(ParseError("{% if a %}{% for x in y|nope %}{{ x|nope2 }}{% endfor %}{% endif %}"),
            "INVALID_ARGUMENT: line 1, column 37: No filter named 'nope2'.");
}

TEST(Parser, UnsupportedFeaturesAreUnimplemented) {
  EXPECT_EQ(ParseError("{% include 'x' %}"),
            "UNIMPLEMENTED: line 1, column 4: the 'include' tag is not supported");
  EXPECT_EQ(ParseError("{% for x in y recursive %}{% endfor %}"),
            "UNIMPLEMENTED: line 1, column 15: recursive loops are not supported");
  EXPECT_EQ(ParseError("{{ xs[1:2, 0] }}"),
            "UNIMPLEMENTED: line 1, column 7: a slice inside a tuple subscript is not supported");
  EXPECT_EQ(ParseError("{{ f(*args) }}"),
            "UNIMPLEMENTED: line 1, column 6: *args and **kwargs in calls are not supported");
}

TEST(Parser, NestingIsBounded) {
  EXPECT_NE(ParseError("{{ " + std::string(150, '(') + "1" + std::string(150, ')') + " }}")
                .find("template nests deeper than 100 levels"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  EXPECT_NE(ParseError(chain + " }}").find("expression nests deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 200; ++i) ifs += "{% if x %}";
  EXPECT_NE(ParseError(ifs).find("nests deeper than"), std::string::npos);
}

}  // namespace
}  // namespace kvferry::jinja
