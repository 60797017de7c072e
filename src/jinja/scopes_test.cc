#include "jinja/scopes.h"

#include <gtest/gtest.h>

#include <string>

#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace kvferry::jinja {
namespace {

struct Analyzed {
  SourceMap map{""};
  ast::Body body;
  ast::StartUndefined root;
};

Analyzed Analyze(const std::string& source) {
  Analyzed a;
  a.map = SourceMap(NormalizeNewlines(source));
  auto tokens = Tokenize(a.map);
  EXPECT_TRUE(tokens.ok());
  auto body = Parse(*tokens, a.map);
  EXPECT_TRUE(body.ok()) << body.status();
  a.body = std::move(body).value();
  a.root = AnalyzeScopes(a.body);
  return a;
}

using Names = ast::StartUndefined;

TEST(Scopes, SetBeforeAnyUseStartsUndefined) {
  EXPECT_EQ(Analyze("{% for x in y %}{{ a }}{% endfor %}{% set a = 1 %}").root, Names{"a"});
  EXPECT_EQ(Analyze("{{ a }}{% set a = 1 %}").root, Names{});  // read first: the context's
  EXPECT_EQ(Analyze("{% set a = a %}").root, Names{});         // the value reads it first
  EXPECT_EQ(Analyze("{% macro m() %}{% endmacro %}{% set t %}x{% endset %}").root,
            (Names{"m", "t"}));
}

TEST(Scopes, IfBranchesMustAllSet) {
  EXPECT_EQ(Analyze("{% if c %}{% set a = 1 %}{% else %}{% set a = 2 %}{% endif %}").root, Names{});
  EXPECT_EQ(Analyze("{% if c %}{% set a = 1 %}{% elif d %}{% set a = 3 %}"
                    "{% else %}{% set a = 2 %}{% endif %}")
                .root,
            Names{"a"});
}

TEST(Scopes, NestedScopesSeeTheirParents) {
  auto a = Analyze("{% for x in y %}{% set b = 1 %}{% set c = 2 %}{% endfor %}{{ c }}");
  const auto& loop = static_cast<const ast::For&>(*a.body[0]);
  EXPECT_EQ(loop.body_undefined, Names{"b"});  // c is known outside: it aliases
  auto m = Analyze("{% macro f(p) %}{% set p = 1 %}{% set q = 2 %}{% endmacro %}");
  EXPECT_EQ(static_cast<const ast::Macro&>(*m.body[0]).body_undefined, Names{"q"});
}

}  // namespace
}  // namespace kvferry::jinja
